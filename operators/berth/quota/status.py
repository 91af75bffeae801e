"""What an ElasticQuota's status should say: ``used`` and the ``Active`` condition.

One quota governs a namespace, the oldest; any other gets ``Active=False`` saying which one
governs, and is ignored by the scheduler. Quotas of the quota tree (``berth.quota.tree``)
are not a namespace's: :mod:`berth.quota.treestatus` writes theirs. The operator keeps a
:class:`QuotaSeen` per quota and a :class:`PodRequests` per counted pod, and writes the
patches :func:`desired` returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.api.base import format_time
from berth.quota.check import precedence
from berth.quota.tree import is_tree_quota
from berth.quota.usage import as_resource_list, used

__all__ = ["ACTIVE", "PodRequests", "QuotaSeen", "desired", "quota_seen"]

ACTIVE = "Active"


@dataclass(frozen=True)
class QuotaSeen:
    """A quota as the operator's index keeps it: enough to order, compute and compare."""

    name: str
    created: str
    named: frozenset[str]
    used: dict[str, str]
    active: tuple[str, str] | None  # (status, message) of the Active condition
    tree: bool = False  # a quota of the quota tree, whose status the tree decides


@dataclass(frozen=True)
class PodRequests:
    name: str
    requests: dict[str, int]


def quota_seen(name: str, body: Mapping[str, Any]) -> QuotaSeen:
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    active = next(
        (
            (c.get("status"), c.get("message"))
            for c in status.get("conditions") or ()
            if c.get("type") == ACTIVE
        ),
        None,
    )
    return QuotaSeen(
        name=name,
        created=str((body.get("metadata") or {}).get("creationTimestamp", "")),
        named=frozenset([*(spec.get("min") or {}), *(spec.get("max") or {})]),
        used=dict(status.get("used") or {}),
        active=active,
        tree=is_tree_quota(body),
    )


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    now = format_time(datetime.now(UTC))
    return {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def desired(
    namespace: str, seen: Iterable[QuotaSeen], pods: Iterable[PodRequests]
) -> dict[str, dict[str, Any]]:
    """Status patches (by quota name) that bring the namespace's quotas up to date."""
    ordered = sorted((q for q in seen if not q.tree), key=lambda q: precedence(q.created, q.name))
    if not ordered:
        return {}
    governing, *others = ordered
    patches: dict[str, dict[str, Any]] = {}
    usage = as_resource_list(used((p.requests for p in pods), governing.named))
    message = f"governs namespace {namespace}"
    status: dict[str, Any] = {}
    if usage != governing.used:
        # A merge patch keeps keys it does not mention: resources no longer used go to null.
        gone: dict[str, str | None] = dict.fromkeys(governing.used.keys() - usage.keys())
        status["used"] = {**gone, **usage}
    if governing.active != ("True", message):
        status["conditions"] = [_condition("True", "Governing", message)]
    if status:
        patches[governing.name] = status
    for quota in others:
        message = (
            f"ignored: ElasticQuota {governing.name} already governs namespace {namespace} "
            "(one quota per namespace)"
        )
        if quota.active != ("False", message):
            patches[quota.name] = {
                "used": None,
                "conditions": [_condition("False", "DuplicateQuota", message)],
            }
    return patches
