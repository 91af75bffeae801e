"""VolumeBinding: a pod goes where its claims' volumes are, or can be.

PreFilter sorts the pod's claims (``binder.pod_claims``) and refuses pods with missing,
lost, deleted or unbound immediate claims; bound local volumes narrow the attempt to their
nodes. Filter checks bound PVs' node affinity and, for WaitForFirstConsumer claims, that
each node has a matching available PV or a class that provisions there. Reserve assumes
the chosen PVs and selected-node annotations in the volume store (Unreserve reverts them);
PreBind writes them (a PV's claimRef, a claim's ``volume.kubernetes.io/selected-node``)
and waits, up to ``bindTimeoutSeconds``, for the PV controller to bind every claim.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.kube.write import Kind
from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.volumestore import (
    BOUND_BY_CONTROLLER,
    CSI_DRIVER,
    CSI_STORAGE_CAPACITY,
    SELECTED_NODE,
    PersistentVolume,
    PersistentVolumeClaim,
    VolumeStore,
)
from berth.scheduler.framework.clusterevents import (
    CSI_NODE,
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
    Code,
    CycleState,
    Handle,
    Plugin,
    Reason,
    Status,
    Verdict,
    skip,
    unschedulable,
)
from berth.scheduler.plugins.volumebinding.binder import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    NOT_ENOUGH_SPACE,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    ClaimError,
    NodeVolumes,
    PodClaims,
    affinity_rows,
    bound_reasons,
    check_claims,
    eligible_nodes,
    node_volumes,
    pod_claims,
    unbound_rows,
)

logger = log.get(__name__)

PERSISTENT_VOLUMES = Kind("", "v1", "persistentvolumes", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Kind("", "v1", "persistentvolumeclaims", namespaced=True)
DEFAULT_BIND_TIMEOUT_SECONDS = 600
POLL_SECONDS = 1.0
STATE = "VolumeBinding"


class BindingError(Exception):
    """The binding the scheduler wrote was undone or cannot complete."""


@dataclass
class _State:
    claims: PodClaims
    # What Reserve assumed, for PreBind to write and Unreserve to revert.
    chosen: NodeVolumes | None = None
    # Versions of the objects as they were before our writes: the watch shows ours after.
    versions: dict[str, str] = field(default_factory=dict)


def _version(obj: PersistentVolume | PersistentVolumeClaim) -> str:
    return str((obj.raw.get("metadata") or {}).get("resourceVersion") or "")


def check_bindings(
    store: VolumeStore, chosen: NodeVolumes, node: str, since: dict[str, str]
) -> bool:
    """Whether the PV controller has bound every claim Reserve chose for (kube-scheduler's
    checkBindings); raises when a binding was undone."""
    for pv, claim in chosen.static:
        current = store.pvs.get(pv.name)
        current_claim = store.pvcs.get(claim.key)
        if current is None or current_claim is None:
            raise BindingError(f'failed to check binding: "{pv.name}" or "{claim.key}" is gone')
        if _version(current) == since.get(f"pv/{pv.name}"):
            return False  # our write has not come back through the watch yet
        if current.claim_ref is None or not current.claim_ref.uid:
            raise BindingError(f'ClaimRef got reset for pv "{pv.name}"')
        if not current_claim.fully_bound:
            return False
    for claim in chosen.provision:
        current_claim = store.pvcs.get(claim.key)
        if current_claim is None:
            raise BindingError(f'failed to check binding: "{claim.key}" is gone')
        if _version(current_claim) == since.get(f"pvc/{claim.key}"):
            return False
        if current_claim.annotations.get(SELECTED_NODE) != node:
            raise BindingError(f'provisioning failed for PVC "{claim.name}"')
        if not current_claim.fully_bound:
            return False
    return True


class VolumeBinding(Plugin):
    name = "VolumeBinding"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        timeout = args.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT_SECONDS)
        if not isinstance(timeout, int) or timeout < 0:
            raise ValueError("bindTimeoutSeconds: must not be negative")
        self.bind_timeout = float(timeout)
        # PV name -> (the PV, node label generation, the rows its node affinity admits)
        self._affinity: dict[str, tuple[PersistentVolume, int, Mask]] = {}

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        changed = ActionType.ADD | ActionType.UPDATE_OTHER
        return (
            on(CSI_STORAGE_CAPACITY, changed),
            on(CSI_DRIVER, ActionType.UPDATE_OTHER),
            on(STORAGE_CLASS, changed),
            on(PERSISTENT_VOLUME_CLAIM, changed, _claim_of_pod),
            on(PERSISTENT_VOLUME, changed),
            on(CSI_NODE, changed),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
        )

    @property
    def store(self) -> VolumeStore:
        return self.handle.view.volumes

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        if not pod.volumes.claims:
            return skip(self.name)
        try:
            check_claims(self.store, pod)
        except ClaimError as err:
            return unschedulable(self.name, str(err), resolvable=False)
        try:
            claims = pod_claims(self.store, pod)
        except ClaimError as err:
            return Status(Code.ERROR, (str(err),), self.name)
        if claims.immediate:
            return unschedulable(self.name, UNBOUND_IMMEDIATE, resolvable=False)
        state.data[STATE] = _State(claims)
        eligible = eligible_nodes(self.store, claims.bound)
        if eligible is not None:
            rows = np.zeros(nodes.size, dtype=bool)
            for name in eligible:
                row = nodes.index.get(name)
                if row is not None:
                    rows[row] = True
            state.limit_nodes(rows, self.name)
        return SUCCESS

    def _admits(self, claims: PodClaims, nodes: NodeTable) -> dict[str, Mask]:
        """Each candidate PV's node-affinity rows, derived again only when the PV or any
        node's labels change."""
        masks: dict[str, Mask] = {}
        generation = nodes.label_generation
        for candidates in claims.candidates.values():
            for pv in candidates:
                cached = self._affinity.get(pv.name)
                if (
                    cached is None
                    or cached[0] is not pv
                    or cached[1] != generation
                    or len(cached[2]) != nodes.size
                ):
                    cached = self._affinity[pv.name] = (pv, generation, affinity_rows(pv, nodes))
                masks[pv.name] = cached[2]
        if len(self._affinity) > 2 * len(self.store.pvs) + 64:  # forget deleted PVs
            self._affinity = {k: v for k, v in self._affinity.items() if k in self.store.pvs}
        return masks

    def _on_node(
        self, claims: PodClaims, nodes: NodeTable, row: int, masks: dict[str, Mask]
    ) -> NodeVolumes:
        admits = {name: bool(mask[row]) for name, mask in masks.items()}
        return node_volumes(self.store, claims, nodes.names[row], nodes.labels[row], admits)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        found = state.data.get(STATE)
        if not isinstance(found, _State):
            return Verdict.all(nodes)
        claims = found.claims
        conflict, missing = bound_reasons(self.store, claims.bound, nodes)
        unbound = np.zeros(nodes.size, dtype=bool)
        no_space = np.zeros(nodes.size, dtype=bool)
        if claims.delayed:
            masks = self._admits(claims, nodes)
            try:
                by_column = unbound_rows(self.store, claims, nodes, masks)
            except ClaimError:  # the class went away: no node can provision
                unbound[:] = True
                by_column = None
            if by_column is not None:
                unbound, no_space = by_column.unbound, by_column.no_space
            elif not unbound.all():  # several claims compete for the same PVs: row by row
                for row in nodes.rows():
                    try:
                        decided = self._on_node(claims, nodes, row, masks)
                    except ClaimError:
                        unbound[row] = True
                        continue
                    unbound[row] = BIND_CONFLICT in decided.reasons
                    no_space[row] = NOT_ENOUGH_SPACE in decided.reasons
        failed = conflict | missing | unbound | no_space
        reasons = (
            Reason(conflict, NODE_CONFLICT, resolvable=False),
            Reason(unbound, BIND_CONFLICT, resolvable=False),
            Reason(no_space, NOT_ENOUGH_SPACE, resolvable=False),
            Reason(missing, PV_NOT_EXIST, resolvable=False),
        )
        return Verdict(~failed, reasons)

    # -- binding -------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        found = state.data.get(STATE)
        if not isinstance(found, _State) or found.claims.all_bound:
            return SUCCESS
        nodes = self.handle.view.nodes
        row = nodes.index.get(node)
        if row is None:
            return Status(Code.ERROR, (f'node "{node}" not found',), self.name)
        try:
            chosen = self._on_node(found.claims, nodes, row, self._admits(found.claims, nodes))
        except ClaimError as err:
            return Status(Code.ERROR, (str(err),), self.name)
        if chosen.reasons:
            return Status(Code.ERROR, tuple(chosen.reasons), self.name)
        for pv, claim in chosen.static:
            found.versions[f"pv/{pv.name}"] = _version(pv)
            self.store.assume_bound(pv, claim)
        for claim in chosen.provision:
            found.versions[f"pvc/{claim.key}"] = _version(claim)
            self.store.assume_selected(claim, node)
        found.chosen = chosen
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        found = state.data.get(STATE)
        if not isinstance(found, _State) or found.chosen is None:
            return
        chosen, found.chosen = found.chosen, None
        self.store.revert(
            [pv.name for pv, _ in chosen.static], [claim.key for claim in chosen.provision]
        )

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        found = state.data.get(STATE)
        if not isinstance(found, _State) or found.chosen is None:
            return SUCCESS
        writer = self.handle.writer
        assert writer is not None, "binding needs the API writer"
        chosen = found.chosen
        try:
            for pv, claim in chosen.static:
                await writer.bucket.take()
                await writer.api.patch(PERSISTENT_VOLUMES, pv.name, _claim_ref_patch(pv, claim))
            for claim in chosen.provision:
                await writer.bucket.take()
                body = {
                    "metadata": {
                        "resourceVersion": _version(claim),
                        "annotations": {SELECTED_NODE: node},
                    }
                }
                await writer.api.patch(
                    PERSISTENT_VOLUME_CLAIMS, claim.name, body, namespace=claim.namespace
                )
            deadline = time.monotonic() + self.bind_timeout
            while not check_bindings(self.store, chosen, node, found.versions):
                if time.monotonic() >= deadline:
                    raise BindingError("timed out waiting for the condition")
                await asyncio.sleep(POLL_SECONDS)
        except (ApiException, BindingError) as err:
            reason = err.reason if isinstance(err, ApiException) else str(err)
            logger.info(
                "volume binding failed",
                namespace=pod.namespace,
                name=pod.name,
                node=node,
                error=reason,
            )
            return Status(Code.ERROR, (f"binding volumes: {reason}",), self.name)
        logger.debug("volumes bound", namespace=pod.namespace, name=pod.name, node=node)
        return SUCCESS


def _claim_of_pod(pod: PodInfo, old: object, new: object) -> bool:
    """A claim's change helps only the pods that mount it."""
    claim = new if isinstance(new, PersistentVolumeClaim) else old
    if not isinstance(claim, PersistentVolumeClaim):
        return True
    return claim.namespace == pod.namespace and claim.name in pod.volumes.claim_names


def _claim_ref_patch(pv: PersistentVolume, claim: PersistentVolumeClaim) -> dict[str, Any]:
    """The PV bound to the claim, as the PV controller expects the scheduler to write it;
    the resourceVersion makes it fail if the PV changed since it was chosen."""
    metadata: dict[str, Any] = {"resourceVersion": _version(pv)}
    if not pv.bound_to(claim):
        metadata["annotations"] = {BOUND_BY_CONTROLLER: "yes"}
    claim_meta = claim.raw.get("metadata") or {}
    return {
        "metadata": metadata,
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim.namespace,
                "name": claim.name,
                "uid": claim.uid,
                "resourceVersion": claim_meta.get("resourceVersion") or "",
            }
        },
    }
