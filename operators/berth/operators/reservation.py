"""Reservation operator: expiry, node loss, allocateOnce, owner accounting, garbage collection.

Three Kopf indices hold what it sees: the reservations, the bound pods annotated with the
reservation they were placed into, and the node names. Every event marks the reservations
it concerns; one worker decides them one at a time (:func:`berth.reservation.lifecycle.decide`)
and writes only what differs. The worker also wakes when the earliest expiry or garbage
collection comes due, so there is no timer per object (Kopf timers would put a finalizer
on every reservation).

Everything is recomputed from the API, so a restart loses nothing. Every write carries the
resourceVersion it was decided from: a reservation changed meanwhile (by the scheduler,
say) gets 409 Conflict, and its watch event brings it back to be decided again. Events
are recorded only after the write they explain succeeded, so none repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import kopf
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from berth import log
from berth.api.duration import DurationError, format_duration
from berth.api.reservation import GROUP, TERMINAL_PHASES, VERSION, Reservation
from berth.kube.client import api_client, succeeded
from berth.kube.events import event_body, post_event
from berth.operators.registry import REGISTRY
from berth.reservation.collection import gc_period
from berth.reservation.lifecycle import PLACED_PHASES, Decision, Event, decide
from berth.reservation.owners import ALLOCATED_ANNOTATION, OwnerPod, owner_pod, owners_of

PLURAL: Final = "reservations"
MERGE: Final = "application/merge-patch+json"
COMPONENT: Final = "berth-reservation-operator"
EVENT_NAMESPACE: Final = "default"
RETRY: Final = timedelta(seconds=5)
"""How soon a reservation whose write failed (other than by a conflict) is tried again."""

logger = log.get(__name__)


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
def reservation_objects(name: str, body: kopf.Body, **_: Any) -> dict[str, Reservation]:
    try:
        return {name: Reservation.from_dict(dict(body))}
    except ValidationError as err:
        # The CRD's schema keeps these out; one stored before it is left alone, loudly.
        logger.warning("reservation not readable; left as it is", name=name, error=str(err))
        return {}


@kopf.index("pods", registry=REGISTRY)
def reservation_owner_pods(body: kopf.Body, **_: Any) -> dict[str, OwnerPod]:
    found = owner_pod(body)
    return {} if found is None else {found[0]: found[1]}


@kopf.index("nodes", registry=REGISTRY)
def reservation_nodes(name: str, **_: Any) -> dict[str, None]:
    return {name: None}


class Reservations:
    """The worker: marked and due reservations, decided and written one at a time."""

    def __init__(
        self,
        api: ApiClient,
        objects: kopf.Index[str, Reservation],
        owners: kopf.Index[str, OwnerPod],
        nodes: kopf.Index[str, None],
        period: timedelta,
    ) -> None:
        self.api = api
        self.custom: Any = CustomObjectsApi(api)
        self.core: Any = CoreV1Api(api)
        self.objects = objects
        self.owners = owners
        self.nodes = nodes
        self.gc_period = period
        self._marked: set[str] = set()
        self._due: dict[str, datetime] = {}  # name -> when time alone changes its decision
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def mark(self, name: str) -> None:
        self._marked.add(name)
        self._wake.set()

    def node_deleted(self, node: str) -> None:
        """Mark the reservations placed on ``node``."""
        for name, store in self.objects.items():
            if any(r.status is not None and r.status.node_name == node for r in store):
                self.mark(name)

    async def _run(self) -> None:
        while True:
            await self._sleep()
            now = datetime.now(UTC)
            names = self._marked | {name for name, at in self._due.items() if at <= now}
            self._marked = set()
            for name in sorted(names):
                await self._reconcile_safely(name)

    async def _sleep(self) -> None:
        """Until marked, or until the earliest due time."""
        timeout = None
        if self._due:
            timeout = max(0.0, (min(self._due.values()) - datetime.now(UTC)).total_seconds())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()

    async def _reconcile_safely(self, name: str) -> None:
        try:
            await self.reconcile(name)
        except ApiException as err:
            if err.status in (404, 409):
                # Gone or changed meanwhile: its watch event brings the news.
                logger.debug("reservation changed meanwhile", name=name, status=err.status)
                return
            logger.warning("reservation not written; retrying", name=name, status=err.status)
            self._due[name] = datetime.now(UTC) + RETRY
        except Exception:
            # One bad object must never stop the worker for all the others.
            logger.exception("reservation not decided; retrying", name=name)
            self._due[name] = datetime.now(UTC) + RETRY

    async def reconcile(self, name: str) -> None:
        reservation = next(iter(self.objects.get(name, ())), None)
        self._due.pop(name, None)
        if reservation is None:
            return
        decision = decide(
            reservation,
            datetime.now(UTC),
            owners=owners_of(reservation.metadata.uid, self.owners.get(name, ())),
            node_gone=await self._node_gone(reservation),
            gc_period=self.gc_period,
        )
        if decision.delete is not None:
            await self._delete(reservation, decision.delete)
            return
        if decision.status is not None:
            await self._patch(reservation, decision)
        if decision.recheck_at is not None:
            self._due[name] = decision.recheck_at

    async def _node_gone(self, reservation: Reservation) -> bool:
        """Whether status.nodeName names a node that does not exist.

        The index may lag a node that was just created, so an absence is confirmed by
        reading the node.
        """
        node = reservation.status.node_name if reservation.status else None
        relevant = reservation.phase in PLACED_PHASES or reservation.phase in TERMINAL_PHASES
        if not node or not relevant or node in self.nodes:
            return False
        try:
            await succeeded(self.core.read_node(node, _preload_content=False))
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    async def _patch(self, reservation: Reservation, decision: Decision) -> None:
        meta = reservation.metadata
        body = {"metadata": {"resourceVersion": meta.resource_version}, "status": decision.status}
        await succeeded(
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, PLURAL, meta.name, body, _content_type=MERGE, _preload_content=False
            )
        )
        logger.info("reservation status updated", name=meta.name, status=decision.status)
        for event in decision.events:
            await self._record(reservation, event)

    async def _delete(self, reservation: Reservation, why: str) -> None:
        meta = reservation.metadata
        options = {"preconditions": {"uid": meta.uid, "resourceVersion": meta.resource_version}}
        await succeeded(
            self.custom.delete_cluster_custom_object(
                GROUP, VERSION, PLURAL, meta.name, body=options, _preload_content=False
            )
        )
        logger.info("reservation deleted", name=meta.name, phase=reservation.phase, why=why)

    async def _record(self, reservation: Reservation, event: Event) -> None:
        meta = reservation.metadata
        involved = {
            "apiVersion": reservation.api_version,
            "kind": reservation.kind,
            "name": meta.name,
            "uid": meta.uid,
        }
        body = event_body(
            involved,
            EVENT_NAMESPACE,
            event.reason,
            event.message,
            warning=event.warning,
            component=COMPONENT,
        )
        await post_event(self.core, body)


@kopf.on.startup(registry=REGISTRY)
async def start_reservations(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views.

    The worker decides nothing before an event marks a reservation, and Kopf delivers
    events only once every index is filled.
    """
    try:
        period = gc_period(os.environ)
    except DurationError as err:
        raise kopf.PermanentError(str(err)) from err
    state = Reservations(
        api_client(memo.configuration),
        kwargs["reservation_objects"],
        kwargs["reservation_owner_pods"],
        kwargs["reservation_nodes"],
        period,
    )
    memo.reservations = state
    state.start()
    logger.info("reservation operator started", gc_period=format_duration(period))


@kopf.on.cleanup(registry=REGISTRY)
async def stop_reservations(memo: kopf.Memo, **_: Any) -> None:
    state: Reservations | None = memo.get("reservations")
    if state is not None:
        await state.stop()
        await state.api.close()


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def reservation_event(name: str, memo: Any, **_: Any) -> None:
    memo.reservations.mark(name)


@kopf.on.event("pods", annotations={ALLOCATED_ANNOTATION: kopf.PRESENT}, registry=REGISTRY)
async def reservation_pod_event(body: kopf.Body, memo: Any, **_: Any) -> None:
    found = owner_pod(body)
    if found is not None:
        memo.reservations.mark(found[0])


@kopf.on.event("nodes", registry=REGISTRY)
async def reservation_node_event(type: str | None, name: str, memo: Any, **_: Any) -> None:
    if type == "DELETED":
        memo.reservations.node_deleted(name)
