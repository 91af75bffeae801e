"""The scheduler's one in-memory view of the cluster, fed by watches.

Every pod bound to a node counts on it, whoever scheduled it; pods this scheduler has
chosen a node for count from the moment they are assumed (Reserve) until the watch shows
them bound, or until binding fails and they are forgotten. Pods on nodes the view does not
know yet are kept aside and counted when their node appears.

The view only keeps facts: each watch handler returns the cluster event the change
amounts to (kube-scheduler's ClusterEvent), and the event table
(``berth.scheduler.eventhandlers``) passes it on to the reservation book, the plugins'
caches and the queue, in that order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from berth import log
from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.nominations import Nominations
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.selectorowners import SelectorOwners
from berth.scheduler.cache.volumestore import VolumeStore
from berth.scheduler.framework.clusterevents import NODE, POD, ActionType, ClusterEvent

logger = log.get(__name__)


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
    nominated: Nominations = field(default_factory=Nominations)
    # Victims whose deletion or eviction the scheduler has had accepted, until the watch
    # shows them gone: terminating, though the watch may not say so yet.
    leaving: set[str] = field(default_factory=set)
    priority_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pdbs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Services, controllers and namespace labels (topology spread defaults, affinity terms).
    owners: SelectorOwners = field(default_factory=SelectorOwners)
    # PersistentVolumes, claims, StorageClasses and CSINodes (the volume plugins).
    volumes: VolumeStore = field(default_factory=VolumeStore)
    # Berth's custom resources by kind (Reservation, ElasticQuota, ...), then by key.
    custom: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # Bumped on every change of a custom kind: plugins rebuild what they derive from it.
    custom_versions: dict[str, int] = field(default_factory=dict)

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

    def on_node(self, kind: str, node: dict[str, Any]) -> ClusterEvent:
        """Apply a node's watch event; returns what changed, for the queue's hints."""
        name = node["metadata"]["name"]
        if kind == "DELETED":
            for uid, pod in self.nodes.remove_node(name).items():
                self.orphans.setdefault(name, {})[uid] = pod
            return ClusterEvent(NODE, ActionType.DELETE)
        row = self.nodes.index.get(name)
        if row is None:
            row = self.nodes.upsert_node(node)
            for pod in self.orphans.pop(name, {}).values():
                self.nodes.add_pod(row, pod)
            return ClusterEvent(NODE, ActionType.ADD)
        before = self.nodes.nodes[row] or {}
        self.nodes.upsert_node(node)
        return ClusterEvent(NODE, node_update(before, node))

    def on_pod(self, kind: str, raw: dict[str, Any]) -> tuple[PodInfo, ClusterEvent | None]:
        """Apply a pod's watch event; returns the pod and, when a bound pod's change may
        let others in or change what they see, the cluster event it amounts to."""
        uid = (raw.get("metadata") or {}).get("uid", "")
        if kind == "DELETED":
            pod = self.pods.pop(uid, None) or PodInfo.from_pod(raw)
            self.leaving.discard(uid)
            was_counted = self._uncount(uid) is not None
            self.assumed.pop(uid, None)
            # A pending pod nominated after a preemption held the room (and quota) freed
            # for it: others may take it now.
            was_nominated = self.nominated.pop(uid, None) is not None
            deleted = was_counted or was_nominated
            return pod, ClusterEvent(POD, ActionType.DELETE) if deleted else None
        previous = self.pods.get(uid)
        pod = PodInfo.update(previous, raw)
        self.pods[pod.uid] = pod
        event: ClusterEvent | None = None
        if pod.occupies_node:
            self.assumed.pop(pod.uid, None)
            self.nominated.pop(pod.uid, None)
            if self.counted_on.get(pod.uid) != pod.node_name:
                self._count(pod, pod.node_name)
                event = ClusterEvent(POD, ActionType.ADD)
            elif self._recount(pod):
                event = ClusterEvent(POD, ActionType.UPDATE_POD_SCALE_DOWN)
            elif previous is not None:
                event = _pod_update(previous, pod)
        elif pod.uid in self.assumed:
            pass  # bound by us a moment ago; the watch has not caught up yet
        elif self._uncount(pod.uid) is not None:
            # Finished: gone from its node as far as scheduling is concerned, as
            # kube-scheduler's informer (which drops terminated pods) sees it.
            event = ClusterEvent(POD, ActionType.DELETE)
        if pod.uid in self.assumed:
            # Counted on its node already: a nomination an earlier attempt wrote, landing
            # after the pod was placed, would count it twice (kube-scheduler's queue skips
            # the updates of an assumed pod).
            pass
        elif not pod.node_name and pod.nominated_node and not pod.terminal:
            self.nominated[pod.uid] = (pod.nominated_node, pod)
        elif not pod.nominated_node:
            held = self.nominated.pop(pod.uid, None)
            if held is not None and _nomination_not_yet_written(previous, pod):
                self.nominated[pod.uid] = (held[0], pod)
        return pod, event

    def _recount(self, pod: PodInfo) -> bool:
        """Put the latest version of a pod counted on its node in the place of the one
        counted, as kube-scheduler's cache does on every update (UpdatePod: RemovePod,
        then AddPod): what scheduling reads of a node's pods (labels for selectors,
        termination, start time) is what the watch shows now. A pod whose requests
        changed (in-place resize) is counted afresh; True then."""
        row = self.nodes.index.get(pod.node_name)
        if row is None:
            waiting = self.orphans.get(pod.node_name)
            if waiting is not None and pod.uid in waiting:
                waiting[pod.uid] = pod
            return False
        counted = self.nodes.pods[row].get(pod.uid)
        if counted is None:
            return False
        if (
            counted.requests != pod.requests
            or counted.nonzero_cpu != pod.nonzero_cpu
            or counted.nonzero_memory != pod.nonzero_memory
            or counted.host_ports != pod.host_ports
        ):
            self._count(pod, pod.node_name)
            return True
        self.nodes.update_pod(row, pod)
        return False

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

    def on_custom(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """Keep the objects of one custom kind by key (namespace/name, or name)."""
        objects = self.custom.setdefault(kind, {})
        key = object_key(obj)
        if event == "DELETED":
            objects.pop(key, None)
        else:
            objects[key] = obj
        self.custom_versions[kind] = self.custom_versions.get(kind, 0) + 1

    # -- the scheduler's own decisions ---------------------------------------------------

    def assume(self, pod: PodInfo, node: str) -> None:
        """Count a pod on the node chosen for it, before the binding is confirmed."""
        self.assumed[pod.uid] = node
        self.nominated.pop(pod.uid, None)
        self._count(pod, node)
        self.placed_at[pod.uid] = time.time()

    def forget(self, pod: PodInfo) -> bool:
        """Undo ``assume`` (a failed binding); True if the pod was assumed. Silent, as
        kube-scheduler's ForgetPod: the caller says what event that amounts to."""
        if self.assumed.pop(pod.uid, None) is None:
            return False
        self._uncount(pod.uid)
        return True

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Hold capacity on a node for a preemptor while its victims leave; never for a
        pod whose deletion the watch has shown already (nothing would drop the hold)."""
        if pod.uid in self.pods:
            self.nominated[pod.uid] = (node, pod)

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
        return [p for p in self.nodes.pods[row].values() if p.reservation is None]

    def pods_on(self, node: str) -> list[PodInfo]:
        row = self.nodes.index.get(node)
        return [] if row is None else list(self.nodes.pods[row].values())


def object_key(obj: dict[str, Any]) -> str:
    """namespace/name, or the name of a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]


def node_update(before: dict[str, Any], after: dict[str, Any]) -> ActionType:
    """Which of kube-scheduler's node update kinds a change of a Node is."""
    action = ActionType(0)
    b_meta, a_meta = before.get("metadata") or {}, after.get("metadata") or {}
    b_spec, a_spec = before.get("spec") or {}, after.get("spec") or {}
    b_status, a_status = before.get("status") or {}, after.get("status") or {}
    if (b_meta.get("labels") or {}) != (a_meta.get("labels") or {}):
        action |= ActionType.UPDATE_NODE_LABEL
    if (b_spec.get("taints") or []) != (a_spec.get("taints") or []):
        action |= ActionType.UPDATE_NODE_TAINT
    if bool(b_spec.get("unschedulable")) != bool(a_spec.get("unschedulable")):
        action |= ActionType.UPDATE_NODE_UNSCHEDULABLE
    if b_status.get("allocatable") != a_status.get("allocatable"):
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if b_status.get("conditions") != a_status.get("conditions"):
        action |= ActionType.UPDATE_NODE_CONDITION
    return action or ActionType.UPDATE_OTHER


def _pod_update(before: PodInfo, after: PodInfo) -> ClusterEvent | None:
    """A bound pod's change that others' placement may depend on (labels, tolerations)."""
    action = ActionType(0)
    if before.labels != after.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if before.tolerations != after.tolerations:
        action |= ActionType.UPDATE_POD_TOLERATION
    return ClusterEvent(POD, action) if action else None


def _nomination_not_yet_written(previous: PodInfo | None, pod: PodInfo) -> bool:
    """Whether a nomination held in memory stays though the pod's new version names none:
    it never named one (the hold was made a moment ago; an update written before it, such
    as the PodScheduled condition, came back first), as kube-scheduler's nominator keeps
    it. Dropped when the status's nomination is removed, or the pod is bound or done.
    Dropping it there let a second preemptor take the same freed room."""
    return (
        previous is not None
        and not previous.nominated_node
        and not pod.node_name
        and not pod.terminal
    )
