"""What the operator does to one reservation now: a status patch, events, or deletion (pure).

The scheduler owns placement (Pending to Available or Waiting, the Scheduled condition,
Ready=True/Available and Ready=False/Waiting). The operator owns the rest, here:

- a new reservation is ``Pending`` at once, with ``Scheduled=False/Pending``, so
  ``kubectl get`` never shows an empty phase;

- a non-terminal reservation ends, in this order of precedence, as
  ``Succeeded`` (``allocateOnce`` and a pod was bound into it, or recorded in
  ``status.currentOwners`` by the scheduler as it placed one: that pod may be gone
  before the operator sees it bound, and the reservation must not serve a second),
  ``Failed/NodeDeleted``
  (Available or Waiting on a node that no longer exists) or ``Failed/Expired`` (``expires``
  or creation plus ttl has passed, in any non-terminal phase, Pending included);
- ``status.currentOwners`` and ``status.allocated`` follow the owner pods, and each pod
  that comes or goes is an event;
- a terminal reservation never changes again; it is deleted when its GC time comes, or at
  once when its node is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from berth.api.base import format_time
from berth.api.duration import format_duration
from berth.api.meta import ConditionStatus
from berth.api.reservation import (
    TERMINAL_PHASES,
    Reservation,
    ReservationConditionType,
    ReservationPhase,
    ReservationReason,
    ReservationStatus,
)
from berth.podresources import resource_list
from berth.quota.usage import as_resource_list
from berth.reservation.collection import collect_at
from berth.reservation.conditions import with_condition
from berth.reservation.owners import OwnerPod, allocated, current_owners

__all__ = ["PLACED_PHASES", "Decision", "Event", "decide"]

PLACED_PHASES: Final = frozenset({ReservationPhase.AVAILABLE, ReservationPhase.WAITING})
"""Phases in which a reservation holds capacity on ``status.nodeName``."""

RECORD_RECHECK: Final = timedelta(seconds=10)
"""How soon an allocateOnce reservation's recorded owner that is not bound yet is looked at
again: it may be deleted before it is ever annotated, which no owner event would say."""

OWNER_ALLOCATED: Final = "OwnerAllocated"
OWNER_RELEASED: Final = "OwnerReleased"


@dataclass(frozen=True)
class Event:
    """An event to record on the reservation, for ``kubectl describe``."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Decision:
    """What to write for one reservation; nothing at all when every field is empty."""

    status: dict[str, Any] | None = None
    """A merge patch of ``status``, or None when it is up to date."""
    events: tuple[Event, ...] = ()
    """Events to record once the patch is written."""
    delete: str | None = None
    """Why the reservation is to be deleted (garbage collection), or None."""
    recheck_at: datetime | None = None
    """When the passing of time alone changes the decision (expiry, GC), or None."""


@dataclass(frozen=True)
class _Ending:
    phase: ReservationPhase
    reason: ReservationReason
    message: str
    warning: bool


def decide(
    reservation: Reservation,
    now: datetime,
    *,
    owners: Sequence[OwnerPod],
    node_gone: bool,
    gc_period: timedelta,
    record_spent: bool = False,
) -> Decision:
    """The decision for ``reservation`` at ``now``.

    ``owners`` are the bound pods annotated with this reservation (see
    :func:`berth.reservation.owners.owners_of`); ``node_gone`` says that
    ``status.nodeName`` is set and names no existing node; ``record_spent`` that an
    owner the scheduler recorded in ``status.currentOwners`` will never be bound into it
    (deleted, finished, or bound without it).
    """
    if reservation.phase in TERMINAL_PHASES:
        return _collect(reservation, now, node_gone=node_gone, period=gc_period)
    status, events = _accounting(
        reservation.status or ReservationStatus(),
        owners,
        keep_recorded=reservation.spec.allocate_once,
    )
    ending = _ending(reservation, now, owners=owners, node_gone=node_gone, spent=record_spent)
    if ending is None:
        if reservation.phase is None:
            status["phase"] = ReservationPhase.PENDING.value
            status["conditions"] = with_condition(
                None,
                ReservationConditionType.SCHEDULED,
                ConditionStatus.FALSE,
                ReservationReason.PENDING,
                "waiting for the scheduler to place it",
                now,
            )
        recheck = reservation.expiry_time()
        if reservation.spec.allocate_once and _recorded(reservation):
            # Its recorded owner may go without an event this operator watches.
            soon = now + RECORD_RECHECK
            recheck = soon if recheck is None else min(recheck, soon)
        return Decision(status or None, tuple(events), recheck_at=recheck)
    status["phase"] = ending.phase.value
    status["conditions"] = with_condition(
        reservation.status.conditions if reservation.status else None,
        ReservationConditionType.READY,
        ConditionStatus.FALSE,
        ending.reason,
        ending.message,
        now,
    )
    events.append(Event(ending.reason, ending.message, ending.warning))
    return Decision(status, tuple(events))


def _recorded(reservation: Reservation) -> list[tuple[str, str]]:
    """The owners ``status.currentOwners`` lists, by namespace and name."""
    listed = (reservation.status.current_owners if reservation.status else None) or []
    return [(r.namespace or "", r.name or "") for r in listed]


def _ending(
    reservation: Reservation,
    now: datetime,
    *,
    owners: Sequence[OwnerPod],
    node_gone: bool,
    spent: bool,
) -> _Ending | None:
    if reservation.spec.allocate_once and (owners or (spent and _recorded(reservation))):
        first = min([(p.namespace, p.name) for p in owners] or _recorded(reservation))
        return _Ending(
            ReservationPhase.SUCCEEDED,
            ReservationReason.SUCCEEDED,
            f"allocated once by pod {first[0]}/{first[1]}; the capacity it did not use is released",
            warning=False,
        )
    node = reservation.status.node_name if reservation.status else None
    if node_gone and reservation.phase in PLACED_PHASES:
        return _Ending(
            ReservationPhase.FAILED,
            ReservationReason.NODE_DELETED,
            f"node {node} was deleted; the reservation holds nothing any more",
            warning=True,
        )
    expiry = reservation.expiry_time()
    if expiry is not None and now >= expiry:
        return _Ending(
            ReservationPhase.FAILED,
            ReservationReason.EXPIRED,
            _expiry_message(reservation, expiry),
            warning=True,
        )
    return None


def _expiry_message(reservation: Reservation, expiry: datetime) -> str:
    phase = reservation.phase or ReservationPhase.PENDING
    spec = reservation.spec
    if spec.expires is not None:
        why = "spec.expires"
    elif spec.ttl is not None:
        why = f"ttl {spec.ttl} after creation"
    else:
        why = (
            "the default ttl of 24h after creation; set spec.ttl or spec.expires, "
            "ttl 0s never expires"
        )
    return f"expired at {format_time(expiry)} ({why}) while {phase}"


def _accounting(
    status: ReservationStatus, owners: Sequence[OwnerPod], *, keep_recorded: bool
) -> tuple[dict[str, Any], list[Event]]:
    """The currentOwners/allocated part of the patch, and an event per owner come or gone.

    With ``keep_recorded`` (allocateOnce) an owner already listed stays listed: the
    reservation ends with it, whether or not the pod is still there."""
    patch: dict[str, Any] = {}
    events: list[Event] = []
    refs = current_owners(owners)
    before = {(o.namespace or "", o.name or "", o.uid or "") for o in status.current_owners or ()}
    after = {(r["namespace"], r["name"], r["uid"]) for r in refs}
    if keep_recorded and before - after:
        after |= before
        refs = [{"namespace": ns, "name": name, "uid": uid} for ns, name, uid in sorted(after)]
    if before != after:
        patch["currentOwners"] = refs or None
        for namespace, name, _ in sorted(before - after):
            events.append(
                Event(
                    OWNER_RELEASED,
                    f"pod {namespace}/{name} no longer uses the reservation (finished or deleted)",
                )
            )
    holding = {(p.namespace, p.name, p.uid): p for p in owners if p.holding}
    # An owner the scheduler recorded before binding it is announced once it is bound.
    arrived = (after - before) | (holding.keys() & before if keep_recorded else set())
    for key in sorted(arrived):
        events.append(Event(OWNER_ALLOCATED, _allocated_message(holding[key])))
    used = allocated(owners)
    old = resource_list(status.allocated)
    if used != old:
        # A merge patch keeps map keys it does not mention: resources no longer used go to null.
        gone: dict[str, str | None] = dict.fromkeys(old.keys() - used.keys())
        patch["allocated"] = {**gone, **as_resource_list(used)} if used else None
    return patch, events


def _allocated_message(pod: OwnerPod) -> str:
    requests = as_resource_list(pod.requests())
    what = ", ".join(f"{name} {value}" for name, value in requests.items()) or "no resources"
    return f"pod {pod.namespace}/{pod.name} allocated {what}"


def _collect(
    reservation: Reservation, now: datetime, *, node_gone: bool, period: timedelta
) -> Decision:
    if node_gone:
        node = reservation.status.node_name if reservation.status else None
        return Decision(delete=f"its node {node} no longer exists")
    due = collect_at(reservation, period)
    if due is not None and now >= due:
        return Decision(delete=f"ended more than {format_duration(period)} ago")
    return Decision(recheck_at=due)
