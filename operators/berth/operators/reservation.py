"""Reservation operator: expiry, node loss, allocateOnce, owner accounting, garbage collection.

Three indices hold what it sees: the reservations (a Kopf index), and, from the pod and node
informers the operators share (:mod:`berth.operators.cluster`; Kopf's readiness per object
is quadratic at startup), the bound pods annotated with the reservation they were placed
into and the node names. Every event marks the reservations it concerns; the operators'
worker (:mod:`berth.operators.worker`) decides them one at a time
(:func:`berth.reservation.lifecycle.decide`) and writes only what differs, once pods and
nodes are listed. The worker also wakes when the earliest expiry or garbage collection
comes due, so there is no timer per object (Kopf timers would put a finalizer on every
reservation).

Everything is recomputed from the API, so a restart loses nothing. Every write carries the
resourceVersion it was decided from: a reservation changed meanwhile (by the scheduler,
say) gets 409 Conflict, and its watch event brings it back to be decided again. Events
are recorded only after the write they explain succeeded, so none repeats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import kopf
from kubernetes_asyncio.client import ApiClient
from pydantic import ValidationError

from berth import log
from berth.api.duration import DurationError, format_duration
from berth.api.reservation import GROUP, TERMINAL_PHASES, VERSION, Reservation
from berth.kube.client import api_client
from berth.kube.events import record
from berth.kube.write import NODE, POD, RESERVATION, ApiWriter
from berth.operators.cluster import UNLISTED_RETRY, Cluster
from berth.operators.index import Index
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker
from berth.reservation.collection import gc_period
from berth.reservation.lifecycle import PLACED_PHASES, Event, decide
from berth.reservation.owners import ALLOCATED_ANNOTATION, OwnerPod, owner_pod, owners_of

PLURAL: Final = "reservations"
COMPONENT: Final = "berth-reservation-operator"

logger = log.get(__name__)


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def reservation_objects(name: str, body: kopf.Body, **_: Any) -> dict[str, Reservation]:
    try:
        return {name: Reservation.from_dict(dict(body))}
    except ValidationError as err:
        # The CRD's schema keeps these out; one stored before it is left alone, loudly.
        logger.warning("reservation not readable; left as it is", name=name, error=str(err))
        return {}


def reservation_owner_pods(body: Mapping[str, Any]) -> dict[str, OwnerPod]:
    found = owner_pod(body)
    return {} if found is None else {found[0]: found[1]}


def reservation_nodes(body: Mapping[str, Any]) -> dict[str, None]:
    return {str(body["metadata"]["name"]): None}


class Reservations:
    """Decides one reservation at a time for the :class:`Worker`, and writes what differs."""

    def __init__(
        self,
        api: ApiClient,
        objects: kopf.Index[str, Reservation],
        listed: Callable[[], bool],
        period: timedelta,
    ) -> None:
        """``listed``: both pods and nodes are."""
        self.api = api
        self.writer = ApiWriter(api)
        self.objects = objects
        self.owners = Index(reservation_owner_pods)
        self.nodes = Index(reservation_nodes)
        self.listed = listed
        self.gc_period = period
        self.worker = Worker("reservation", self.reconcile)

    def pod_event(self, kind: str, body: dict[str, Any]) -> None:
        """Marks the reservation an annotated pod names, and any its owners changed in."""
        changed = self.owners.observe(kind, body)
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if ALLOCATED_ANNOTATION in annotations:
            found = owner_pod(body)
            if found is not None:
                changed.add(found[0])
        self.worker.mark_all(changed)

    def node_event(self, kind: str, body: dict[str, Any]) -> None:
        self.nodes.observe(kind, body)
        if kind == "DELETED":
            self.node_deleted(str(body["metadata"]["name"]))

    def node_deleted(self, node: str) -> None:
        """Mark the reservations placed on ``node``."""
        for name, store in self.objects.items():
            if any(r.status is not None and r.status.node_name == node for r in store):
                self.worker.mark(name)

    async def reconcile(self, name: str) -> datetime | None:
        if not self.listed():
            # An owner not listed yet would read as gone, a node as deleted.
            return self.worker.clock() + UNLISTED_RETRY
        reservation = next(iter(self.objects.get(name, ())), None)
        if reservation is None:
            return None
        owners = owners_of(reservation, self.owners.get(name, ()))
        decision = decide(
            reservation,
            self.worker.clock(),
            owners=owners,
            node_gone=await self._node_gone(reservation),
            gc_period=self.gc_period,
            record_spent=await self._record_spent(reservation, owners),
        )
        if decision.delete is not None:
            await self._delete(name, reservation, decision.delete)
            return None
        if decision.status is not None:
            await self._patch(name, reservation, decision.status, decision.events)
        return decision.recheck_at

    async def _node_gone(self, reservation: Reservation) -> bool:
        """Whether status.nodeName names a node that does not exist.

        The index may lag a node that was just created, so an absence is confirmed by
        reading the node.
        """
        node = reservation.status.node_name if reservation.status else None
        relevant = reservation.phase in PLACED_PHASES or reservation.phase in TERMINAL_PHASES
        if not node or not relevant or node in self.nodes:
            return False
        return not await self.writer.exists(NODE, node)

    async def _record_spent(self, reservation: Reservation, owners: list[OwnerPod]) -> bool:
        """Whether an owner the scheduler recorded on this allocateOnce reservation will
        never be bound into it: gone, finished, or bound without it. Read, not indexed:
        the index holds only pods already bound with the annotation."""
        status = reservation.status
        if (
            not reservation.spec.allocate_once
            or owners
            or reservation.phase in TERMINAL_PHASES
            or status is None
            or not status.current_owners
        ):
            return False
        for recorded in status.current_owners:
            if not recorded.name or not recorded.namespace:
                return True  # nothing to wait for
            pod = await self.writer.read(POD, recorded.name, namespace=recorded.namespace)
            if pod is None or (recorded.uid and pod["metadata"].get("uid") != recorded.uid):
                return True
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return True
            found = owner_pod(pod)
            if found is not None and found[0] == reservation.metadata.name:
                return False  # bound into it: the index is a moment behind
            if (pod.get("spec") or {}).get("nodeName"):
                return True  # bound without it
        return False

    async def _patch(
        self,
        name: str,
        reservation: Reservation,
        status: dict[str, Any],
        events: tuple[Event, ...],
    ) -> None:
        version = reservation.metadata.resource_version
        await self.writer.patch_status(RESERVATION, name, status, resource_version=version)
        logger.info("reservation status updated", name=name, status=status)
        await record(self.writer, reservation, events, component=COMPONENT)

    async def _delete(self, name: str, reservation: Reservation, why: str) -> None:
        meta = reservation.metadata
        await self.writer.delete(
            RESERVATION, name, uid=meta.uid, resource_version=meta.resource_version
        )
        logger.info("reservation deleted", name=name, phase=reservation.phase, why=why)


@kopf.on.startup(registry=REGISTRY)
async def start_reservations(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views.

    The worker decides nothing before an event marks a reservation, Kopf delivers
    events only once its index of reservations is filled, and a decision waits until
    the pods and nodes are listed.
    """
    try:
        period = gc_period(os.environ)
    except DurationError as err:
        raise kopf.PermanentError(str(err)) from err
    cluster: Cluster = memo.cluster
    state = Reservations(
        api_client(memo.configuration),
        kwargs["reservation_objects"],
        lambda: cluster.pods.listed() and cluster.nodes.listed(),
        period,
    )
    memo.reservations = state
    cluster.pods.subscribe(state.pod_event)
    cluster.nodes.subscribe(state.node_event)
    state.worker.start()
    logger.info("reservation operator started", gc_period=format_duration(period))


@kopf.on.cleanup(registry=REGISTRY)
async def stop_reservations(memo: kopf.Memo, **_: Any) -> None:
    state: Reservations | None = memo.get("reservations")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def reservation_event(name: str, memo: Any, **_: Any) -> None:
    memo.reservations.worker.mark(name)
