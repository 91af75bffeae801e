"""Invariants of quota trees and reclaim, judged from raw API objects with no Berth code.

- ``tree_over_max``: no ElasticQuota of a tree (Koordinator's labels) has, summed over the
  bound pods of its whole subtree, more of a resource than its ``spec.max`` names.
- ``reclaim_without_reservation``: every eviction made to reclaim quota (a victim whose
  DisruptionTarget condition says the scheduler preempted it to return capacity) comes
  after a Reservation owned by its preemptor was created. An eviction and a Reservation
  created within the same second cannot be ordered from second-resolution timestamps and
  count as in order.

The tree is re-derived here from the labels and annotations, as the API objects carry
them; a pod belongs to the quota its ``quota.scheduling.koordinator.sh/name`` label names,
else to the first non-parent tree quota listing its namespace in the ``namespaces``
annotation, else to the first non-parent tree quota in its namespace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from tests.reliability.objects import Amounts, Obj, _add, amounts, epoch, holds, key, requests_of

KOORD = "quota.scheduling.koordinator.sh/"
PARENT = KOORD + "parent"
IS_PARENT = KOORD + "is-parent"
NAME = KOORD + "name"
NAMESPACES = KOORD + "namespaces"
BERTH_KEYS = frozenset(
    f"berth.io/{k}" for k in ("lending-limit", "borrowing-limit", "weight", "min-runtime")
)
ROOT = "koordinator-root-quota"
RECLAIM_MARK = "preempting to return"  # both reclaim messages of CapacityScheduling
PREEMPTOR = "berth.io/preemptor"


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def in_tree(quota: Mapping[str, Any]) -> bool:
    meta = _meta(quota)
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return any(k.startswith(KOORD) or k in BERTH_KEYS for k in keys)


def _tree(quotas: Iterable[Obj]) -> dict[str, Obj]:
    """Tree quotas by name, the oldest first when two share a name."""
    ordered = sorted(
        (q for q in quotas if in_tree(q)),
        key=lambda q: (_meta(q).get("creationTimestamp") or "", _meta(q).get("name") or ""),
    )
    out: dict[str, Obj] = {}
    for quota in ordered:
        out.setdefault(_meta(quota)["name"], quota)
    return out


def _is_parent(quota: Obj) -> bool:
    return (_meta(quota).get("labels") or {}).get(IS_PARENT) == "true"


def quota_of(pod: Obj, tree: Mapping[str, Obj]) -> str | None:
    """The tree quota the pod's labels or namespace give it, None when none does."""
    meta = _meta(pod)
    named = (meta.get("labels") or {}).get(NAME)
    if named:
        return named if named in tree else None
    namespace = meta.get("namespace")
    leaves = [q for q in tree.values() if not _is_parent(q)]
    for quota in leaves:
        listed = (_meta(quota).get("annotations") or {}).get(NAMESPACES)
        if listed and namespace in json.loads(listed):
            return str(_meta(quota)["name"])
    for quota in leaves:
        if _meta(quota).get("namespace") == namespace:
            return str(_meta(quota)["name"])
    return None


def _ancestors(name: str, tree: Mapping[str, Obj]) -> list[str]:
    """The quota and its ancestors up to the root (a cycle or a missing parent ends it)."""
    chain: list[str] = []
    while name in tree and name not in chain:
        chain.append(name)
        name = (_meta(tree[name]).get("labels") or {}).get(PARENT) or ROOT
    return chain


def tree_used(quotas: Iterable[Obj], pods: Iterable[Obj]) -> dict[str, Amounts]:
    """What the bound pods of every tree quota's subtree request, by quota name."""
    tree = _tree(quotas)
    used: dict[str, Amounts] = {name: {} for name in tree}
    for pod in pods:
        if not holds(pod):
            continue
        leaf = quota_of(pod, tree)
        if leaf is None:
            continue
        request = requests_of(pod.get("spec") or {})
        for name in _ancestors(leaf, tree):
            _add(used[name], request)
    return used


def tree_over_max(quotas: Iterable[Obj], pods: Iterable[Obj]) -> list[str]:
    """A line per tree quota whose subtree uses more than its max of some resource."""
    quotas = list(quotas)
    tree = _tree(quotas)
    out = []
    for name, used in sorted(tree_used(quotas, pods).items()):
        limit = amounts((tree[name].get("spec") or {}).get("max"))
        for resource, value in sorted(used.items()):
            if resource in limit and value > limit[resource]:
                out.append(
                    f"ElasticQuota {key(tree[name])}: its subtree's bound pods use "
                    f"{value} {resource}, over its max {limit[resource]}"
                )
    return out


def reclaim_victim(pod: Obj) -> bool:
    """Whether the scheduler marked the pod preempted to return quota capacity."""
    return any(
        c.get("type") == "DisruptionTarget" and RECLAIM_MARK in (c.get("message") or "")
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _event_time(event: Obj) -> float | None:
    for field in ("eventTime", "firstTimestamp", "lastTimestamp"):
        when = epoch(event.get(field))
        if when is not None:
            return when
    return epoch(_meta(event).get("creationTimestamp"))


def _preemptor_of(event: Obj) -> str:
    """The preemptor's uid in "Preempted by pod <uid> on node <node>"."""
    words = (event.get("message") or "").split()
    return words[3] if len(words) > 3 and words[:3] == ["Preempted", "by", "pod"] else ""


def _owned_by(reservation: Obj, uid: str) -> bool:
    if (_meta(reservation).get("labels") or {}).get(PREEMPTOR) == uid:
        return True
    owners = (reservation.get("spec") or {}).get("owners") or ()
    return any((o.get("object") or {}).get("uid") == uid for o in owners)


def reclaim_without_reservation(
    events: Iterable[Obj], victims: Mapping[str, Obj], reservations: Iterable[Obj]
) -> list[str]:
    """A line per quota-reclaim eviction (a ``Preempted`` event whose victim, from
    ``victims`` by uid, was preempted to return capacity) with no Reservation owned by its
    preemptor created at or before the eviction."""
    reservations = list(reservations)
    out = []
    for event in events:
        if event.get("reason") != "Preempted":
            continue
        victim = victims.get((event.get("involvedObject") or {}).get("uid", ""))
        if victim is None or not reclaim_victim(victim):
            continue
        preemptor = _preemptor_of(event)
        when = _event_time(event)
        made = [
            created
            for r in reservations
            if _owned_by(r, preemptor)
            and (created := epoch(_meta(r).get("creationTimestamp"))) is not None
        ]
        if when is None or not any(int(c) <= int(when) for c in made):
            out.append(
                f"Pod {key(victim)} was evicted to reclaim quota for pod {preemptor or '?'} "
                f"with no Reservation owned by it made before"
                + ("" if not made else f" (one was made {min(made) - (when or 0):.0f}s after)")
            )
    return out
