"""Koordinator's root, default and system ElasticQuota objects, as its quota plugin makes them
at start in ``quotaGroupNamespace`` when they are absent.

Berth needs none of the three objects (the quotas are implicit, see ``berth.quota.tree``);
with ``quotaGroupNamespace`` set it makes them as Koordinator does, so a configuration moved
from Koordinator keeps the objects its users read status from. An object of the name that
exists already, in any namespace, is left as it is: it is that quota, and its max wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from berth.api.elasticquota import CRD
from berth.quota.tree import (
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_IS_PARENT,
    LABEL_PARENT,
    OUTSIDE_MAX_ARGS,
    ROOT,
)

ARG: Final = "quotaGroupNamespace"
_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def quota_group_namespace(args: Mapping[str, Any]) -> str | None:
    """The namespace named by ``quotaGroupNamespace`` (None: not set); raises ``ValueError``
    naming the argument when it is not a namespace name."""
    value = args.get(ARG)
    if value is None:
        return None
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise ValueError(f"{ARG}: {value!r} is not a namespace name (a DNS-1123 label)")
    return value


def reserved_quota_objects(namespace: str, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The three objects, root first: the root a parent under nothing that lends nothing;
    the default and system quotas with the max their argument gives (none when absent)."""
    api_version = CRD.api_version
    root = {
        "apiVersion": api_version,
        "kind": CRD.kind,
        "metadata": {
            "name": ROOT,
            "namespace": namespace,
            "labels": {
                LABEL_IS_PARENT: "true",
                LABEL_ALLOW_LENT_RESOURCE: "false",
                LABEL_PARENT: "",
            },
        },
        "spec": {},
    }
    outside = [
        {
            "apiVersion": api_version,
            "kind": CRD.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"max": dict(args[arg])} if args.get(arg) else {},
        }
        for name, arg in sorted(OUTSIDE_MAX_ARGS.items(), key=lambda item: item[1])
    ]
    return [root, *outside]
