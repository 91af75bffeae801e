"""NodeResourcesFit (filter and the allocation score) and NodeResourcesBalancedAllocation.

The filter compares the pod's requests with allocatable minus what the node's pods (and
nominated preemptors of at least the pod's priority) request. Scores follow kube-scheduler:
cpu and memory use the "non-zero" requests (100m / 200Mi for containers asking nothing), a
resource a node has none of is left out, results are integers 0..100.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError

from berth.api.reservation import TERMINAL_PHASES, Reservation
from berth.podresources import CPU, MEMORY, PODS, is_extended
from berth.quota.tree import is_tree_quota
from berth.reservation.matching import facts_of, is_owner
from berth.scheduler.cache.nodetable import BASE_RESOURCES, Ints, Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.view import object_key
from berth.scheduler.config import ConfigError
from berth.scheduler.framework.capacity import free_at, free_capacity
from berth.scheduler.framework.clusterevents import (
    ELASTIC_QUOTA,
    NODE,
    POD,
    RESERVATION,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    Handle,
    Plugin,
    Reason,
    Verdict,
)

TOO_MANY_PODS = "Too many pods"
# The cycle state's entry for what the pod asks for, by column (see insufficient_at).
ASKED_KEY = "NodeResourcesFit/asked"
DEFAULT_RESOURCES = ({"name": CPU, "weight": 1}, {"name": MEMORY, "weight": 1})
STRATEGIES = ("LeastAllocated", "MostAllocated")


def insufficient(
    state: CycleState, pod: PodInfo, nodes: NodeTable, ignored: Callable[[str], bool]
) -> Verdict:
    """Rows where the pod does not fit, with kube-scheduler's reason per resource (those
    ``ignored`` not checked)."""
    need = nodes.vector({r: v for r, v in pod.requests.items() if not ignored(r)})
    need[nodes.columns[PODS]] = 1
    # Only the columns the pod asks for: a resource it does not ask for never fails.
    asked = np.flatnonzero(need > 0)
    wanted = need[asked]
    free = free_capacity(state, nodes)[:, asked]
    short = free < wanted
    failed: Mask = np.logical_or.reduce(short, axis=1)
    if not failed.any():
        return Verdict.all(nodes)
    # A request above the node's allocatable: no eviction can make room (kube-scheduler
    # marks the node UnschedulableAndUnresolvable, "Preemption is not helpful").
    too_big = (nodes.allocatable[: nodes.size, asked] < wanted).any(axis=1)
    too_big &= nodes.present[: nodes.size]
    reasons = []
    by_column = {col: resource for resource, col in nodes.columns.items()}
    for i, col in enumerate(asked.tolist()):
        column_short = short[:, i]
        if column_short.any():
            resource = by_column[col]
            message = TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"
            reasons.append(Reason(column_short & ~too_big, message))
            if (column_short & too_big).any():
                reasons.append(Reason(column_short & too_big, message, resolvable=False))
    return Verdict(~failed, tuple(reasons))


def insufficient_at(
    state: CycleState,
    pod: PodInfo,
    nodes: NodeTable,
    row: int,
    ignored: Callable[[str], bool],
    without: Sequence[PodInfo] = (),
) -> tuple[str, ...]:
    """``insufficient``'s reasons for one row, in its order, without judging every node;
    with ``without``'s pods (counted on the row) as if they had left it. What the pod asks
    for is worked out once per attempt (and again if a resource column appeared
    meanwhile): a preemption's dry runs ask hundreds of times."""
    asked_for = state.data.get(ASKED_KEY)
    if asked_for is None or asked_for[0] != (pod.uid, len(nodes.columns)):
        need = nodes.vector({r: v for r, v in pod.requests.items() if not ignored(r)})
        need[nodes.columns[PODS]] = 1
        asked = np.flatnonzero(need > 0)
        by_column = {col: resource for resource, col in nodes.columns.items()}
        names = [by_column[c] for c in asked.tolist()]
        messages = [TOO_MANY_PODS if r == PODS else f"Insufficient {r}" for r in names]
        cols = tuple(asked.tolist())
        asked_for = (pod.uid, len(nodes.columns)), cols, need[asked].tolist(), messages, names
        state.data[ASKED_KEY] = asked_for
    _, cols, wanted, messages, names = asked_for
    returned = None
    if without:
        counted = nodes.pods[row]
        leaving = [counted[other.uid] for other in without if other.uid in counted]
        returned = [
            len(leaving) if r == PODS else sum(o.requests.get(r, 0) for o in leaving) for r in names
        ]
    free = free_at(state, nodes, row, cols, returned)
    return tuple(m for m, f, w in zip(messages, free, wanted, strict=True) if f < w)


def _requested_and_allocatable(
    pod: PodInfo, nodes: NodeTable, rows: Ints, resources: list[str], *, non_zero: bool
) -> tuple[Ints, Ints]:
    """(requested incl. the pod, allocatable) for the scored rows, one column per resource."""
    requested = np.zeros((len(rows), len(resources)), dtype=np.int64)
    allocatable = np.zeros_like(requested)
    for i, resource in enumerate(resources):
        if resource not in BASE_RESOURCES and not pod.requests.get(resource):
            continue  # an extended resource the pod does not ask for is left out
        col = nodes.column(resource)
        allocatable[:, i] = nodes.allocatable[rows, col]
        if non_zero and resource in (CPU, MEMORY):
            j = 0 if resource == CPU else 1
            own = pod.nonzero_cpu if resource == CPU else pod.nonzero_memory
            requested[:, i] = nodes.nonzero_requested[rows, j] + own
        else:
            requested[:, i] = nodes.requested[rows, col] + pod.requests.get(resource, 0)
    return requested, allocatable


def _weights(args: dict[str, Any]) -> tuple[list[str], Ints]:
    resources: list[dict[str, Any]] = list(args.get("resources") or DEFAULT_RESOURCES)
    names = [str(r["name"]) for r in resources]
    weights = np.array([int(r.get("weight", 1)) for r in resources], dtype=np.int64)
    if (weights <= 0).any():
        raise ConfigError("resource weights must be positive")
    return names, weights


def _holding(obj: Any) -> tuple[str, str] | None:
    """(node, what it holds) of a Reservation holding room on a node, else None."""
    if not obj:
        return None
    status = obj.get("status") or {}
    node = status.get("nodeName")
    if not node or status.get("phase") in TERMINAL_PHASES:
        return None
    return str(node), repr(sorted((status.get("allocatable") or {}).items()))


def _names(args: dict[str, Any], field: str) -> frozenset[str]:
    given = args.get(field) or []
    if not isinstance(given, list) or not all(isinstance(n, str) for n in given):
        raise ConfigError(f"{field}: expected a list of names")
    return frozenset(given)


class NodeResourcesFit(Plugin):
    name = "NodeResourcesFit"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        strategy = args.get("scoringStrategy") or {}
        self.strategy = strategy.get("type", "LeastAllocated")
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"NodeResourcesFit scoringStrategy.type {self.strategy!r} is not supported "
                f"(supported: {', '.join(STRATEGIES)})"
            )
        self.resources, self.weights = _weights(strategy)
        self.ignored = _names(args, "ignoredResources")
        self.ignored_groups = _names(args, "ignoredResourceGroups")
        for group in self.ignored_groups:
            if "/" in group:
                raise ConfigError(
                    f"ignoredResourceGroups: {group!r} contains '/'; name the group alone "
                    "(example.com for example.com/gpu)"
                )
        # (the ElasticQuota version last looked at, whether any of them is a tree quota)
        self._quotas_seen: tuple[int, bool] = (-1, False)
        # The Reservation last parsed for a hint: one event asks for every rejected pod.
        self._parsed: tuple[dict[str, Any], Reservation] | None = None

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN, self.after_pod_change),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE, self.after_node_change),
            on(RESERVATION, ActionType.ALL, self.after_reservation_change),
        )

    def after_node_change(self, pod: PodInfo, old: Any, new: Any) -> bool:
        """A node added, or its allocatable changed, helps a pod whose requests fit within
        that node's allocatable, as kube-scheduler's hint says: one that asks for more than
        the whole node would fail there again. Without it, every node added tried again
        every pod Fit had rejected."""
        if new is None:
            return True
        nodes = self.handle.view.nodes
        row = nodes.index.get(str((new.get("metadata") or {}).get("name", "")))
        if row is None:
            return True
        for resource, amount in {**pod.requests, PODS: 1}.items():
            if amount <= 0 or self.ignores(resource):
                continue
            col = nodes.columns.get(resource)
            if col is None or nodes.allocatable[row, col] < amount:
                return False  # the node has none of it, or less than the pod asks
        return True

    def after_reservation_change(self, pod: PodInfo, old: Any, new: Any) -> bool:
        """A Reservation's change helps a pod Fit rejected when the pod may own it (what it
        holds becomes the pod's), or when it gave back what it held on a node, as a pod
        leaving that node does. A reservation placed or made elsewhere takes room and
        never helps. Without this, every reservation created, placed or expiring tried
        again every pod Fit had rejected."""
        obj = new if new is not None else old
        if obj is None:
            return True
        if self._may_own(pod, obj):
            return True
        was = _holding(old)
        if was is None:
            return False
        gone = object_key(obj) not in self.handle.view.custom.get(RESERVATION, {})
        if not gone and _holding(new) == was:
            return False
        return self._room_after_leaving(pod, was[0])

    def _may_own(self, pod: PodInfo, obj: dict[str, Any]) -> bool:
        parsed = self._parsed
        if parsed is None or parsed[0] is not obj:
            try:
                reservation = Reservation.from_dict(obj)
            except ValidationError:
                return True  # not ours to judge: the Reservation plugin refuses it
            parsed = self._parsed = (obj, reservation)
        return is_owner(parsed[1], facts_of(pod.raw))

    def after_pod_change(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> bool:
        """A pod that left (or shrank on) a node frees room on that node alone: it helps a
        pod that node could then take, even with every pod it might ever preempt there gone
        too. kube-scheduler retries every pod Fit rejected on any such change: in a full
        cluster, hundreds of pods each time any pod ends, and the retries crowd out the
        pods of lower priority. A change on the pod's nominated node always helps: its
        victims leaving there are what it waits for, once they are all gone."""
        node = old.node_name if old is not None else ""
        if not node:
            return True
        return self._room_after_leaving(pod, node)

    def _room_after_leaving(self, pod: PodInfo, node: str) -> bool:
        """Whether room freed on ``node`` can help the pod: it fits there with every pod
        some preemption could take for it gone, or it is the pod's nominated node. A pod
        whose victims still leave its nominated node preempts nothing meanwhile (not
        eligible, as kube-scheduler says): only room made without evictions helps it, there
        as elsewhere. Each victim's deletion sent it back, and a thousand preemptors, each
        waiting for three victims, were tried ten times each for nothing."""
        view = self.handle.view
        nodes = view.nodes
        row = nodes.index.get(node)
        if row is None:
            return True
        held = view.nominated.get(pod.uid)
        nominated = held[0] if held is not None else pod.nominated_node
        # Room the node holds for preemptors nominated there that rank with the pod or
        # above stays theirs (else every node whose victims were gone looked free to every
        # waiting preemptor until its own preemptor bound).
        beside = [
            other
            for other in view.nominated.on(node)
            if other.uid != pod.uid and other.priority >= pod.priority
        ]
        kept: list[PodInfo] | None = None  # None: every pod on the node stays
        if nominated and self._victims_leave(nominated, pod):
            pass
        elif node == nominated:
            return True
        else:
            evictable = self._evictable(pod)
            kept = [other for other in nodes.pods[row].values() if not evictable(other)]
            beside = [other for other in beside if not evictable(other)]
        for resource, amount in {**pod.requests, PODS: 1}.items():
            col = nodes.columns.get(resource)
            if col is None:
                return True  # a resource no node has reported yet: not this hint's call
            if resource == PODS:
                used = len(beside) + (nodes.requested.item(row, col) if kept is None else len(kept))
            else:
                used = sum(other.requests.get(resource, 0) for other in beside)
                if kept is None:
                    used += nodes.requested.item(row, col)
                else:
                    used += sum(other.requests.get(resource, 0) for other in kept)
            if nodes.allocatable.item(row, col) - used < amount:
                return False
        return True

    def _victims_leave(self, node: str, pod: PodInfo) -> bool:
        """Whether a victim of a preemption is leaving ``node``: one the scheduler has had
        deleted, or a terminating pod of lower priority than ``pod``."""
        view = self.handle.view
        row = view.nodes.index.get(node)
        if row is None:
            return False
        return any(
            other.uid in view.leaving
            or ((other.deleting or other.preempted) and other.priority < pod.priority)
            for other in view.nodes.pods[row].values()
        )

    def _evictable(self, pod: PodInfo) -> Callable[[PodInfo], bool]:
        """Pods some preemption could ever take for ``pod``, counted generously: lower
        priority; a reservation's capacity (its owners may use it); with quotas, another
        namespace's pods (a quota within its min reclaims whatever their priority), and
        with a quota tree (quotas by label, not namespace) any pod."""
        quotas = self.handle.view.custom.get(ELASTIC_QUOTA) or {}
        version = self.handle.view.custom_versions.get(ELASTIC_QUOTA, 0)
        if self._quotas_seen[0] != version:
            self._quotas_seen = (version, any(is_tree_quota(q) for q in quotas.values()))
        if self._quotas_seen[1]:
            return lambda other: True
        across = bool(quotas)
        return lambda other: (
            other.priority < pod.priority
            or other.reservation is not None
            or (across and other.namespace != pod.namespace)
        )

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        return insufficient(state, pod, nodes, self.ignores)

    def filter_at(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeTable,
        row: int,
        without: Sequence[PodInfo] = (),
    ) -> tuple[str, ...]:
        return insufficient_at(state, pod, nodes, row, self.ignores, without)

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        """``filter`` on one row outside an attempt: what the pod asks for within what the
        row has free, less what ``beside`` asks for. Capacity a reservation would give
        back to the pod is left out: a pod that only it would admit is not said to fit."""
        allocatable, requested = nodes.allocatable, nodes.requested
        for resource, amount in {**pod.requests, PODS: 1}.items():
            if amount <= 0 or self.ignores(resource):
                continue
            col = nodes.columns.get(resource)
            if col is None:
                return False  # no node has any of it
            free = allocatable.item(row, col) - requested.item(row, col)
            if beside:
                if resource == PODS:
                    free -= len(beside)
                else:
                    free -= sum(other.requests.get(resource, 0) for other in beside)
            if free < amount:
                return False
        return True

    def ignores(self, resource: str) -> bool:
        """kube-scheduler's ``ignoredResources`` and ``ignoredResourceGroups`` (the part of
        the name before '/'): extended resources the filter does not check."""
        return is_extended(resource) and (
            resource in self.ignored or resource.split("/", 1)[0] in self.ignored_groups
        )

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        requested, allocatable = _requested_and_allocatable(
            pod, nodes, rows, self.resources, non_zero=True
        )
        has = allocatable > 0
        safe = np.where(has, allocatable, 1)
        if self.strategy == "LeastAllocated":
            per = np.where(
                requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // safe
            )
        else:
            per = np.minimum(requested, allocatable) * MAX_NODE_SCORE // safe
        weights = np.where(has, self.weights, 0)
        total = (np.where(has, per, 0) * weights).sum(axis=1)
        weight_sum = weights.sum(axis=1)
        return np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)


def balance(requested: Ints, allocatable: Ints) -> Ints:
    """kube-scheduler's balancedResourceScore per row: (1 - std of the used fractions) * 100,
    truncated; resources a node has none of are left out."""
    if requested.shape[1] == 2 and (allocatable > 0).all():
        # The usual case (cpu and memory, every node has both): |f1 - f2| / 2, the same
        # floats as below in a tenth of the time.
        fractions = np.minimum(requested / allocatable, 1.0)
        std = np.abs(fractions[:, 0] - fractions[:, 1]) / 2
        usual: Ints = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
        return usual
    has = allocatable > 0
    fraction = np.where(has, np.minimum(requested / np.where(has, allocatable, 1), 1.0), 0.0)
    count = has.sum(axis=1)
    mean = np.where(count > 0, fraction.sum(axis=1) / np.maximum(count, 1), 0.0)
    variance = np.where(has, (fraction - mean[:, None]) ** 2, 0.0).sum(axis=1)
    std = np.sqrt(variance / np.maximum(count, 1))
    # Two resources: |f1 - f2| / 2 exactly as kube-scheduler computes it (no rounding of
    # the general formula), so truncation lands on the same integer.
    spread = np.where(has, fraction, -np.inf).max(axis=1, initial=-np.inf) - np.where(
        has, fraction, np.inf
    ).min(axis=1, initial=np.inf)
    std = np.where(count == 2, spread / 2, np.where(count > 2, std, 0.0))
    scores: Ints = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return scores


class NodeResourcesBalancedAllocation(Plugin):
    """Prefers nodes whose cpu and memory use the pod makes more equal (v1.36: the change
    in balance the pod brings, not only the balance with it)."""

    name = "NodeResourcesBalancedAllocation"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.resources, _ = _weights(args)

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        if not any(pod.requests.get(r) for r in self.resources):
            # Nothing requested: balance is not the pod's concern (kube-scheduler skips it).
            return np.zeros(len(rows), dtype=np.int64)
        requested, allocatable = _requested_and_allocatable(
            pod, nodes, rows, self.resources, non_zero=False
        )
        own = np.array([pod.requests.get(r, 0) for r in self.resources], dtype=np.int64)
        with_pod = balance(requested, allocatable)
        without_pod = balance(requested - own, allocatable)
        # Both lie in [50, 100]; the change maps back into [50, 100], 75 for no change.
        half = MAX_NODE_SCORE // 2
        result: Ints = half + (half + with_pod - without_pod) // 2
        return result
