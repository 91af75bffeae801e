"""VolumeRestrictions: disks two pods on one node may not share, and ReadWriteOncePod claims.

As kube-scheduler: an inline GCE PD, EBS volume, iSCSI target or RBD image already mounted
by a pod on the node (unless both mount it read-only, where the source allows) fails the
node; a ReadWriteOncePod claim that any pod in the cluster uses fails every node. Both can
be undone by preemption (the PreFilter extensions count pods in and out).
"""

from __future__ import annotations

import numpy as np

from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.volumestore import READ_WRITE_ONCE_POD, PersistentVolumeClaim
from berth.scheduler.framework.clusterevents import (
    NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Plugin,
    Reason,
    Status,
    Verdict,
    skip,
    unschedulable,
)

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)
STATE = "VolumeRestrictions"


def claim_not_found(name: str) -> str:
    return f'persistentvolumeclaim "{name}" not found'


def claim_names(pod: PodInfo) -> set[str]:
    """The claims a pod mounts through persistentVolumeClaim volumes (not ephemeral ones)."""
    return {c.claim for c in pod.volumes.claims if not c.ephemeral}


class _State:
    """The pod's ReadWriteOncePod claims, and how many of them some pod uses."""

    def __init__(self, rwop: set[str], conflicts: int) -> None:
        self.rwop = rwop
        self.conflicts = conflicts

    def update(self, other: PodInfo, sign: int) -> None:
        # As kube-scheduler: a pod added or removed counts by its claims' names.
        self.conflicts += sign * len(claim_names(other) & self.rwop)


class VolumeRestrictions(Plugin):
    name = "VolumeRestrictions"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(POD, ActionType.DELETE, self._deleted_pod_helps),
            on(NODE, ActionType.ADD),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD, self._claim_helps),
        )

    @staticmethod
    def _deleted_pod_helps(pod: PodInfo, old: object, new: object) -> bool:
        """A pod of the same namespace that held one of its disks or claims."""
        if not isinstance(old, PodInfo):
            return True
        if old.namespace != pod.namespace:
            return False
        if any(d.conflicts(e) for d in pod.volumes.disks for e in old.volumes.disks):
            return True
        return bool(claim_names(old) & claim_names(pod))

    @staticmethod
    def _claim_helps(pod: PodInfo, old: object, new: object) -> bool:
        if not isinstance(new, PersistentVolumeClaim):
            return True
        return new.namespace == pod.namespace and new.name in pod.volumes.claim_names

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        volumes = self.handle.view.volumes
        rwop: set[str] = set()
        for use in pod.volumes.claims:
            if use.ephemeral:
                continue
            claim = volumes.pvc(pod.namespace, use.claim)
            if claim is None:
                return unschedulable(self.name, claim_not_found(use.claim), resolvable=False)
            if READ_WRITE_ONCE_POD in claim.access_modes:
                rwop.add(claim.name)
        used: set[str] = set()
        if rwop:
            for row in nodes.rows():
                for other in nodes.pods[row].values():
                    if other.namespace == pod.namespace:
                        used |= claim_names(other) & rwop
        conflicts = len(used)
        if not pod.volumes.disks and conflicts == 0:
            return skip(self.name)
        state.data[STATE] = _State(rwop, conflicts)
        return SUCCESS

    def add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        found = state.data.get(STATE)
        if isinstance(found, _State):
            found.update(other, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        found = state.data.get(STATE)
        if isinstance(found, _State):
            found.update(other, -1)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        disk = np.zeros(nodes.size, dtype=bool)
        if pod.volumes.disks:
            for row in nodes.rows():
                others = [*nodes.pods[row].values(), *state.nominated_pods.get(row, ())]
                disk[row] = any(
                    d.conflicts(e)
                    for other in others
                    if other.uid != pod.uid
                    for e in other.volumes.disks
                    for d in pod.volumes.disks
                )
        reasons = [Reason(disk, DISK_CONFLICT)]
        found = state.data.get(STATE)
        failed = disk.copy()
        if isinstance(found, _State) and found.conflicts > 0:
            rwop = ~disk
            reasons.append(Reason(rwop, RWOP_CONFLICT))
            failed |= rwop
        return Verdict(~failed, tuple(reasons))
