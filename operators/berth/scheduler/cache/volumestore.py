"""PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes, as the volume
plugins read them, with the bindings this scheduler has assumed but not yet seen written.

Objects are parsed once when their watch event arrives. As kube-scheduler's assume cache,
a PV or PVC assumed by Reserve (a claimRef set, a selected-node annotation) is what the
plugins see until the watch delivers the object again, or Unreserve reverts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from berth.api.meta import LabelSelector, NodeSelector
from berth.api.quantity import value_ceil
from berth.scheduler.cache.podvolumes import MIGRATABLE, InTreeDisk, in_tree_disk
from berth.scheduler.framework.clusterevents import (
    CSI_NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    ActionType,
    ClusterEvent,
)

# The claim's class in the beta annotation wins over spec.storageClassName, as upstream.
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
# Resources of the cluster events of the two capacity kinds (kube-scheduler's names).
CSI_DRIVER = "CSIDriver"
CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
FILESYSTEM = "Filesystem"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def _class(meta: dict[str, Any], spec: dict[str, Any]) -> str:
    annotations = meta.get("annotations") or {}
    if BETA_CLASS in annotations:
        return str(annotations[BETA_CLASS])
    return str(spec.get("storageClassName") or "")


def _storage(resources: dict[str, Any] | None) -> int:
    value = (resources or {}).get("storage")
    return value_ceil(value) if value is not None else 0


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    raw: dict[str, Any]
    storage_class: str
    capacity: int
    access_modes: frozenset[str]
    volume_mode: str
    claim_ref: ClaimRef | None
    phase: str
    labels: dict[str, str]
    node_affinity: NodeSelector | None
    deleting: bool
    attributes_class: str
    # The CSI driver and volume handle it is attached with; in-tree sources as migrated.
    csi: tuple[str, str] | None
    in_tree: InTreeDisk | None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> PersistentVolume:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        ref = spec.get("claimRef")
        required = (spec.get("nodeAffinity") or {}).get("required")
        csi = spec.get("csi")
        sources = MIGRATABLE.keys() & spec.keys()
        return cls(
            name=meta.get("name") or "",
            raw=raw,
            storage_class=_class(meta, spec),
            capacity=_storage(spec.get("capacity")),
            access_modes=frozenset(spec.get("accessModes") or ()),
            volume_mode=spec.get("volumeMode") or FILESYSTEM,
            claim_ref=ClaimRef(
                ref.get("namespace") or "", ref.get("name") or "", ref.get("uid") or ""
            )
            if ref
            else None,
            phase=(raw.get("status") or {}).get("phase") or "",
            labels=dict(meta.get("labels") or {}),
            node_affinity=NodeSelector.model_validate(required) if required else None,
            deleting=bool(meta.get("deletionTimestamp")),
            attributes_class=spec.get("volumeAttributesClassName") or "",
            csi=(csi.get("driver") or "", csi.get("volumeHandle") or "") if csi else None,
            in_tree=in_tree_disk(min(sources), spec[min(sources)] or {}) if sources else None,
        )

    def bound_to(self, claim: PersistentVolumeClaim) -> bool:
        ref = self.claim_ref
        return (
            ref is not None
            and ref.name == claim.name
            and ref.namespace == claim.namespace
            and ref.uid in ("", claim.uid)
        )


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    raw: dict[str, Any]
    storage_class: str
    volume_name: str
    access_modes: frozenset[str]
    volume_mode: str
    request: int
    selector: LabelSelector | None
    phase: str
    deleting: bool
    annotations: dict[str, str]
    controller_uid: str  # the controlling owner's uid ("" if none)
    attributes_class: str

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> PersistentVolumeClaim:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        selector = spec.get("selector")
        owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
        return cls(
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            uid=meta.get("uid") or "",
            raw=raw,
            storage_class=_class(meta, spec),
            volume_name=spec.get("volumeName") or "",
            access_modes=frozenset(spec.get("accessModes") or ()),
            volume_mode=spec.get("volumeMode") or FILESYSTEM,
            request=_storage((spec.get("resources") or {}).get("requests")),
            selector=LabelSelector.model_validate(selector) if selector is not None else None,
            phase=(raw.get("status") or {}).get("phase") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            annotations=dict(meta.get("annotations") or {}),
            controller_uid=(owner or {}).get("uid") or "",
            attributes_class=spec.get("volumeAttributesClassName") or "",
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """Bound by the PV controller: a volume name and the bind-completed annotation."""
        return bool(self.volume_name) and BIND_COMPLETED in self.annotations


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None
    allowed_topologies: tuple[dict[str, Any], ...]

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> StorageClass:
        return cls(
            name=(raw.get("metadata") or {}).get("name") or "",
            provisioner=raw.get("provisioner") or "",
            binding_mode=raw.get("volumeBindingMode"),
            allowed_topologies=tuple(raw.get("allowedTopologies") or ()),
        )

    @property
    def delays_binding(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    # driver -> attach limit (drivers that report one)
    limits: dict[str, int]
    migrated: frozenset[str]

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> CSINode:
        meta = raw.get("metadata") or {}
        limits: dict[str, int] = {}
        for driver in (raw.get("spec") or {}).get("drivers") or ():
            count = (driver.get("allocatable") or {}).get("count")
            if count is not None:
                limits[driver.get("name") or ""] = int(count)
        migrated = (meta.get("annotations") or {}).get(MIGRATED_PLUGINS) or ""
        return cls(
            name=meta.get("name") or "",
            limits=limits,
            migrated=frozenset(p.strip() for p in migrated.split(",") if p.strip()),
        )


@dataclass(frozen=True, slots=True)
class StorageCapacity:
    """A CSIStorageCapacity: room for volumes of a class on the nodes its topology selects."""

    storage_class: str
    # maximumVolumeSize when given (the more precise), else capacity; None if neither.
    limit: int | None
    node_topology: LabelSelector | None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> StorageCapacity:
        limit = raw.get("maximumVolumeSize") or raw.get("capacity")
        topology = raw.get("nodeTopology")
        return cls(
            storage_class=raw.get("storageClassName") or "",
            limit=value_ceil(limit) if limit is not None else None,
            node_topology=LabelSelector.model_validate(topology) if topology is not None else None,
        )


def _key(raw: dict[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _action(event: str) -> ActionType:
    if event == "ADDED":
        return ActionType.ADD
    if event == "DELETED":
        return ActionType.DELETE
    return ActionType.UPDATE_OTHER


@dataclass
class VolumeStore:
    pvs: dict[str, PersistentVolume] = field(default_factory=dict)
    pvcs: dict[str, PersistentVolumeClaim] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    csi_nodes: dict[str, CSINode] = field(default_factory=dict)
    # CSIDrivers that opted into capacity tracking (spec.storageCapacity), and capacities.
    capacity_drivers: set[str] = field(default_factory=set)
    capacities: dict[str, StorageCapacity] = field(default_factory=dict)
    # Reserve's assumptions, by PV name and by claim key, until the watch catches up.
    assumed_pvs: dict[str, PersistentVolume] = field(default_factory=dict)
    assumed_pvcs: dict[str, PersistentVolumeClaim] = field(default_factory=dict)
    # Bumped on every change: plugins rebuild what they derive from the store.
    generation: int = 0

    def pv(self, name: str) -> PersistentVolume | None:
        return self.assumed_pvs.get(name) or self.pvs.get(name)

    def pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        key = f"{namespace}/{name}"
        return self.assumed_pvcs.get(key) or self.pvcs.get(key)

    def pvs_of_class(self, storage_class: str) -> list[PersistentVolume]:
        names = self.pvs.keys() | self.assumed_pvs.keys()
        found = [self.pv(name) for name in sorted(names)]
        return [pv for pv in found if pv is not None and pv.storage_class == storage_class]

    # -- watch events --------------------------------------------------------------------

    def on_pv(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        name = _key(raw)
        self.assumed_pvs.pop(name, None)
        if event == "DELETED":
            self.pvs.pop(name, None)
        else:
            self.pvs[name] = PersistentVolume.parse(raw)
        self.generation += 1
        return ClusterEvent(PERSISTENT_VOLUME, _action(event))

    def on_pvc(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        key = _key(raw)
        self.assumed_pvcs.pop(key, None)
        if event == "DELETED":
            self.pvcs.pop(key, None)
        else:
            self.pvcs[key] = PersistentVolumeClaim.parse(raw)
        self.generation += 1
        return ClusterEvent(PERSISTENT_VOLUME_CLAIM, _action(event))

    def on_storage_class(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        name = _key(raw)
        if event == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = StorageClass.parse(raw)
        self.generation += 1
        return ClusterEvent(STORAGE_CLASS, _action(event))

    def on_csi_node(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        name = _key(raw)
        if event == "DELETED":
            self.csi_nodes.pop(name, None)
        else:
            self.csi_nodes[name] = CSINode.parse(raw)
        self.generation += 1
        return ClusterEvent(CSI_NODE, _action(event))

    def on_csi_driver(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        name = _key(raw)
        self.capacity_drivers.discard(name)
        if event != "DELETED" and (raw.get("spec") or {}).get("storageCapacity"):
            self.capacity_drivers.add(name)
        self.generation += 1
        return ClusterEvent(CSI_DRIVER, _action(event))

    def on_storage_capacity(self, event: str, raw: dict[str, Any]) -> ClusterEvent:
        key = _key(raw)
        if event == "DELETED":
            self.capacities.pop(key, None)
        else:
            self.capacities[key] = StorageCapacity.parse(raw)
        self.generation += 1
        return ClusterEvent(CSI_STORAGE_CAPACITY, _action(event))

    # -- the scheduler's assumptions -----------------------------------------------------

    def assume_bound(self, pv: PersistentVolume, claim: PersistentVolumeClaim) -> None:
        """Reserve: the PV is taken by the claim (its claimRef will be written at PreBind)."""
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        self.assumed_pvs[pv.name] = replace(pv, claim_ref=ref)
        self.generation += 1

    def assume_selected(self, claim: PersistentVolumeClaim, node: str) -> None:
        """Reserve: the claim is to be provisioned for the node."""
        annotations = {**claim.annotations, SELECTED_NODE: node}
        self.assumed_pvcs[claim.key] = replace(claim, annotations=annotations)
        self.generation += 1

    def revert(self, pv_names: list[str], claim_keys: list[str]) -> None:
        """Unreserve: forget what was assumed (a watch event may have replaced it already)."""
        for name in pv_names:
            self.assumed_pvs.pop(name, None)
        for key in claim_keys:
            self.assumed_pvcs.pop(key, None)
        self.generation += 1
