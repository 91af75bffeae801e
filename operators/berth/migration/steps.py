"""The phases of a PodMigrationJob, one step at a time, as pure decisions.

Each call looks at what is true now (the job, its pod, its reservation, the replacement
pod) and returns the status to write plus at most one thing to do (create the
reservation, evict, release the reservation, arbitrate). Every such action is idempotent
and every fact is read again on the next call, so a process killed at any point resumes
where it stood: nothing lives only in memory.

Messages, reasons and condition types are Koordinator's, word for word where it has them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from berth.api.base import format_time
from berth.api.podmigrationjob import (
    TERMINAL_PHASES,
    PodMigrationJob,
    PodMigrationJobConditionType,
    PodMigrationJobMode,
    PodMigrationJobPhase,
    PodMigrationJobReason,
)
from berth.api.reservation import Reservation, ReservationPhase, ReservationReason
from berth.reservation.lifecycle import Event

__all__ = [
    "RECHECK",
    "Action",
    "Decision",
    "Facts",
    "decide",
    "eviction_refused",
    "eviction_requested",
    "forbidden",
    "held",
    "reservation_created",
    "reservation_not_created",
    "started",
]

Cond = PodMigrationJobConditionType
Reason = PodMigrationJobReason
Phase = PodMigrationJobPhase
Json = dict[str, Any]

RECHECK: Final = timedelta(seconds=2)
"""How soon a job waiting on something outside it looks again."""
RETRY_EVICTION: Final = timedelta(seconds=5)
"""How soon a refused eviction is tried again."""


class Action(StrEnum):
    """The one side effect a decision asks for."""

    NONE = "None"
    ARBITRATE = "Arbitrate"
    CREATE_RESERVATION = "CreateReservation"
    EVICT = "Evict"
    RELEASE = "Release"
    """Delete the reservation the job made (it failed or timed out)."""


@dataclass(frozen=True)
class Facts:
    """What is true for one job now."""

    job: PodMigrationJob
    now: datetime
    pod: Mapping[str, Any] | None
    """The pod to move, as read; ``None`` when it does not exist."""
    reservation: Reservation | None = None
    """The reservation ``reservationRef`` names, as read; ``None`` when it does not exist."""
    reservation_owned: bool = False
    """Whether the job made that reservation (and so releases it)."""
    replacement: Mapping[str, Any] | None = None
    """A pod the scheduler placed into the reservation."""


@dataclass(frozen=True)
class Decision:
    """The status to write (``None``: unchanged), the action, events, when to look again."""

    status: Json | None = None
    action: Action = Action.NONE
    events: list[Event] = field(default_factory=list)
    recheck: timedelta | None = None


def pod_key(job: PodMigrationJob) -> str:
    return f"{job.spec.pod_ref.namespace}/{job.spec.pod_ref.name}"


def _status(job: PodMigrationJob) -> Json:
    return copy.deepcopy(job.status.to_dict()) if job.status else {}


def _set_condition(
    status: Json, kind: Cond, truth: bool, reason: str | None, message: str | None, now: datetime
) -> bool:
    """Set a condition (and, as Koordinator does, status/reason/message); True if it changed."""
    value = "True" if truth else "False"
    conditions: list[Json] = list(status.get("conditions") or [])
    previous = next((c for c in conditions if c.get("type") == kind), None)
    if (
        previous is not None
        and previous.get("status") == value
        and previous.get("reason") == reason
        and previous.get("message") == message
    ):
        return False
    updated: Json = {"type": str(kind), "status": value, "lastProbeTime": format_time(now)}
    if previous is not None and previous.get("status") == value:
        updated["lastTransitionTime"] = previous.get("lastTransitionTime") or format_time(now)
    else:
        updated["lastTransitionTime"] = format_time(now)
    if reason:
        updated["reason"] = reason
    if message:
        updated["message"] = message
    if previous is None:
        conditions.append(updated)
    else:
        conditions = [updated if c is previous else c for c in conditions]
    status["conditions"] = conditions
    status["status"] = str(kind)
    _say(status, reason, message)
    return True


def _say(status: Json, reason: str | None, message: str | None) -> None:
    for key, value in (("reason", reason), ("message", message)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)


def _changed(job: PodMigrationJob, status: Json) -> Json | None:
    return None if status == _status(job) else status


def _ended(facts: Facts, reason: str, message: str, *, release: bool = True) -> Decision:
    """Failed with ``reason``; the job's own reservation is released."""
    status = _status(facts.job)
    status["phase"] = str(Phase.FAILED)
    _say(status, reason, message)
    action = Action.NONE
    if release and facts.reservation_owned and facts.reservation is not None:
        action = Action.RELEASE
    return Decision(status=status, action=action, events=[Event(reason, message, warning=True)])


def _condition(job: PodMigrationJob, kind: Cond) -> tuple[str | None, str | None, str | None]:
    found = job.condition(kind)
    if found is None:
        return None, None, None
    return found.status, found.reason, found.message


def decide(facts: Facts) -> Decision:
    """The next step of the job."""
    job = facts.job
    if job.spec.paused:
        return Decision()
    if job.phase in TERMINAL_PHASES:
        # A crash between the final status and the release: release now.
        failed = job.phase != Phase.SUCCEEDED
        live = facts.reservation is not None and facts.reservation.phase not in (
            ReservationPhase.SUCCEEDED,
            ReservationPhase.FAILED,
        )
        if failed and facts.reservation_owned and live:
            return Decision(action=Action.RELEASE)
        return Decision()
    deadline = job.deadline()
    if deadline is not None and facts.now >= deadline:
        return _timed_out(facts)
    if job.phase in (None, Phase.PENDING):
        if facts.pod is None:
            return _missing_pod(facts)
        return Decision(action=Action.ARBITRATE)
    if job.spec.mode == PodMigrationJobMode.EVICT_DIRECTLY:
        return _evict_directly(facts)
    return _reservation_first(facts)


def _timed_out(facts: Facts) -> Decision:
    """Koordinator's Timeout; a refused eviction keeps its own reason, which says more."""
    status, reason, message = _condition(facts.job, Cond.EVICTION)
    if status == "False" and reason == Reason.FAILED_EVICT and message:
        return _ended(facts, Reason.FAILED_EVICT, message)
    return _ended(facts, Reason.TIMEOUT, "Abort job caused by timeout")


def _missing_pod(facts: Facts) -> Decision:
    return _ended(
        facts, Reason.MISSING_POD, f'Abort job caused by missing Pod "{pod_key(facts.job)}"'
    )


def _pod_gone(facts: Facts) -> bool:
    """The pod named by the job is gone or going (deleted, or replaced by a namesake)."""
    pod = facts.pod
    if pod is None:
        return True
    meta = pod.get("metadata") or {}
    uid = facts.job.spec.pod_ref.uid
    return bool(meta.get("deletionTimestamp")) or (uid is not None and meta.get("uid") != uid)


def _eviction(facts: Facts, out: Json, events: list[Event]) -> Decision | None:
    """The eviction step; ``None`` once the pod is evicted (recorded into ``out``)."""
    job = facts.job
    status, reason, _ = _condition(job, Cond.EVICTION)
    if status == "True":
        return None
    if _pod_gone(facts):
        # Gone after this job asked for its eviction (a refused one may have been retried
        # by a process that died before recording it): evicted. Gone before: missing.
        if reason not in (Reason.EVICTING, Reason.FAILED_EVICT):
            return _missing_pod(facts)
        _set_condition(out, Cond.EVICTION, True, Reason.EVICT_COMPLETE, None, facts.now)
        events.append(Event(Reason.EVICT_COMPLETE, f'Pod "{pod_key(job)}" has been evicted'))
        return None
    # Not asked yet, refused, or recorded as asked by a process that died before asking:
    # the API server sets deletionTimestamp as it accepts an eviction, so a pod without one
    # is (again) evicted; evicting is idempotent.
    return Decision(status=_changed(job, out), events=events, action=Action.EVICT)


def _evict_directly(facts: Facts) -> Decision:
    out = _status(facts.job)
    events: list[Event] = []
    step = _eviction(facts, out, events)
    if step is not None:
        return step
    out["phase"] = str(Phase.SUCCEEDED)
    out["status"] = "Complete"
    _say(out, None, f'Pod "{pod_key(facts.job)}" has been evicted')
    return Decision(status=out, events=events)


def _reservation_first(facts: Facts) -> Decision:
    job = facts.job
    options = job.spec.reservation_options
    ref = options.reservation_ref if options is not None else None
    if ref is None or not ref.name:
        if facts.pod is None or _pod_gone(facts):
            return _missing_pod(facts)
        return Decision(action=Action.CREATE_RESERVATION)
    reservation = facts.reservation
    if reservation is None:
        return _ended(
            facts,
            Reason.MISSING_RESERVATION,
            f'Abort job caused by missing Reservation "{ref.name}"',
        )
    out = _status(job)
    events: list[Event] = []
    eviction = job.condition(Cond.EVICTION)
    # Once this job has asked for its eviction, a replacement of the same workload may land
    # in this reservation or in a sibling job's: either way the reservation did its work.
    evicted_yet = eviction is not None and (
        eviction.status == "True" or eviction.reason == Reason.EVICTING
    )
    phase = reservation.phase
    name = reservation.metadata.name
    if phase == ReservationPhase.FAILED:
        ready = next(
            (
                c
                for c in (reservation.status.conditions if reservation.status else None) or ()
                if c.type == "Ready"
            ),
            None,
        )
        if ready is not None and ready.reason not in (None, ReservationReason.EXPIRED):
            text = f'Reservation "{name}" failed: {ready.message or ready.reason}'
            return _ended(facts, Reason.INVALID_RESERVATION, text)
        return _ended(facts, Reason.RESERVATION_EXPIRED, "Reservation expired")
    if phase == ReservationPhase.SUCCEEDED and not evicted_yet:
        return _ended(
            facts, Reason.FORBIDDEN_MIGRATE_POD, "Reservation is already bound by another Pod"
        )
    if phase not in (ReservationPhase.AVAILABLE, ReservationPhase.SUCCEEDED):
        return _waiting_for_reservation(facts, reservation, out)
    node = reservation.status.node_name if reservation.status else None
    source = ((facts.pod or {}).get("spec") or {}).get("nodeName")
    if not evicted_yet and node and node == source:
        message = f'Scheduler assignes the Reservation "{name}" on the same node as the Pod'
        return _ended(facts, Reason.FORBIDDEN_MIGRATE_POD, message)
    if node and out.get("nodeName") != node:
        out["nodeName"] = node
        _set_condition(out, Cond.RESERVATION_SCHEDULED, True, None, None, facts.now)
        events.append(
            Event(
                str(Cond.RESERVATION_SCHEDULED), f'Assigned Reservation "{name}" to node "{node}"'
            )
        )
    step = _eviction(facts, out, events)
    if step is not None:
        return step
    return _follow_replacement(facts, reservation, out, events)


def _waiting_for_reservation(facts: Facts, reservation: Reservation, out: Json) -> Decision:
    """Pending or Waiting: report an Unschedulable verdict, and look again."""
    scheduled = next(
        (
            c
            for c in (reservation.status.conditions if reservation.status else None) or ()
            if c.type == "Scheduled"
        ),
        None,
    )
    events: list[Event] = []
    # Scheduled=False/Pending only says the scheduler has not tried yet.
    if (
        scheduled is not None
        and scheduled.status == "False"
        and scheduled.reason == ReservationReason.UNSCHEDULABLE
    ):
        message = scheduled.message or "the scheduler found no node for the Reservation"
        if _set_condition(
            out, Cond.RESERVATION_SCHEDULED, False, Reason.UNSCHEDULABLE, message, facts.now
        ):
            events.append(Event(Reason.UNSCHEDULABLE, message, warning=True))
    return Decision(status=_changed(facts.job, out), events=events, recheck=RECHECK)


def _ready(pod: Mapping[str, Any]) -> bool | None:
    """The pod's Ready condition, or ``None`` where its node reports none."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return None


def _follow_replacement(
    facts: Facts, reservation: Reservation, out: Json, events: list[Event]
) -> Decision:
    job = facts.job
    name = reservation.metadata.name
    pod = facts.replacement
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    if pod is None or not node:
        _set_condition(
            out,
            Cond.POD_BOUND_RESERVATION,
            False,
            Reason.WAIT_FOR_POD_BIND_RESERVATION,
            None,
            facts.now,
        )
        return Decision(status=_changed(job, out), events=events, recheck=RECHECK)
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    message = f'Bind Pod "{key}" in Reservation "{name}"'
    if _ready(pod) is False:
        _set_condition(
            out,
            Cond.POD_BOUND_RESERVATION,
            True,
            None,
            f'{message}; waiting for Pod "{key}" to be Ready',
            facts.now,
        )
        return Decision(status=_changed(job, out), events=events, recheck=RECHECK)
    _set_condition(out, Cond.POD_BOUND_RESERVATION, True, None, message, facts.now)
    out["phase"] = str(Phase.SUCCEEDED)
    out["status"] = "Complete"
    out["nodeName"] = node
    out["podRef"] = {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    _say(out, None, message)
    return Decision(status=out, events=[*events, Event("Complete", message)])


# --- statuses for the outcomes of the operator's actions ---------------------------------


def started(job: PodMigrationJob) -> Json:
    """Passed arbitration: Running."""
    out = _status(job)
    out["phase"] = str(Phase.RUNNING)
    _say(out, None, None)
    return out


def held(job: PodMigrationJob, why: str) -> Json | None:
    """Held back by a migration limit: Pending, saying which (``None``: already said)."""
    out = _status(job)
    out["phase"] = str(Phase.PENDING)
    _say(out, "Throttled", f"Waiting for arbitration: {why}")
    return _changed(job, out)


def forbidden(job: PodMigrationJob, why: str) -> tuple[Json, Event]:
    """Refused by an eviction filter: Failed for good."""
    out = _status(job)
    out["phase"] = str(Phase.FAILED)
    message = f'Pod "{pod_key(job)}" is forbidden to migrate because {why}'
    _say(out, Reason.FORBIDDEN_MIGRATE_POD, message)
    return out, Event(Reason.FORBIDDEN_MIGRATE_POD, message, warning=True)


def reservation_created(job: PodMigrationJob, name: str, now: datetime) -> tuple[Json, Event]:
    out = _status(job)
    _set_condition(out, Cond.RESERVATION_CREATED, True, None, None, now)
    return out, Event(str(Cond.RESERVATION_CREATED), f'Successfully create Reservation "{name}"')


def reservation_not_created(job: PodMigrationJob, error: str, now: datetime) -> tuple[Json, Event]:
    out = _status(job)
    message = f"Failed to create Reservation caused by {error}"
    _set_condition(
        out, Cond.RESERVATION_CREATED, False, Reason.FAILED_CREATE_RESERVATION, message, now
    )
    return out, Event(Reason.FAILED_CREATE_RESERVATION, message, warning=True)


def eviction_requested(job: PodMigrationJob, now: datetime) -> tuple[Json, Event]:
    """Written before the eviction is asked for, so a restart knows it may have been."""
    out = _status(job)
    message = f'Try to evict Pod "{pod_key(job)}"'
    _set_condition(out, Cond.EVICTION, False, Reason.EVICTING, message, now)
    return out, Event(Reason.EVICTING, message)


def eviction_refused(job: PodMigrationJob, error: str, now: datetime) -> tuple[Json, Event]:
    """The Eviction API refused (a PodDisruptionBudget, say): reported, tried again later."""
    out = _status(job)
    message = f'Failed evict Pod "{pod_key(job)}" caused by {error}'
    _set_condition(out, Cond.EVICTION, False, Reason.FAILED_EVICT, message, now)
    return out, Event(Reason.FAILED_EVICT, message, warning=True)
