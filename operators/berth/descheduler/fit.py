"""nodeFit: whether a pod could run on a node (labels, required affinity, taints, requests).

The balancer moves only pods that fit some idle node: a pod no idle node can take would
only trade a hot node for a failed migration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth.api.meta import Taint, TaintEffect, Toleration
from berth.podresources import pod_requests, resource_list

__all__ = ["fits"]

Json = Mapping[str, Any]


def _requirement(req: Json, value: str | None) -> bool:
    operator = req.get("operator")
    values = [str(v) for v in req.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term(term: Json, labels: Mapping[str, str], name: str) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches nothing
    return all(_requirement(r, labels.get(str(r.get("key")))) for r in expressions) and all(
        _requirement(r, name if r.get("key") == "metadata.name" else None) for r in fields
    )


def _affinity(spec: Json, labels: Mapping[str, str], name: str) -> bool:
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_term(t, labels, name) for t in required.get("nodeSelectorTerms") or ())


def _tolerated(spec: Json, node: Json) -> bool:
    tolerations = [Toleration.from_dict(t) for t in spec.get("tolerations") or ()]
    for raw in (node.get("spec") or {}).get("taints") or ():
        taint = Taint.from_dict(raw)
        if taint.effect == TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


def fits(pod: Json, node: Json, requested: Mapping[str, int]) -> bool:
    """Whether ``pod`` could be placed on ``node``, whose pods already request ``requested``."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name"))
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    if not _affinity(spec, labels, name) or not _tolerated(spec, node):
        return False
    allocatable = resource_list((node.get("status") or {}).get("allocatable"))
    needs = pod_requests(spec)
    return all(
        requested.get(resource, 0) + amount <= allocatable.get(resource, 0)
        for resource, amount in needs.items()
        if amount
    )
