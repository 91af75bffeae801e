"""NodeVolumeLimits: a node takes no more volumes of a CSI driver than its CSINode allows.

As kube-scheduler's CSILimits: each claim (bound: its PV's driver and volume handle;
unbound: its class's provisioner and a placeholder per claim) and each in-tree disk that
the node's CSINode lists as migrated counts once per node, however many pods mount it;
the pod's new volumes plus the node's must stay within ``spec.drivers[].allocatable.count``.
Nodes without a CSINode or without limits take any number.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podvolumes import InTreeDisk
from berth.scheduler.cache.volumestore import CSINode, PersistentVolumeClaim, VolumeStore
from berth.scheduler.framework.clusterevents import (
    CSI_NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Handle,
    Plugin,
    Status,
    Verdict,
    skip,
)

MAX_VOLUME_COUNT = "node(s) exceed max volume count"
# Unbound claims are counted under a handle no real volume has.
UNBOUND_PREFIX = "berth-unbound"
IN_TREE_PROVISIONERS = {
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}


def _migrated(disk: InTreeDisk, csi_node: CSINode | None) -> str:
    if csi_node is None or disk.plugin not in csi_node.migrated:
        return ""
    return f"{disk.driver}/{disk.handle}"


def claim_volume(
    store: VolumeStore, claim: PersistentVolumeClaim, csi_node: CSINode | None
) -> tuple[str, str]:
    """(driver, unique volume name) the claim attaches as on this node; ("", "") if none."""
    pv = store.pv(claim.volume_name) if claim.volume_name else None
    if pv is None:
        storage_class = store.classes.get(claim.storage_class) if claim.storage_class else None
        if storage_class is None:
            return "", ""
        driver = storage_class.provisioner
        if driver in IN_TREE_PROVISIONERS:
            if csi_node is None or driver not in csi_node.migrated:
                return "", ""
            driver = IN_TREE_PROVISIONERS[driver]
        return driver, f"{driver}/{UNBOUND_PREFIX}-{claim.namespace}/{claim.name}"
    if pv.csi is not None:
        driver, handle = pv.csi
        return (driver, f"{driver}/{handle}") if driver and handle else ("", "")
    if pv.in_tree is not None:
        unique = _migrated(pv.in_tree, csi_node)
        return (pv.in_tree.driver, unique) if unique else ("", "")
    return "", ""


def attachable(store: VolumeStore, pod: PodInfo, csi_node: CSINode | None) -> dict[str, str] | str:
    """The pod's volumes that attach on the node (unique name -> driver), or, for a pod
    whose claim is missing or not its own, why it cannot be placed."""
    found: dict[str, str] = {}
    for use in pod.volumes.claims:
        claim = store.pvc(pod.namespace, use.claim)
        if claim is None:
            return (
                f"looking up PVC {pod.namespace}/{use.claim}: "
                f'persistentvolumeclaim "{use.claim}" not found'
            )
        if use.ephemeral and claim.controller_uid != pod.uid:
            return (
                f"PVC {claim.namespace}/{claim.name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)"
            )
        driver, unique = claim_volume(store, claim, csi_node)
        if unique:
            found[unique] = driver
    for disk in pod.volumes.in_tree:
        unique = _migrated(disk, csi_node)
        if unique:
            found[unique] = disk.driver
    return found


def _deleted_pod_attached(pod: PodInfo, old: object, new: object) -> bool:
    """A bound pod went away with claims or in-tree disks: a node may have room now."""
    if not isinstance(old, PodInfo):
        return True
    return bool(old.node_name) and bool(old.volumes.claims or old.volumes.in_tree)


def _claim_of_pod(pod: PodInfo, old: object, new: object) -> bool:
    if not isinstance(new, PersistentVolumeClaim):
        return True
    return new.namespace == pod.namespace and new.name in pod.volumes.claim_names


class NodeVolumeLimits(Plugin):
    name = "NodeVolumeLimits"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        # row -> (row version, store generation, the node's attached volumes)
        self._attached: dict[int, tuple[int, int, dict[str, str]]] = {}

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(CSI_NODE, ActionType.ADD | ActionType.UPDATE_OTHER),
            on(POD, ActionType.DELETE, _deleted_pod_attached),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD, _claim_of_pod),
        )

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        if not pod.volumes.claims and not pod.volumes.in_tree:
            return skip(self.name)
        return SUCCESS

    def _node_volumes(self, row: int, nodes: NodeTable, csi_node: CSINode) -> dict[str, str]:
        """Volumes the node's pods attach: derived once per version of the row and store."""
        store = self.handle.view.volumes
        version = int(nodes.row_versions[row])
        cached = self._attached.get(row)
        if cached is not None and cached[0] == version and cached[1] == store.generation:
            return cached[2]
        attached: dict[str, str] = {}
        for other in nodes.pods[row].values():
            if other.volumes.claims or other.volumes.in_tree:
                found = attachable(store, other, csi_node)
                if isinstance(found, dict):  # a running pod's missing claim is not counted
                    attached.update(found)
        self._attached[row] = (version, store.generation, attached)
        return attached

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        store = self.handle.view.volumes
        refused = attachable(store, pod, None)
        if isinstance(refused, str):  # a missing claim: no node can take the pod
            return Verdict.failing(
                nodes, nodes.present[: nodes.size].copy(), refused, resolvable=False
            )
        failed = np.zeros(nodes.size, dtype=bool)
        # The pod's volumes differ per node only by which in-tree plugins it migrated.
        by_migration: dict[frozenset[str], dict[str, str]] = {}
        for row in nodes.rows():
            csi_node = store.csi_nodes.get(nodes.names[row])
            if csi_node is None or not csi_node.limits:
                continue
            new = by_migration.get(csi_node.migrated)
            if new is None:
                found = attachable(store, pod, csi_node)
                new = by_migration[csi_node.migrated] = found if isinstance(found, dict) else {}
            if not new:
                continue
            attached = self._node_volumes(row, nodes, csi_node)
            nominated = state.nominated_pods.get(row)
            if nominated:  # preemptors waiting for this node count as if they ran there
                attached = dict(attached)
                for other in nominated:
                    counted = attachable(store, other, csi_node)
                    if isinstance(counted, dict):
                        attached.update(counted)
            failed[row] = _over_limit(new, attached, csi_node.limits)
        return Verdict.failing(nodes, failed, MAX_VOLUME_COUNT)


def _over_limit(new: dict[str, str], attached: dict[str, str], limits: dict[str, int]) -> bool:
    """Whether the pod's volumes not yet on the node take a driver past its limit."""
    counts: dict[str, int] = {}
    for unique, driver in new.items():
        if unique not in attached:
            counts[driver] = counts.get(driver, 0) + 1
    for driver, count in counts.items():
        limit = limits.get(driver)
        if limit is not None and sum(d == driver for d in attached.values()) + count > limit:
            return True
    return False
