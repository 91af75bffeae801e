"""A pod's volumes as the volume plugins read them, parsed once per pod version.

Claims (``persistentVolumeClaim`` and generic ``ephemeral`` volumes, whose claim is named
``<pod>-<volume>``), inline disks that may not be shared (VolumeRestrictions), and inline
in-tree disks that count against a CSI driver's attach limit once migrated
(NodeVolumeLimits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# In-tree volume sources that CSI migration serves with a CSI driver: the source field,
# the in-tree plugin name (as CSINode's migrated-plugins annotation lists it), the CSI
# driver, and the fields that identify one disk.
MIGRATABLE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io", ("pdName",)),
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "ebs.csi.aws.com", ("volumeID",)),
    "azureDisk": ("kubernetes.io/azure-disk", "disk.csi.azure.com", ("diskURI",)),
    "azureFile": ("kubernetes.io/azure-file", "file.csi.azure.com", ("secretName", "shareName")),
    "cinder": ("kubernetes.io/cinder", "cinder.csi.openstack.org", ("volumeID",)),
    "vsphereVolume": ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com", ("volumePath",)),
    "portworxVolume": ("kubernetes.io/portworx-volume", "pxd.portworx.com", ("volumeID",)),
}


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """One volume of the pod backed by a PersistentVolumeClaim."""

    claim: str  # the claim's name in the pod's namespace ("" if the volume names none)
    ephemeral: bool  # a generic ephemeral volume: the claim must be owned by the pod


@dataclass(frozen=True, slots=True)
class Disk:
    """An inline disk two pods on one node may not both mount (unless both read-only,
    where the source allows that)."""

    source: str  # gcePersistentDisk, awsElasticBlockStore, iscsi, rbd
    identity: str  # pdName, volumeID, IQN, or pool/image
    read_only: bool
    monitors: frozenset[str] = frozenset()  # rbd: the Ceph monitors

    def conflicts(self, other: Disk) -> bool:
        if self.source != other.source or self.identity != other.identity:
            return False
        if self.source == "awsElasticBlockStore":
            return True
        if self.source == "rbd" and not self.monitors & other.monitors:
            return False
        return not (self.read_only and other.read_only)


@dataclass(frozen=True, slots=True)
class InTreeDisk:
    """An inline in-tree disk that CSI migration counts against a driver's limit."""

    plugin: str
    driver: str
    handle: str


@dataclass(frozen=True, slots=True)
class PodVolumes:
    claims: tuple[ClaimUse, ...] = ()
    disks: tuple[Disk, ...] = ()
    in_tree: tuple[InTreeDisk, ...] = ()

    @property
    def claim_names(self) -> tuple[str, ...]:
        return tuple(c.claim for c in self.claims)


NO_VOLUMES = PodVolumes()


def in_tree_disk(source: str, fields: dict[str, Any]) -> InTreeDisk:
    plugin, driver, keys = MIGRATABLE[source]
    return InTreeDisk(plugin, driver, "/".join(str(fields.get(k) or "") for k in keys))


def _disk(volume: dict[str, Any]) -> Disk | None:
    if (gce := volume.get("gcePersistentDisk")) is not None:
        return Disk("gcePersistentDisk", gce.get("pdName") or "", bool(gce.get("readOnly")))
    if (ebs := volume.get("awsElasticBlockStore")) is not None:
        return Disk("awsElasticBlockStore", ebs.get("volumeID") or "", bool(ebs.get("readOnly")))
    if (iscsi := volume.get("iscsi")) is not None:
        return Disk("iscsi", iscsi.get("iqn") or "", bool(iscsi.get("readOnly")))
    if (rbd := volume.get("rbd")) is not None:
        image = f"{rbd.get('pool') or 'rbd'}/{rbd.get('image') or ''}"
        monitors = frozenset(rbd.get("monitors") or ())
        return Disk("rbd", image, bool(rbd.get("readOnly")), monitors)
    return None


def pod_volumes(pod_name: str, spec: dict[str, Any]) -> PodVolumes:
    volumes = spec.get("volumes") or ()
    if not volumes:
        return NO_VOLUMES
    claims: list[ClaimUse] = []
    disks: list[Disk] = []
    in_tree: list[InTreeDisk] = []
    for volume in volumes:
        if (claim := volume.get("persistentVolumeClaim")) is not None:
            claims.append(ClaimUse(claim.get("claimName") or "", False))
        elif volume.get("ephemeral") is not None:
            claims.append(ClaimUse(f"{pod_name}-{volume.get('name')}", True))
        if (disk := _disk(volume)) is not None:
            disks.append(disk)
        for source in MIGRATABLE.keys() & volume.keys():
            in_tree.append(in_tree_disk(source, volume[source] or {}))
    if not (claims or disks or in_tree):
        return NO_VOLUMES
    return PodVolumes(tuple(claims), tuple(disks), tuple(in_tree))
