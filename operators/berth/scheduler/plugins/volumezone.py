"""VolumeZone: a pod follows the zone and region labels of its bound PersistentVolumes.

As kube-scheduler: a node with none of the zone/region labels passes; otherwise each label
a bound PV carries (values may list several, joined by ``__``) must be on the node with
one of those values. Claims waiting for their first consumer are left to VolumeBinding.
"""

from __future__ import annotations

import numpy as np

from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.volumestore import PersistentVolume, PersistentVolumeClaim, StorageClass
from berth.scheduler.framework.clusterevents import (
    NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Plugin,
    Status,
    Verdict,
    skip,
    unschedulable,
)

ZONE_CONFLICT = "node(s) had no available volume zone"
NO_CLAIM_NAME = "PersistentVolumeClaim had no name"
NO_PV_OR_CLASS = "PersistentVolumeClaim had no pv name and storageClass name"
NO_PV_NAME = "PersistentVolume had no name"

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
GA_OF = {BETA_ZONE: ZONE, BETA_REGION: REGION}
STATE = "VolumeZone"


def binding_mode_not_set(name: str) -> str:
    return f'VolumeBindingMode not set for StorageClass "{name}"'


def pv_topology(pv: PersistentVolume) -> list[tuple[str, frozenset[str]]]:
    """The PV's zone/region labels and the values each allows."""
    return [
        (key, frozenset(pv.labels[key].split("__"))) for key in TOPOLOGY_LABELS if key in pv.labels
    ]


class VolumeZone(Plugin):
    name = "VolumeZone"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(STORAGE_CLASS, ActionType.ADD, _waits_for_consumer),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE_OTHER, _requested),
            on(PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE_OTHER, _topology_changed),
        )

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        volumes = self.handle.view.volumes
        topology: list[tuple[str, frozenset[str]]] = []
        for use in pod.volumes.claims:
            if use.ephemeral:
                continue
            if not use.claim:
                return unschedulable(self.name, NO_CLAIM_NAME, resolvable=False)
            claim = volumes.pvc(pod.namespace, use.claim)
            if claim is None:
                message = f'persistentvolumeclaim "{use.claim}" not found'
                return unschedulable(self.name, message, resolvable=False)
            if not claim.volume_name:
                if not claim.storage_class:
                    return unschedulable(self.name, NO_PV_OR_CLASS, resolvable=False)
                storage_class = volumes.classes.get(claim.storage_class)
                if storage_class is None:
                    message = f'storageclass.storage.k8s.io "{claim.storage_class}" not found'
                    return unschedulable(self.name, message, resolvable=False)
                if storage_class.binding_mode is None:
                    message = binding_mode_not_set(claim.storage_class)
                    return unschedulable(self.name, message, resolvable=False)
                if storage_class.delays_binding:
                    continue  # VolumeBinding places it
                return unschedulable(self.name, NO_PV_NAME, resolvable=False)
            pv = volumes.pv(claim.volume_name)
            if pv is None:
                message = f'persistentvolume "{claim.volume_name}" not found'
                return unschedulable(self.name, message, resolvable=False)
            topology.extend(pv_topology(pv))
        if not topology:
            return skip(self.name)
        state.data[STATE] = topology
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        topology: list[tuple[str, frozenset[str]]] = state.data.get(STATE) or []
        if not topology:
            return Verdict.all(nodes)
        labelled = np.zeros(nodes.size, dtype=bool)
        for key in TOPOLOGY_LABELS:
            codes, _ = nodes.label_codes(key)
            labelled |= codes >= 0
        passed = np.ones(nodes.size, dtype=bool)
        for key, values in topology:
            matches = _has_value(nodes, key, values)
            if key in GA_OF:  # a beta label on the PV, the GA label on the node
                matches |= ~_has_key(nodes, key) & _has_value(nodes, GA_OF[key], values)
            passed &= matches
        failed = labelled & ~passed
        return Verdict.failing(nodes, failed, ZONE_CONFLICT, resolvable=False)


def _has_key(nodes: NodeTable, key: str) -> Mask:
    codes, _ = nodes.label_codes(key)
    return codes >= 0


def _has_value(nodes: NodeTable, key: str, values: frozenset[str]) -> Mask:
    codes, vocabulary = nodes.label_codes(key)
    wanted = [code for value, code in vocabulary.items() if value in values]
    return np.isin(codes, wanted)


def _requested(pod: PodInfo, old: object, new: object) -> bool:
    """The pod mounts the claim through a persistentVolumeClaim volume."""
    if not isinstance(new, PersistentVolumeClaim):
        return True
    mounted = {c.claim for c in pod.volumes.claims if not c.ephemeral}
    return new.namespace == pod.namespace and new.name in mounted


def _waits_for_consumer(pod: PodInfo, old: object, new: object) -> bool:
    return not isinstance(new, StorageClass) or new.delays_binding


def _topology_changed(pod: PodInfo, old: object, new: object) -> bool:
    if not isinstance(old, PersistentVolume) or not isinstance(new, PersistentVolume):
        return True
    return pv_topology(old) != pv_topology(new)
