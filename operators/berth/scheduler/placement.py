"""Placing Reservations: a Pending reservation is scheduled as the pod its template
describes, through the same plugin points as a pod, and the outcome is written to its
status instead of a binding (DefaultBinder calls ``placed``; the failure path calls
``unschedulable``).

Success: ``status.nodeName``, ``status.allocatable`` (the template's requests), phase
``Available`` with ``Scheduled=True`` and ``Ready=True``, and the capacity is held at once.
``preAllocation: true`` places without the free-capacity check: phase ``Waiting``
(``Ready=False/Waiting``) until the node has room, then ``Available``. Failure: phase stays
``Pending`` with ``Scheduled=False/Unschedulable`` saying why per node, a warning event, and
a retry when the cluster changes. Status writes are merge patches and replace the
conditions list, so both conditions are always written.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from berth import log
from berth.api.reservation import GROUP, TERMINAL_PHASES, VERSION, ReservationPhase
from berth.quota.usage import as_resource_list
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import KIND, Held, ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.writer import Still, Writer, now

logger = log.get(__name__)

API_VERSION = f"{GROUP}/{VERSION}"
# The plugin that places reservations and lets owners use them.
RESERVATION_PLUGIN = "Reservation"
NO_REQUESTS = (
    "the template requests no resources: a reservation holds what its template's "
    "containers request (spec.template.spec.containers[].resources.requests)"
)


def condition(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
        "lastProbeTime": now(),
    }


def _text(resources: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(as_resource_list(resources).items()))


# Koordinator annotations on a Reservation that Berth does not honour: refused by name.
UNSUPPORTED_ANNOTATIONS = ("scheduling.koordinator.sh/reservation-restricted-options",)


def unsupported_annotations(obj: dict[str, Any]) -> str:
    """Why a reservation is refused for an annotation Berth does not honour, or ""."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    found = [a for a in UNSUPPORTED_ANNOTATIONS if a in annotations]
    if not found:
        return ""
    return (
        f"annotation {', '.join(found)} is not supported by Berth: a Restricted reservation "
        "restricts every resource it holds; remove the annotation"
    )


def no_reservation_plugin(profile: str) -> str:
    return (
        f"scheduler profile {profile!r} does not enable the {RESERVATION_PLUGIN} plugin, "
        "which places reservations: enable it, or name another profile in "
        "spec.template.spec.schedulerName"
    )


def pending(event: str, obj: dict[str, Any]) -> bool:
    """Whether a Reservation's watch event leaves it waiting to be placed."""
    meta = obj.get("metadata") or {}
    phase = (obj.get("status") or {}).get("phase")
    return (
        event != "DELETED"
        and phase in (None, ReservationPhase.PENDING)
        and not meta.get("deletionTimestamp")
    )


def not_ended(reservation: dict[str, Any]) -> bool:
    """A decision about a placed reservation still holds: it has not ended meanwhile."""
    phase = (reservation.get("status") or {}).get("phase")
    return phase not in {str(p) for p in TERMINAL_PHASES}


def unplaced(reservation: dict[str, Any]) -> bool:
    """A refusal still holds: the reservation has been neither placed nor ended meanwhile."""
    status = reservation.get("status") or {}
    return status.get("phase") in (None, str(ReservationPhase.PENDING)) and not status.get(
        "nodeName"
    )


def placeable_on(node: str) -> Still:
    """A placement on ``node`` still holds: the reservation has not ended, nor been placed
    on another node, meanwhile."""

    def still(reservation: dict[str, Any]) -> bool:
        placed = (reservation.get("status") or {}).get("nodeName")
        return not_ended(reservation) and placed in (None, "", node)

    return still


@dataclass
class ReservationPlacement:
    view: ClusterView
    book: ReservationBook
    writer: Writer
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _explained: set[tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=set)
    # Set when a pod leaves a node: a Waiting reservation there may turn Available now,
    # before the preemptor it was made for is tried again (its backoff is a second at
    # least); the scheduler's periodic loop checks at once rather than at its next tick.
    room_freed: asyncio.Event = field(default_factory=asyncio.Event)

    def refuse(self, obj: dict[str, Any], message: str) -> None:
        """A reservation that cannot be placed whatever the cluster holds: say why on it."""
        self.writer.event(
            obj, KIND, "FailedScheduling", message, warning=True, api_version=API_VERSION
        )
        self._spawn_status(obj, self._unschedulable_status(message), still=unplaced)

    def explain_resize(self, held: Held) -> None:
        """A placed reservation whose template now asks for something else keeps what it
        was granted (no overcommit): a warning says so, once per new size."""
        wanted = held.template.requests
        key = (held.uid, tuple(sorted(wanted.items())))
        if key in self._explained:
            return
        self._explained.add(key)
        message = (
            f"spec.template now requests {_text(wanted)} but the reservation holds "
            f"{_text(held.allocatable)} on node {held.node}, as granted when it was placed: "
            "a placed reservation is not resized; create a new Reservation for the new size"
        )
        self.writer.event(
            held.raw, KIND, "ResizeRefused", message, warning=True, api_version=API_VERSION
        )
        logger.info("reservation resize refused", namespace=None, name=held.name, node=held.node)

    def _spawn_status(self, obj: dict[str, Any], status: dict[str, Any], still: Still) -> None:
        task = asyncio.get_running_loop().create_task(self._write(obj, status, still))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(
        self, obj: dict[str, Any], status: dict[str, Any], still: Still
    ) -> dict[str, Any] | None:
        """Write what was decided from ``obj`` over that version, or over the stored one if
        ``still`` says the decision holds for it: one expired (or otherwise ended)
        meanwhile is never placed again, one placed meanwhile never made Pending again.
        The reservation as stored after the write (None: not written)."""
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        try:
            written = await self.writer.reservation_status(
                name, status, meta.get("resourceVersion"), still=still
            )
        except Exception as err:
            logger.warning(
                "reservation status not written", namespace=None, name=name, error=str(err)
            )
            return None
        return written or {**obj, "status": {**(obj.get("status") or {}), **status}}

    # -- outcomes --------------------------------------------------------------------------

    async def placed(self, pod: PodInfo, node: str, pre_allocated: bool) -> bool:
        """Write the placement; the capacity is held from now on (False: not written)."""
        obj = pod.reservation
        assert obj is not None
        phase = ReservationPhase.WAITING if pre_allocated else ReservationPhase.AVAILABLE
        ready = (
            condition(
                "Ready", False, "Waiting", f"waiting for {node} to free the reserved capacity"
            )
            if pre_allocated
            else condition("Ready", True, "Available", "the reserved capacity is held")
        )
        status = {
            "phase": str(phase),
            "nodeName": node,
            "allocatable": as_resource_list(pod.requests),
            "conditions": [
                condition("Scheduled", True, "Scheduled", f"placed on node {node}"),
                ready,
            ],
        }
        held_obj = {**obj, "status": {**(obj.get("status") or {}), **status}}
        self.book.on_reservation("MODIFIED", held_obj)
        self.view.forget(pod)  # the book holds the capacity from now on, not the template
        self.book.placing.add(pod.uid)
        try:
            written = await self._write(obj, status, still=placeable_on(node))
        finally:
            self.book.placing.discard(pod.uid)
        if written is None:
            self.book.release(pod.uid)
            return False
        self.book.on_written(written)  # as stored: the version later writes are made over
        message = f"Reservation {pod.name} placed on node {node}"
        self.writer.event(obj, KIND, "Scheduled", message, api_version=API_VERSION)
        logger.info(
            "reservation placed", namespace=None, name=pod.name, node=node, phase=str(phase)
        )
        return True

    def _unschedulable_status(self, message: str) -> dict[str, Any]:
        return {
            "phase": str(ReservationPhase.PENDING),
            "conditions": [
                condition("Scheduled", False, "Unschedulable", message),
                condition(
                    "Ready",
                    False,
                    "Unschedulable",
                    "not placed yet: the Scheduled condition says why",
                ),
            ],
        }

    async def unschedulable(self, pod: PodInfo, message: str) -> None:
        obj = pod.reservation
        assert obj is not None
        pinned = (pod.raw.get("spec") or {}).get("nodeName")
        if pinned and pinned not in self.view.nodes.index:
            message = f"node {pinned} (spec.template.spec.nodeName) does not exist; {message}"
        current = [
            c
            for c in (obj.get("status") or {}).get("conditions") or ()
            if c.get("type") == "Scheduled"
        ]
        self.writer.event(
            obj, KIND, "FailedScheduling", message, warning=True, api_version=API_VERSION
        )
        if current and current[0].get("message") == message:
            return  # already says so
        await self._write(obj, self._unschedulable_status(message), still=unplaced)

    # -- Waiting -> Available ----------------------------------------------------------------

    async def check_waiting(self) -> None:
        """A pre-allocated reservation becomes Available once its node has room for it."""
        nodes = self.view.nodes
        for held in list(self.book.held.values()):
            status = held.reservation.status
            if status is None or status.phase != ReservationPhase.WAITING:
                continue
            row = nodes.index.get(held.node)
            if row is None or held.counted is None:
                continue
            others = (
                nodes.requested[row]
                - nodes.vector(held.counted.requests)[: nodes.requested.shape[1]]
            )
            need = nodes.vector(held.allocatable)[: nodes.requested.shape[1]]
            if ((nodes.allocatable[row] - others) >= need).all():
                await self._available(held)

    async def _available(self, held: Held) -> None:
        status = {
            "phase": str(ReservationPhase.AVAILABLE),
            "conditions": [
                condition("Scheduled", True, "Scheduled", f"placed on node {held.node}"),
                condition("Ready", True, "Available", "the reserved capacity is held"),
            ],
        }
        obj = await self._write(held.raw, status, still=not_ended)
        if obj is not None:
            self.book.on_written(obj)
            self.writer.event(
                held.raw,
                KIND,
                "Available",
                f"node {held.node} has room: the capacity is held",
                api_version=API_VERSION,
            )
