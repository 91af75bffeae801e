"""The scheduler's one in-memory view of the cluster, fed by watches.

Every pod bound to a node counts on it, whoever scheduled it; pods this scheduler has
chosen a node for count from the moment they are assumed (Reserve) until the watch shows
them bound, or until binding fails and they are forgotten. Pods on nodes the view does not
know yet are kept aside and counted when their node appears.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from berth import log
from berth.scheduler.nodetable import NodeTable
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.reservations import KIND as RESERVATION
from berth.scheduler.reservations import ReservationBook, is_reservation
from berth.scheduler.selectorowners import SelectorOwners

if TYPE_CHECKING:
    from berth.scheduler.framework import CycleState

logger = log.get(__name__)

# Cluster events that can make an unschedulable pod schedulable (kube-scheduler's
# ClusterEvent idea, coarse): the queue moves waiting pods back when one happens.
NODE_ADDED = "NodeAdd"
NODE_CHANGED = "NodeUpdate"
POD_DELETED = "AssignedPodDelete"
POD_FREED = "AssignedPodUpdate"
OTHER_CHANGED = "ObjectUpdate"


@dataclass
class ClusterView:
    nodes: NodeTable = field(default_factory=NodeTable)
    pods: dict[str, PodInfo] = field(default_factory=dict)
    # uid -> name of the node the pod is counted on (in the table or among orphans).
    counted_on: dict[str, str] = field(default_factory=dict)
    orphans: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    assumed: dict[str, str] = field(default_factory=dict)
    # uid -> when the pod was placed on its node (its binding, or our Reserve): what a
    # node's report (NodeMetric, NodeResourceTopology) may not include yet.
    placed_at: dict[str, float] = field(default_factory=dict)
    nominated: dict[str, tuple[str, PodInfo]] = field(default_factory=dict)
    priority_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pdbs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Services, controllers and namespace labels (topology spread defaults, affinity terms).
    owners: SelectorOwners = field(default_factory=SelectorOwners)
    # Berth's custom resources by kind (Reservation, ElasticQuota, ...), then by key.
    custom: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # Bumped on every change of a custom kind: plugins rebuild what they derive from it.
    custom_versions: dict[str, int] = field(default_factory=dict)
    custom_listeners: dict[str, list[Callable[[str, dict[str, Any]], None]]] = field(
        default_factory=dict
    )
    listeners: list[Callable[[str, PodInfo | None], None]] = field(default_factory=list)
    pod_listeners: list[Callable[[str, PodInfo], None]] = field(default_factory=list)
    reservations: ReservationBook = field(init=False)

    def __post_init__(self) -> None:
        self.reservations = ReservationBook(self)
        self.custom_listeners.setdefault(RESERVATION, []).append(self.reservations.on_reservation)
        self.pod_listeners.append(self.reservations.on_pod)

    # -- counting ----------------------------------------------------------------------

    def _count(self, pod: PodInfo, node: str) -> None:
        previous = self.counted_on.get(pod.uid)
        if previous is not None:
            self._uncount(pod.uid)
        self.counted_on[pod.uid] = node
        if pod.uid not in self.placed_at:
            self.placed_at[pod.uid] = pod.scheduled_at or time.time()
        row = self.nodes.index.get(node)
        if row is None:
            self.orphans.setdefault(node, {})[pod.uid] = pod
        else:
            self.nodes.add_pod(row, pod)

    def _uncount(self, uid: str) -> PodInfo | None:
        self.placed_at.pop(uid, None)
        node = self.counted_on.pop(uid, None)
        if node is None:
            return None
        row = self.nodes.index.get(node)
        if row is None:
            return self.orphans.get(node, {}).pop(uid, None)
        pod = self.nodes.pods[row].get(uid)
        if pod is not None:
            self.nodes.remove_pod(row, pod)
        return pod

    # -- watch events ------------------------------------------------------------------

    def on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            for uid, pod in self.nodes.remove_node(name).items():
                self.orphans.setdefault(name, {})[uid] = pod
            self._emit(OTHER_CHANGED, None)
            return
        known = name in self.nodes.index
        row = self.nodes.upsert_node(node)
        if not known:
            for pod in self.orphans.pop(name, {}).values():
                self.nodes.add_pod(row, pod)
            self.reservations.on_node_added(name)
        self._emit(NODE_CHANGED if known else NODE_ADDED, None)

    def on_pod(self, kind: str, raw: dict[str, Any]) -> None:
        if kind == "DELETED":
            uid = (raw.get("metadata") or {}).get("uid", "")
            pod = self.pods.pop(uid, None) or PodInfo.from_pod(raw)
            was_counted = self._uncount(uid) is not None
            self.assumed.pop(uid, None)
            self.nominated.pop(uid, None)
            for listener in self.pod_listeners:
                listener(kind, pod)
            if was_counted:
                self._emit(POD_DELETED, pod)
            return
        uid = (raw.get("metadata") or {}).get("uid", "")
        pod = PodInfo.update(self.pods.get(uid), raw)
        self.pods[pod.uid] = pod
        if pod.occupies_node:
            self.assumed.pop(pod.uid, None)
            self.nominated.pop(pod.uid, None)
            if self.counted_on.get(pod.uid) != pod.node_name or self._stale(pod):
                self._count(pod, pod.node_name)
        elif pod.uid in self.assumed:
            pass  # bound by us a moment ago; the watch has not caught up yet
        elif self._uncount(pod.uid) is not None:
            self._emit(POD_FREED, pod)  # finished: its resources are free now
        if not pod.node_name and pod.nominated_node and not pod.terminal:
            self.nominated[pod.uid] = (pod.nominated_node, pod)
        elif not pod.nominated_node:
            self.nominated.pop(pod.uid, None)
        for listener in self.pod_listeners:
            listener(kind, pod)

    def _stale(self, pod: PodInfo) -> bool:
        """A counted pod whose requests changed (in-place resize) is counted afresh."""
        row = self.nodes.index.get(pod.node_name)
        if row is None:
            return False
        counted = self.nodes.pods[row].get(pod.uid)
        return counted is not None and counted.requests != pod.requests

    def on_priority_class(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.priority_classes.pop(name, None)
        else:
            self.priority_classes[name] = obj

    def on_pdb(self, kind: str, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if kind == "DELETED":
            self.pdbs.pop(key, None)
        else:
            self.pdbs[key] = obj
        self._emit(OTHER_CHANGED, None)

    def on_custom(self, kind: str) -> Callable[[str, dict[str, Any]], None]:
        """A watch handler that keeps the objects of one custom kind."""
        objects = self.custom.setdefault(kind, {})

        def handle(event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            key = (
                f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]
            )
            if event == "DELETED":
                objects.pop(key, None)
            else:
                objects[key] = obj
            self.custom_versions[kind] = self.custom_versions.get(kind, 0) + 1
            for listener in self.custom_listeners.get(kind, ()):
                listener(event, obj)
            self._emit(OTHER_CHANGED, None)

        return handle

    def _emit(self, event: str, pod: PodInfo | None) -> None:
        for listener in self.listeners:
            listener(event, pod)

    # -- the scheduler's own decisions ---------------------------------------------------

    def assume(self, pod: PodInfo, node: str) -> None:
        """Count a pod on the node chosen for it, before the binding is confirmed."""
        self.assumed[pod.uid] = node
        self.nominated.pop(pod.uid, None)
        self._count(pod, node)
        self.placed_at[pod.uid] = time.time()

    def forget(self, pod: PodInfo) -> None:
        """Undo ``assume`` after a failed binding."""
        if self.assumed.pop(pod.uid, None) is not None:
            self._uncount(pod.uid)
            self._emit(POD_DELETED, pod)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Hold capacity on a node for a preemptor while its victims leave."""
        self.nominated[pod.uid] = (node, pod)

    def hold_nominated(self, state: CycleState, pod: PodInfo) -> None:
        """Put the nominated pods that outrank or equal ``pod`` on their nodes in ``state``.

        Capacity freed for a preemptor stays its own against pods of lower priority.
        """
        held = [
            (node, other)
            for uid, (node, other) in self.nominated.items()
            if uid != pod.uid and other.priority >= pod.priority
        ]
        if not held:
            return
        rows = [
            (self.nodes.index.get(node), other, self.nodes.vector(other.requests))
            for node, other in held
        ]
        table = np.zeros_like(self.nodes.requested)  # after vector(): every column exists
        pods_col = self.nodes.columns["pods"]
        for row, other, vector in rows:
            if row is not None:
                table[row] += vector
                table[row, pods_col] += 1
                state.nominated_pods.setdefault(row, []).append(other)
        state.nominated = table

    def unreported(
        self, row: int, reported_at: float, reported: Callable[[PodInfo], bool]
    ) -> list[PodInfo]:
        """Pods on a node that its report of ``reported_at`` may not include: placed after
        it, or not listed by it (``reported``). The one pending-pods rule every per-node
        report (usage in NodeMetric, NUMA zones in NodeResourceTopology) is read with."""
        placed_at = self.placed_at
        return [
            pod
            for pod in self.pods_at(row)
            if placed_at.get(pod.uid, 0.0) >= reported_at or not reported(pod)
        ]

    def pods_at(self, row: int) -> list[PodInfo]:
        """The real pods counted on a node (not the capacity reservations hold there)."""
        return [p for p in self.nodes.pods[row].values() if not is_reservation(p)]

    def pods_on(self, node: str) -> list[PodInfo]:
        row = self.nodes.index.get(node)
        return [] if row is None else list(self.nodes.pods[row].values())
