"""Invariants of quota trees and reclaim, judged from raw API objects with no Berth code.

- ``tree_over_max``: no ElasticQuota of a tree (Koordinator's labels) has, summed over the
  bound pods of its whole subtree, more of a resource than its ``spec.max`` names, nor more
  than its min plus its ``berth.io/borrowing-limit``.
- ``children_min_over_parent``: the mins of a parent's children add up to no more than its
  own min, per resource (what makes every child's min a guarantee).
- ``reclaim_without_reservation``: every eviction made to reclaim quota (a victim whose
  DisruptionTarget condition says the scheduler preempted it to return capacity) comes
  after a Reservation owned by its preemptor was created. An eviction and a Reservation
  created within the same second cannot be ordered from second-resolution timestamps and
  count as in order.
- ``TreeLook``: the arithmetic the checker's liveness rules judge tree pods by: whether a
  pending pod's quota chain surely admits it, and whether a reclaim from a sibling surely
  over its runtime would place it on some node.

The tree is re-derived here from the labels and annotations, as the API objects carry
them; a pod belongs to the quota its ``quota.scheduling.koordinator.sh/name`` label names,
else to the first non-parent tree quota listing its namespace in the ``namespaces``
annotation, else to the first non-parent tree quota in its namespace.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any

from tests.reliability.objects import (
    Amounts,
    Obj,
    _add,
    _fits,
    _plus,
    amounts,
    demand,
    epoch,
    holds,
    key,
    pending,
    requests_of,
)

KOORD = "quota.scheduling.koordinator.sh/"
PARENT = KOORD + "parent"
IS_PARENT = KOORD + "is-parent"
NAME = KOORD + "name"
NAMESPACES = KOORD + "namespaces"
BERTH_KEYS = frozenset(
    f"berth.io/{k}" for k in ("lending-limit", "borrowing-limit", "weight", "min-runtime")
)
BORROWING_LIMIT = "berth.io/borrowing-limit"
PREEMPTIBLE = KOORD + "preemptible"
ROOT = "koordinator-root-quota"
RECLAIM_MARK = "preempting to return"  # both reclaim messages of CapacityScheduling
TREE_RECLAIM_MARK = "over its runtime to the quota tree"  # the tree's reclaim message
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
MILLI = Decimal("0.001")  # the finest unit a scheduler's integer arithmetic keeps
PREEMPTOR = "berth.io/preemptor"


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def in_tree(quota: Mapping[str, Any]) -> bool:
    meta = _meta(quota)
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return any(k.startswith(KOORD) or k in BERTH_KEYS for k in keys)


def tree_quotas(quotas: Iterable[Obj]) -> dict[str, Obj]:
    """Tree quotas by name, the oldest first when two share a name."""
    ordered = sorted(
        (q for q in quotas if in_tree(q)),
        key=lambda q: (_meta(q).get("creationTimestamp") or "", _meta(q).get("name") or ""),
    )
    out: dict[str, Obj] = {}
    for quota in ordered:
        out.setdefault(_meta(quota)["name"], quota)
    return out


def is_parent(quota: Obj) -> bool:
    return (_meta(quota).get("labels") or {}).get(IS_PARENT) == "true"


def quota_of(pod: Obj, tree: Mapping[str, Obj]) -> str | None:
    """The tree quota the pod's labels or namespace give it, None when none does."""
    meta = _meta(pod)
    named = (meta.get("labels") or {}).get(NAME)
    if named:
        return named if named in tree else None
    namespace = meta.get("namespace")
    leaves = [q for q in tree.values() if not is_parent(q)]
    for quota in leaves:
        listed = (_meta(quota).get("annotations") or {}).get(NAMESPACES)
        if listed and namespace in json.loads(listed):
            return str(_meta(quota)["name"])
    for quota in leaves:
        if _meta(quota).get("namespace") == namespace:
            return str(_meta(quota)["name"])
    return None


def parent_of(quota: Obj) -> str:
    return (_meta(quota).get("labels") or {}).get(PARENT) or ROOT


def _ancestors(name: str, tree: Mapping[str, Obj]) -> list[str]:
    """The quota and its ancestors up to the root (a cycle or a missing parent ends it)."""
    chain: list[str] = []
    while name in tree and name not in chain:
        chain.append(name)
        name = parent_of(tree[name])
    return chain


def _spec(quota: Obj, field: str) -> Amounts:
    return amounts((quota.get("spec") or {}).get(field))


def _borrowing_limit(quota: Obj) -> Amounts:
    """Its ``berth.io/borrowing-limit`` (a JSON resource list; unreadable: none, the
    scheduler refuses such a quota anyway)."""
    text = (_meta(quota).get("annotations") or {}).get(BORROWING_LIMIT)
    try:
        return amounts(json.loads(text)) if text else {}
    except (ValueError, TypeError):
        return {}


def caps(quota: Obj) -> dict[str, tuple[Decimal, str]]:
    """The most the quota's subtree may use of each resource, and what sets it: its max,
    or its min plus its borrowing limit where that is lower."""
    out = {r: (v, "its max") for r, v in _spec(quota, "max").items()}
    least = _spec(quota, "min")
    for r, v in _borrowing_limit(quota).items():
        limit = least.get(r, Decimal(0)) + v
        if r not in out or limit < out[r][0]:
            out[r] = (limit, "its min + borrowing limit")
    return out


def tree_used(quotas: Iterable[Obj], pods: Iterable[Obj]) -> dict[str, Amounts]:
    """What the bound pods of every tree quota's subtree request, by quota name."""
    tree = tree_quotas(quotas)
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
    """A line per tree quota whose subtree uses more than its max of some resource (or
    more than its min plus its borrowing limit)."""
    quotas = list(quotas)
    tree = tree_quotas(quotas)
    out = []
    for name, used in sorted(tree_used(quotas, pods).items()):
        limit = caps(tree[name])
        for resource, value in sorted(used.items()):
            if resource in limit and value > limit[resource][0]:
                most, what = limit[resource]
                out.append(
                    f"ElasticQuota {key(tree[name])}: its subtree's bound pods use "
                    f"{value} {resource}, over {what} {most}"
                )
    return out


def children_min_over_parent(quotas: Iterable[Obj]) -> list[str]:
    """A line per parent quota whose children's mins add up to more than its own min of
    some resource (one its min does not name counts as a min of zero)."""
    tree = tree_quotas(quotas)
    total: dict[str, Amounts] = defaultdict(dict)
    children: dict[str, list[str]] = defaultdict(list)
    for name, quota in tree.items():
        parent = parent_of(quota)
        if parent in tree:
            _add(total[parent], _spec(quota, "min"))
            children[parent].append(name)
    out = []
    for parent, mins in sorted(total.items()):
        own = _spec(tree[parent], "min")
        for resource, value in sorted(mins.items()):
            if value > own.get(resource, Decimal(0)):
                out.append(
                    f"ElasticQuota {key(tree[parent])}: its children's mins "
                    f"({', '.join(sorted(children[parent]))}) add up to {value} {resource}, "
                    f"over its min {own.get(resource, Decimal(0))}"
                )
    return out


def reclaim_victim(pod: Obj, mark: str = RECLAIM_MARK) -> bool:
    """Whether the scheduler marked the pod preempted to return quota capacity (``mark``:
    to the quota tree alone, with ``TREE_RECLAIM_MARK``)."""
    return any(
        c.get("type") == "DisruptionTarget" and mark in (c.get("message") or "")
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _event_time(event: Obj) -> float | None:
    for field in ("eventTime", "firstTimestamp", "lastTimestamp"):
        when = epoch(event.get(field))
        if when is not None:
            return when
    return epoch(_meta(event).get("creationTimestamp"))


def preemptor_of(event: Obj) -> str:
    """The preemptor's uid in "Preempted by pod <uid> on node <node>" (kube-scheduler's
    words, which a gang's preemption says first too); empty in any other message."""
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
        preemptor = preemptor_of(event)
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


def _show(values: Mapping[str, Decimal], names: Iterable[str]) -> str:
    """The amounts of the resources ``names`` (those the tree limits), zero included."""
    return ", ".join(f"{r} {values.get(r, Decimal(0)).normalize()}" for r in sorted(names))


@dataclass
class TreeLook:
    """One look's tree arithmetic, as bounds the scheduler's own view cannot cross: what
    each quota's subtree surely uses (``used_low``: bound pods not leaving) and may count
    (``used_high``: pods leaving and pods nominated too), and the runtime each surely has
    (``runtime_low``), re-derived from the documented rules (docs/elasticquota.md): the
    root hands down the nodes' allocatable less what pods outside the tree hold; siblings
    first get their demand up to their min (mins scaled down when they exceed what is
    handed down); an only child gets its demand up to what is handed down; a demand is
    the request of pods placed and waiting, capped at max and at min + borrowing limit."""

    tree: dict[str, Obj]
    children: dict[str, list[str]]
    used_low: dict[str, Amounts]
    used_high: dict[str, Amounts]
    runtime_low: dict[str, Amounts]
    # Each node's pods a reclaim may take: (their quota, the pod), bound and not leaving,
    # preemptible, not running in a reservation.
    takeable: dict[str, list[tuple[str, Obj]]]

    def chain(self, leaf: str) -> list[str]:
        return _ancestors(leaf, self.tree)

    def _within(self, name: str, used: Amounts, wanted: Mapping[str, Decimal]) -> bool:
        runtime = self.runtime_low.get(name, {})
        return all(
            used.get(r, Decimal(0)) + wanted[r] <= runtime.get(r, Decimal(0))
            for r in _spec(self.tree[name], "max")
            if wanted.get(r, Decimal(0)) > 0
        )

    def _used(self, name: str, pod: Obj, freed: Mapping[str, Amounts]) -> Amounts:
        """What the quota may count as used, less the pod's own nomination (it does not
        compete with itself) and less ``freed``."""
        used = _plus(self.used_high.get(name, {}), freed.get(name, {}), -1)
        if (pod.get("status") or {}).get("nominatedNodeName"):
            _add(used, requests_of(pod["spec"]), -1)
        return used

    def admits(self, leaf: str, pod: Obj, freed: Mapping[str, Amounts] | None = None) -> bool:
        """Every quota of the leaf's chain surely stays within its runtime with the pod
        (with ``freed``, by quota, given back)."""
        wanted = requests_of(pod["spec"])
        return all(
            self._within(name, self._used(name, pod, freed or {}), wanted)
            for name in self.chain(leaf)
        )

    def over_runtime(self, name: str) -> Amounts:
        """What the quota surely uses beyond its runtime, per resource: a child of a parent
        (not the root) gets at most the parent's max less what its siblings surely get."""
        parent = parent_of(self.tree[name])
        if parent not in self.tree:
            return {}
        out: Amounts = {}
        for r, top in _spec(self.tree[parent], "max").items():
            others = sum(
                (
                    self.runtime_low[s].get(r, Decimal(0))
                    for s in self.children[parent]
                    if s != name
                ),
                Decimal(0),
            )
            beyond = self.used_low[name].get(r, Decimal(0)) - (top - others)
            if beyond > 0:
                out[r] = beyond
        return out

    def reclaim_node(
        self, leaf: str, pod: Obj, nodes: Sequence[str], room: Callable[[str], Amounts]
    ) -> str:
        """A node where the pod, its own quota surely within its runtime with it, fits by
        every filter (``nodes``, with ``room``) and by its quota chain once the pods there
        of quotas surely over their runtime (in a resource it asks for) are evicted, and
        what they free; "" when there is none."""
        wanted = requests_of(pod["spec"])
        if not self._within(leaf, self._used(leaf, pod, {}), wanted):
            return ""
        asked = {r for r, v in wanted.items() if v > 0}
        over = {name for name in self.tree if name != leaf and asked & set(self.over_runtime(name))}
        if not over:
            return ""
        for node in nodes:
            victims = [p for quota, p in self.takeable.get(node, ()) if quota in over]
            space = room(node)
            freed: dict[str, Amounts] = defaultdict(dict)
            for victim in victims:
                _add(space, demand(victim["spec"]))
                for name in self.chain(quota_of(victim, self.tree) or ""):
                    _add(freed[name], requests_of(victim["spec"]))
            if victims and _fits(demand(pod["spec"]), space) and self.admits(leaf, pod, freed):
                names = self.runtime_low.get(leaf, {})
                return (
                    f"{node} frees {_show(freed[self.chain(leaf)[-1]], names)} of "
                    f"{', '.join(sorted(over))} (over their runtime); {leaf} uses "
                    f"{_show(self.used_high.get(leaf, {}), names)}, its runtime at least "
                    f"{_show(self.runtime_low.get(leaf, {}), names)}"
                )
        return ""


def tree_look(
    quotas: Iterable[Obj], pods: Iterable[Obj], nodes: Mapping[str, Obj], sure: Iterable[str]
) -> TreeLook:
    """The look's tree arithmetic over its ``nodes``, of which the scheduler surely sees
    ``sure`` (see ``TreeLook``). A pod left on a deleted node (until it is collected) may
    or may not count for its quota: it counts in ``used_high`` only."""
    allocatable: Amounts = {}
    for name in sure:
        _add(allocatable, amounts((nodes[name].get("status") or {}).get("allocatable")))
    tree = tree_quotas(quotas)
    children: dict[str, list[str]] = defaultdict(list)
    for name, quota in sorted(tree.items()):
        children[parent_of(quota)].append(name)
    used_low: dict[str, Amounts] = {name: {} for name in tree}
    used_high: dict[str, Amounts] = {name: {} for name in tree}
    requested: dict[str, Amounts] = {name: {} for name in tree}
    takeable: dict[str, list[tuple[str, Obj]]] = defaultdict(list)
    outside: Amounts = {}
    for pod in pods:
        leaf = quota_of(pod, tree)
        wanted = requests_of(pod.get("spec") or {})
        meta = _meta(pod)
        if leaf is None:
            if holds(pod):
                _add(outside, wanted)
            continue
        chain = _ancestors(leaf, tree)
        if holds(pod):
            for name in chain:
                _add(used_high[name], wanted)
            if not meta.get("deletionTimestamp") and pod["spec"]["nodeName"] in nodes:
                for name in chain:
                    _add(used_low[name], wanted)
                _add(requested[leaf], wanted)
                labels = meta.get("labels") or {}
                annotations = meta.get("annotations") or {}
                if labels.get(PREEMPTIBLE) != "false" and ALLOCATED not in annotations:
                    takeable[pod["spec"]["nodeName"]].append((leaf, pod))
        elif pending(pod):
            _add(requested[leaf], wanted)
            if (pod.get("status") or {}).get("nominatedNodeName"):
                for name in chain:
                    _add(used_high[name], wanted)
    resources = {r for quota in tree.values() for r in _spec(quota, "max")}
    demand_low: dict[str, Amounts] = {}

    def visit(name: str) -> Amounts:
        if name in demand_low:
            return demand_low[name]
        demand_low[name] = {}  # a cycle adds nothing
        asked = dict(requested[name])
        for child in children.get(name, ()):
            _add(asked, visit(child))
        limit = caps(tree[name])
        demand_low[name] = {
            r: min(v, limit[r][0]) if r in limit else v for r, v in asked.items() if r in resources
        }
        return demand_low[name]

    for name in tree:
        visit(name)
    runtime_low: dict[str, Amounts] = {name: {} for name in tree}
    handed = {r: max(allocatable.get(r, Decimal(0)) - outside.get(r, Decimal(0)), Decimal(0))
              for r in resources}  # fmt: skip
    pending_parents: list[tuple[str, Amounts]] = [(ROOT, handed)]
    seen: set[str] = set()
    while pending_parents:
        parent, amount = pending_parents.pop()
        kids = [k for k in children.get(parent, ()) if k not in seen]
        seen.update(kids)
        for r in resources:
            have = amount.get(r, Decimal(0))
            mins = {k: _spec(tree[k], "min").get(r, Decimal(0)) for k in kids}
            total = sum(mins.values(), Decimal(0))
            for k in kids:
                wants = demand_low[k].get(r, Decimal(0))
                if len(kids) == 1:
                    floor = have
                elif total <= have:
                    floor = mins[k]
                else:  # scaled down in proportion, to the unit below
                    floor = max(
                        (mins[k] * have / total).quantize(MILLI, ROUND_DOWN) - MILLI, Decimal(0)
                    )
                runtime_low[k][r] = min(wants, floor)
        pending_parents += [(k, runtime_low[k]) for k in kids]
    return TreeLook(tree, dict(children), used_low, used_high, runtime_low, dict(takeable))
