"""What the tree quotas' status and annotations should say: used, request, runtime,
borrowed and lent, and whether the quota takes part in the tree.

The same numbers go to ``status`` (Berth's columns) and to the annotations Koordinator's
tools read (``quota.scheduling.koordinator.sh/runtime`` and ``.../request``, JSON resource
lists). A parent's used and request are its subtree's. ``borrowed`` is what is used over
min, ``lent`` the min left unused that others may take (none when the quota does not lend,
at most its lending limit).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.api.base import format_time
from berth.podresources import Resources
from berth.quota.check import quota_request
from berth.quota.tree import (
    ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME,
    QuotaTree,
    TreeError,
    TreeQuota,
    build_tree,
    parse_pod,
)
from berth.quota.treeadmission import TreePod, tree_state
from berth.quota.usage import as_resource_list

ACTIVE = "Active"


@dataclass(frozen=True)
class PodSeen:
    """A live pod as the operator's index keeps it for the tree."""

    namespace: str
    labels: dict[str, str]  # only those under the tree's prefix
    requests: dict[str, int]
    bound: bool


def tree_pods(tree: QuotaTree, pods: Iterable[PodSeen]) -> tuple[list[TreePod], Resources]:
    """The pods of tree quotas, and what the bound pods outside the tree hold."""
    inside: list[TreePod] = []
    outside: Resources = {}
    for pod in pods:
        try:
            quota = tree.resolve(pod.namespace, pod.labels)
            preemptible = parse_pod(pod.labels).preemptible
        except TreeError:
            quota, preemptible = None, True
        request = quota_request(pod.requests)
        if quota is not None:
            inside.append(TreePod(quota, request, pod.bound, preemptible))
        elif pod.bound:
            for resource, value in request.items():
                outside[resource] = outside.get(resource, 0) + value
    return inside, outside


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(datetime.now(UTC)),
    }


def _active(tree: QuotaTree, quota: TreeQuota) -> tuple[str, str, str]:
    if quota.is_parent:
        over = tree.min_overcommitted(quota.name)
        if over:
            return (
                "True",
                "ChildrenMinExceedsMin",
                f"the children's min add up to more than this quota's min for {', '.join(over)}"
                " (Σ children's min must not exceed the parent's min); their mins are scaled "
                "down in proportion",
            )
    return "True", "InQuotaTree", f"in the quota tree under {quota.parent}"


def _differs(current: Mapping[str, Any] | None, wanted: Mapping[str, str]) -> bool:
    return dict(current or {}) != dict(wanted)


def _patch_map(current: Mapping[str, Any] | None, wanted: dict[str, str]) -> dict[str, Any]:
    """A merge patch from ``current`` to ``wanted``: keys no longer wanted go to null."""
    gone: dict[str, Any] = dict.fromkeys(set(current or {}) - set(wanted))
    return {**gone, **wanted}


def _lent(quota: TreeQuota, used: Mapping[str, int], resource: str) -> int:
    """The unused min others may use: none when the quota does not lend, at most its limit."""
    if not quota.allow_lent:
        return 0
    unused = max(quota.min.get(resource, 0) - used.get(resource, 0), 0)
    limit = quota.lending_limit.get(resource)
    return unused if limit is None else min(unused, limit)


def _resources(values: Mapping[str, int], names: Iterable[str]) -> dict[str, str]:
    return as_resource_list({r: values.get(r, 0) for r in names})


@dataclass(frozen=True)
class TreePatch:
    """What to write to one quota: a status patch and an annotations patch (either empty)."""

    namespace: str
    name: str
    status: dict[str, Any]
    annotations: dict[str, Any]


def desired_tree(
    objects: Iterable[Mapping[str, Any]], pods: Iterable[PodSeen], allocatable: Mapping[str, int]
) -> list[TreePatch]:
    """The patches that bring every tree quota's status and annotations up to date."""
    objects = list(objects)
    tree = build_tree(objects)
    inside, outside = tree_pods(tree, pods)
    total = {r: v - outside.get(r, 0) for r, v in allocatable.items()}
    state = tree_state(tree, inside, total)
    patches: list[TreePatch] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        current_status = obj.get("status") or {}
        current_active = next(
            (
                (c.get("status"), c.get("reason"), c.get("message"))
                for c in current_status.get("conditions") or ()
                if c.get("type") == ACTIVE
            ),
            None,
        )
        refused = tree.refused.get((namespace, name))
        quota = tree.quotas.get(name)
        if refused is not None or quota is None:
            if refused is None:
                continue  # not a tree quota: the namespace's flat rules write its status
            status: dict[str, Any] = {}
            if current_active != ("False", "Refused", refused):
                status["conditions"] = [_condition("False", "Refused", refused)]
            if status:
                patches.append(TreePatch(namespace, name, status, {}))
            continue
        names = sorted(quota.max.keys() | quota.min.keys())
        used = state.used.get(name, {})
        wanted = {
            "used": _resources(used, names),
            "request": _resources(state.request.get(name, {}), names),
            "runtime": _resources(state.runtime.get(name, {}), sorted(quota.max)),
            "borrowed": _resources(
                {r: max(used.get(r, 0) - quota.min.get(r, 0), 0) for r in names}, names
            ),
            "lent": _resources({r: _lent(quota, used, r) for r in names}, names),
        }
        status = {
            field: _patch_map(current_status.get(field), value)
            for field, value in wanted.items()
            if _differs(current_status.get(field), value)
        }
        active = _active(tree, quota)
        if current_active != active:
            status["conditions"] = [_condition(*active)]
        annotations = meta.get("annotations") or {}
        wanted_annotations = {
            ANNOTATION_RUNTIME: json.dumps(wanted["runtime"], sort_keys=True),
            ANNOTATION_REQUEST: json.dumps(wanted["request"], sort_keys=True),
        }
        changed = {k: v for k, v in wanted_annotations.items() if annotations.get(k) != v}
        if status or changed:
            patches.append(TreePatch(namespace, name, status, changed))
    return patches
