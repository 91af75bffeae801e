"""VolumeBinding's decisions, as plain functions over the volume store and the node table.

kube-scheduler's volume binder: a pod's claims are bound (they follow their PV's node
affinity), unbound with a WaitForFirstConsumer class (bound here to a matching available
PV on the chosen node, or provisioned for it), or unbound immediate (the PV controller's
to bind first: the pod waits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.volumestore import (
    NO_PROVISIONER,
    SELECTED_NODE,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    VolumeStore,
)
from berth.scheduler.plugins.selectors import term_matches

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
HOSTNAME = "kubernetes.io/hostname"


class ClaimError(Exception):
    """A claim the pod cannot be placed with (its message is kube-scheduler's)."""


@dataclass
class PodClaims:
    bound: list[PersistentVolumeClaim] = field(default_factory=list)
    delayed: list[PersistentVolumeClaim] = field(default_factory=list)
    immediate: list[PersistentVolumeClaim] = field(default_factory=list)
    # PVs of each delayed claim's class, listed once per attempt.
    candidates: dict[str, list[PersistentVolume]] = field(default_factory=dict)

    @property
    def all_bound(self) -> bool:
        return not self.delayed and not self.immediate


@dataclass
class NodeVolumes:
    """What binding the pod's claims on one node takes."""

    static: list[tuple[PersistentVolume, PersistentVolumeClaim]] = field(default_factory=list)
    provision: list[PersistentVolumeClaim] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


@dataclass
class UnboundRows:
    """Rows where the delayed claims cannot be bound, and rows without the storage for them."""

    unbound: Mask
    no_space: Mask


def check_claims(store: VolumeStore, pod: PodInfo) -> None:
    """kube-scheduler's first look at the pod's claims (PreFilter): each must exist, not be
    lost or being deleted, and an ephemeral volume's claim must be the pod's own."""
    for use in pod.volumes.claims:
        claim = store.pvcs.get(f"{pod.namespace}/{use.claim}")
        if claim is None:
            if use.ephemeral:
                raise ClaimError(
                    "waiting for ephemeral volume controller to create the "
                    f'persistentvolumeclaim "{use.claim}"'
                )
            raise ClaimError(f'persistentvolumeclaim "{use.claim}" not found')
        if claim.phase == "Lost":
            raise ClaimError(
                f'persistentvolumeclaim "{claim.name}" bound to non-existent '
                f'persistentvolume "{claim.volume_name}"'
            )
        if claim.deleting:
            raise ClaimError(f'persistentvolumeclaim "{claim.name}" is being deleted')
        if use.ephemeral and claim.controller_uid != pod.uid:
            raise ClaimError(
                f"PVC {claim.namespace}/{claim.name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)"
            )


def delays_binding(store: VolumeStore, claim: PersistentVolumeClaim) -> bool:
    if not claim.storage_class:
        return False
    storage_class = store.classes.get(claim.storage_class)
    if storage_class is None:
        return False
    if storage_class.binding_mode is None:
        raise ClaimError(f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"')
    return storage_class.delays_binding


def pod_claims(store: VolumeStore, pod: PodInfo) -> PodClaims:
    """The pod's claims sorted into bound, waiting for this scheduler, and immediate."""
    claims = PodClaims()
    for use in pod.volumes.claims:
        claim = store.pvc(pod.namespace, use.claim)
        if claim is None:
            raise ClaimError(f'error getting PVC "{pod.namespace}/{use.claim}"')
        if claim.fully_bound:
            claims.bound.append(claim)
        elif delays_binding(store, claim) and not claim.volume_name:
            claims.delayed.append(claim)
        else:  # a claim pre-bound to a PV is the PV controller's to finish
            claims.immediate.append(claim)
    for claim in claims.delayed:
        claims.candidates.setdefault(claim.storage_class, store.pvs_of_class(claim.storage_class))
    return claims


def local_node_names(pv: PersistentVolume) -> set[str]:
    """Node names a PV's required affinity pins by ``kubernetes.io/hostname In``."""
    result: set[str] = set()
    if pv.node_affinity is None:
        return result
    for term in pv.node_affinity.node_selector_terms:
        names: set[str] | None = None
        for req in term.match_expressions or ():
            if req.key == HOSTNAME and req.operator.value == "In":
                values = set(req.values or ())
                names = values if names is None else names & values
        result |= names or set()
    return result


def eligible_nodes(store: VolumeStore, bound: list[PersistentVolumeClaim]) -> set[str] | None:
    """The only nodes bound local volumes allow, or None where they do not narrow it."""
    eligible: set[str] | None = None
    for claim in bound:
        pv = store.pv(claim.volume_name)
        if pv is None:
            return None
        names = local_node_names(pv)
        if names:
            eligible = names if eligible is None else eligible & names
    return eligible


def affinity_rows(pv: PersistentVolume, nodes: NodeTable) -> Mask:
    """Rows the PV's required node affinity admits (all rows if it has none)."""
    if pv.node_affinity is None:
        return np.ones(nodes.size, dtype=bool)
    rows = np.zeros(nodes.size, dtype=bool)
    for term in pv.node_affinity.node_selector_terms:
        rows |= term_matches(nodes, term)
    return rows


def bound_reasons(
    store: VolumeStore, bound: list[PersistentVolumeClaim], nodes: NodeTable
) -> tuple[Mask, Mask]:
    """Rows where a bound claim's PV does not admit the node, and rows where a PV is gone
    (the first claim that fails a row decides its reason)."""
    conflict = np.zeros(nodes.size, dtype=bool)
    missing = np.zeros(nodes.size, dtype=bool)
    for claim in bound:
        pv = store.pv(claim.volume_name)
        if pv is None:
            missing = ~conflict
            break
        conflict |= ~affinity_rows(pv, nodes)
    return conflict, missing


PREBOUND = "prebound"
AVAILABLE = "available"


def fit(pv: PersistentVolume, claim: PersistentVolumeClaim) -> str:
    """What the PV is to the claim, wherever the node: PREBOUND (its claimRef names the
    claim), AVAILABLE (free and fitting), or "" (not for this claim)."""
    if pv.claim_ref is not None and not pv.bound_to(claim):
        return ""
    if pv.capacity < claim.request or pv.volume_mode != claim.volume_mode or pv.deleting:
        return ""
    if pv.bound_to(claim):
        return PREBOUND
    if pv.phase != "Available" or pv.storage_class != claim.storage_class:
        return ""
    if claim.selector is not None and not claim.selector.matches(pv.labels):
        return ""
    if not claim.access_modes <= pv.access_modes:
        return ""
    if pv.attributes_class != claim.attributes_class:
        return ""
    return AVAILABLE


def find_matching_volume(
    claim: PersistentVolumeClaim,
    candidates: list[PersistentVolume],
    admits: dict[str, bool],
    chosen: set[str],
) -> PersistentVolume | None:
    """The smallest available PV the claim may bind to on a node (``admits``: whether each
    PV's node affinity admits that node); a PV pre-bound to the claim wins outright."""
    smallest: PersistentVolume | None = None
    for pv in candidates:
        if pv.name in chosen:
            continue
        kind = fit(pv, claim)
        if kind == PREBOUND:
            return pv if admits[pv.name] else None
        if kind != AVAILABLE or not admits[pv.name]:
            continue
        if smallest is None or pv.capacity < smallest.capacity:
            smallest = pv
    return smallest


def matchable_rows(
    claim: PersistentVolumeClaim,
    candidates: list[PersistentVolume],
    masks: dict[str, Mask],
    size: int,
) -> Mask:
    """Rows where ``find_matching_volume`` finds the claim a PV (nothing chosen yet)."""
    rows = np.zeros(size, dtype=bool)
    for pv in candidates:
        kind = fit(pv, claim)
        if kind == PREBOUND:
            return masks[pv.name]
        if kind == AVAILABLE:
            rows |= masks[pv.name]
    return rows


def provisionable_rows(store: VolumeStore, claim: PersistentVolumeClaim, nodes: NodeTable) -> Mask:
    """Rows where the claim's class can provision it (``can_provision`` over every row)."""
    storage_class = store.classes.get(claim.storage_class)
    if storage_class is None:
        raise ClaimError(f'failed to find storage class "{claim.storage_class}"')
    if storage_class.provisioner in ("", NO_PROVISIONER):
        return np.zeros(nodes.size, dtype=bool)
    if not storage_class.allowed_topologies:
        return np.ones(nodes.size, dtype=bool)
    rows = np.zeros(nodes.size, dtype=bool)
    for term in storage_class.allowed_topologies:
        matched = np.ones(nodes.size, dtype=bool)
        for expression in term.get("matchLabelExpressions") or ():
            codes, vocabulary = nodes.label_codes(expression.get("key") or "")
            wanted = [vocabulary[v] for v in expression.get("values") or () if v in vocabulary]
            matched &= np.isin(codes, wanted)
        rows |= matched
    return rows


def capacity_rows(
    store: VolumeStore, claim: PersistentVolumeClaim, storage_class: StorageClass, nodes: NodeTable
) -> Mask:
    """Rows with room for the claim, where its driver publishes CSIStorageCapacity: some
    capacity of the class, large enough, whose node topology selects the node."""
    if not claim.request or storage_class.provisioner not in store.capacity_drivers:
        return np.ones(nodes.size, dtype=bool)
    rows = np.zeros(nodes.size, dtype=bool)
    for capacity in store.capacities.values():
        if capacity.storage_class != storage_class.name or capacity.node_topology is None:
            continue
        if capacity.limit is None or capacity.limit < claim.request:
            continue
        for row in nodes.rows():
            if not rows[row] and capacity.node_topology.matches(nodes.labels[row]):
                rows[row] = True
    return rows


def has_capacity(
    store: VolumeStore,
    claim: PersistentVolumeClaim,
    storage_class: StorageClass,
    labels: dict[str, str],
) -> bool:
    """``capacity_rows`` for one node."""
    if not claim.request or storage_class.provisioner not in store.capacity_drivers:
        return True
    return any(
        c.storage_class == storage_class.name
        and c.node_topology is not None
        and c.limit is not None
        and c.limit >= claim.request
        and c.node_topology.matches(labels)
        for c in store.capacities.values()
    )


def can_provision(storage_class: StorageClass, labels: dict[str, str]) -> bool:
    """A class that provisions, for a node its allowedTopologies admit."""
    if storage_class.provisioner in ("", NO_PROVISIONER):
        return False
    if not storage_class.allowed_topologies:
        return True
    for term in storage_class.allowed_topologies:
        expressions = term.get("matchLabelExpressions") or ()
        if all(labels.get(e.get("key")) in (e.get("values") or ()) for e in expressions):
            return True
    return False


def unbound_rows(
    store: VolumeStore, claims: PodClaims, nodes: NodeTable, masks: dict[str, Mask]
) -> UnboundRows | None:
    """``node_volumes``'s reasons over all rows at once; None when several claims compete
    for candidate PVs, which is decided row by row."""
    to_match = [c for c in claims.delayed if SELECTED_NODE not in c.annotations]
    if len(to_match) > 1:
        return None
    wrong_node = np.zeros(nodes.size, dtype=bool)
    # Claims to provision, in kube-scheduler's order, with the rows where each needs it.
    needs: list[tuple[PersistentVolumeClaim, Mask]] = []
    for claim in claims.delayed:
        selected = claim.annotations.get(SELECTED_NODE)
        if selected is not None:
            row = nodes.index.get(selected)
            wrong_node |= np.arange(nodes.size) != (-1 if row is None else row)
            needs.append((claim, np.ones(nodes.size, dtype=bool)))
    if to_match:
        (claim,) = to_match
        candidates = claims.candidates[claim.storage_class]
        needs.append((claim, ~matchable_rows(claim, candidates, masks, nodes.size)))
    unbound = np.zeros(nodes.size, dtype=bool)
    no_space = np.zeros(nodes.size, dtype=bool)
    alive = ~wrong_node  # rows no earlier claim has failed
    for claim, needed in needs:
        if not (alive & needed).any():
            continue
        failing = alive & needed & ~provisionable_rows(store, claim, nodes)
        unbound |= failing
        alive &= ~failing
        storage_class = store.classes[claim.storage_class]
        short = alive & needed & ~capacity_rows(store, claim, storage_class, nodes)
        no_space |= short
        alive &= ~short
    return UnboundRows(wrong_node | unbound, no_space)


def node_volumes(
    store: VolumeStore,
    claims: PodClaims,
    node: str,
    labels: dict[str, str],
    admits: dict[str, bool],
) -> NodeVolumes:
    """Static bindings and provisioning for the delayed claims on one node, or why not."""
    result = NodeVolumes()
    to_match: list[PersistentVolumeClaim] = []
    to_provision: list[PersistentVolumeClaim] = []
    for claim in claims.delayed:
        selected = claim.annotations.get(SELECTED_NODE)
        if selected is not None:
            if selected != node:
                result.reasons.append(BIND_CONFLICT)
                return result
            to_provision.append(claim)
        else:
            to_match.append(claim)
    chosen: set[str] = set()
    satisfied = True
    for claim in sorted(to_match, key=lambda c: c.request):
        pv = find_matching_volume(claim, claims.candidates[claim.storage_class], admits, chosen)
        if pv is None:
            to_provision.append(claim)
            satisfied = False
            continue
        chosen.add(pv.name)
        result.static.append((pv, claim))
    sufficient = True
    if to_provision:
        satisfied = True
        for claim in to_provision:
            storage_class = store.classes.get(claim.storage_class)
            if storage_class is None:
                raise ClaimError(f'failed to find storage class "{claim.storage_class}"')
            if not can_provision(storage_class, labels):
                satisfied = False
                break
            if not has_capacity(store, claim, storage_class, labels):
                sufficient = False
                break
            result.provision.append(claim)
    if not satisfied:
        result.reasons.append(BIND_CONFLICT)
    if not sufficient:
        result.reasons.append(NOT_ENOUGH_SPACE)
    return result
