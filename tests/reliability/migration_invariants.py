"""Two invariants of pod migration, judged from the API objects alone (PodMigrationJobs,
Reservations, pods, their controllers, PodDisruptionBudgets), sampled every second. Like
the checker beside it, it shares no code with Berth: it re-derives each rule itself.

- **Reserve first**: a ReservationFirst job's pod is never evicted before the job's
  reservation is Available. When the pod was evicted is bounded from above by what the
  API server wrote (the pod's ``deletionTimestamp`` less its grace period, set as the
  eviction is accepted), by the first sample without the pod, and by the job's
  ``Eviction=True`` condition; when the reservation became Available is bounded from below
  by its ``Scheduled=True`` condition (written by the scheduler as it places it) and by the
  last sample that showed it not yet placed, less a second (a list may lag a moment behind
  what the operator read). A reservation never seen placed was never Available, once a
  sample taken a second after the eviction still shows it unplaced.
  Timestamps have one-second resolution, so a violation is reported only when the
  reservation became Available a whole second or more after the eviction.
- **maxUnavailable**: while a workload (a pod's controller) has a job Running, no more of
  its pods are unavailable (desired replicas less its Running, Ready, not terminating
  pods) than Koordinator's default ``maxUnavailablePerWorkload`` allows (10% over ten
  replicas, 2 for four to ten, 1 below; a percentage rounded up, at least 1), nor than a
  PodDisruptionBudget selecting its pods allows.
- **Every job ends**: a job is Succeeded, Failed or Aborted by its ttl (``spec.ttl``, 5m
  unset, from its creation) plus a grace; at rest, every job has ended.

:class:`MigrationHistory` folds each sample in (pure: no I/O) and returns what it finds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.reliability.objects import clock, duration_seconds

Json = Mapping[str, Any]
PLACED = {"Available", "Succeeded"}
"""Reservation phases that come only after it was Available (allocateOnce ends Succeeded)."""
TERMINAL_JOB = {"Succeeded", "Failed", "Aborted"}
RESOLUTION = 1.0
"""Seconds: API timestamps are truncated to the second."""
DEFAULT_TTL = "5m"
"""A job's ttl when its spec sets none (Koordinator's)."""


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _meta(obj: Json) -> Json:
    return obj.get("metadata") or {}


def _condition(obj: Json, kind: str) -> Json | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind),
        None,
    )


def controller_uid(pod: Json) -> str | None:
    """The uid of the pod's controller (its ownerReference with ``controller: true``)."""
    for owner in _meta(pod).get("ownerReferences") or ():
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def available(pod: Json) -> bool:
    """Running and Ready, and not being deleted."""
    if _meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    ready = _condition(pod, "Ready")
    return status.get("phase") == "Running" and ready is not None and ready.get("status") == "True"


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString: a count, or a percentage of ``total`` rounded up."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def max_unavailable(replicas: int, value: int | str | None = None) -> int:
    """Koordinator's maxUnavailablePerWorkload for a workload of ``replicas``."""
    if value is None:
        value = "10%" if replicas > 10 else 2 if replicas >= 4 else 1
    return max(_scaled(value, replicas), 1)


def _selects(selector: Json | None, labels: Mapping[str, str]) -> bool:
    """A PodDisruptionBudget's selector (policy/v1: null selects nothing, empty every pod)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or ():
        have, values = labels.get(expr["key"]), set(expr.get("values") or ())
        op = expr["operator"]
        if (
            (op == "In" and have not in values)
            or (op == "NotIn" and have in values)
            or (op == "Exists" and have is None)
            or (op == "DoesNotExist" and have is not None)
        ):
            return False
    return True


def budget_allows(pdb: Json, replicas: int) -> int:
    """How many of ``replicas`` the budget lets be unavailable."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        return _scaled(spec["maxUnavailable"], replicas)
    if spec.get("minAvailable") is not None:
        return max(replicas - _scaled(spec["minAvailable"], replicas), 0)
    return replicas


@dataclass(frozen=True)
class Sample:
    """What one round of reads returned, at ``at`` (seconds since the epoch)."""

    at: float
    jobs: list[Json]
    reservations: list[Json]
    pods: list[Json]
    controllers: list[Json] = field(default_factory=list)
    """Objects that own pods and have ``spec.replicas`` (ReplicaSets, StatefulSets)."""
    budgets: list[Json] = field(default_factory=list)


@dataclass
class _PodTrace:
    uid: str
    namespace: str
    name: str
    controller: str | None
    deletion_requested: float | None = None
    """deletionTimestamp less the grace period: when the API server accepted the deletion."""
    gone_by: float | None = None
    """The first sample that no longer listed it."""


@dataclass
class _ReservationTrace:
    scheduled_at: float | None = None
    """Its Scheduled=True condition's transition time."""
    unplaced_at: float | None = None
    """The last sample that showed it not yet placed."""
    placed_seen: bool = False


@dataclass
class _JobTrace:
    job: Json
    pod_uid: str | None = None
    evicting: bool = False
    """The job said it evicts (an Eviction condition) or that its pod moved (Succeeded): a
    pod that goes otherwise (the test's clean-up, say) is not the migration's doing."""
    evict_complete_at: float | None = None


@dataclass
class MigrationHistory:
    """Every job, reservation and pod seen so far, and the violations found."""

    max_unavailable_per_workload: int | str | None = None
    """The migration controller's setting (unset: Koordinator's default)."""
    found: list[str] = field(default_factory=list)
    samples: int = 0
    pods: dict[str, _PodTrace] = field(default_factory=dict)
    """By uid."""
    live: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, name) to the uid listed last."""
    named: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, name) to the uid of the last pod of that name ever listed: a job made,
    run and ended between two samples names a pod no longer listed."""
    reservations: dict[str, _ReservationTrace] = field(default_factory=dict)
    jobs: dict[str, _JobTrace] = field(default_factory=dict)
    judged: set[str] = field(default_factory=set)
    """Jobs already found evicting first (each is reported once)."""
    worst_unavailable: dict[str, int] = field(default_factory=dict)
    """By workload (namespace/name): the most unavailable pods seen during migrations."""

    def counts(self) -> Counter[str]:
        """Jobs by their last phase, and the evictions judged for reserve first."""
        out: Counter[str] = Counter()
        for trace in self.jobs.values():
            phase = (trace.job.get("status") or {}).get("phase") or "Pending"
            out[f"migrations {phase.lower()}"] += 1
            pod = self.pods.get(trace.pod_uid or "")
            if trace.evicting and evicted_by_at_latest(pod, trace.evict_complete_at) is not None:
                out["migration evictions judged"] += 1
        return out

    def observe(self, sample: Sample) -> list[str]:
        """Fold one sample in; the violations it reveals (also kept in ``found``)."""
        self.samples += 1
        self._pods(sample)
        self._reservations(sample)
        self._jobs(sample)
        new = self._unavailable(sample) + self._reserve_first()
        fresh = [line for line in new if line not in self.found]
        self.found += fresh
        return fresh

    def _pods(self, sample: Sample) -> None:
        listed: dict[tuple[str, str], str] = {}
        for pod in sample.pods:
            meta = _meta(pod)
            uid = str(meta.get("uid"))
            where = (str(meta.get("namespace")), str(meta.get("name")))
            listed[where] = uid
            trace = self.pods.setdefault(uid, _PodTrace(uid, *where, controller_uid(pod)))
            deleting = epoch(meta.get("deletionTimestamp"))
            if deleting is not None and trace.deletion_requested is None:
                grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                trace.deletion_requested = deleting - grace
        gone = {uid for uid in self.live.values()} - set(listed.values())
        for uid in gone:
            if self.pods[uid].gone_by is None:
                self.pods[uid].gone_by = sample.at
        self.live = listed
        self.named.update(listed)

    def _reservations(self, sample: Sample) -> None:
        for reservation in sample.reservations:
            trace = self.reservations.setdefault(
                str(_meta(reservation).get("name")), _ReservationTrace()
            )
            phase = (reservation.get("status") or {}).get("phase")
            scheduled = _condition(reservation, "Scheduled")
            if scheduled is not None and scheduled.get("status") == "True":
                at = epoch(scheduled.get("lastTransitionTime"))
                if at is not None and trace.scheduled_at is None:
                    trace.scheduled_at = at
            if phase in PLACED:
                trace.placed_seen = True
            elif not trace.placed_seen:
                trace.unplaced_at = sample.at

    def _jobs(self, sample: Sample) -> None:
        for job in sample.jobs:
            name = str(_meta(job).get("name"))
            trace = self.jobs.setdefault(name, _JobTrace(job))
            trace.job = job
            ref = (job.get("spec") or {}).get("podRef") or {}
            if trace.pod_uid is None:
                trace.pod_uid = ref.get("uid") or self.named.get(
                    (str(ref.get("namespace")), str(ref.get("name")))
                )
            evicted = _condition(job, "Eviction")
            phase = (job.get("status") or {}).get("phase")
            trace.evicting = trace.evicting or evicted is not None or phase == "Succeeded"
            if evicted is not None and evicted.get("status") == "True":
                at = epoch(evicted.get("lastTransitionTime"))
                if at is not None and trace.evict_complete_at is None:
                    trace.evict_complete_at = at

    def _reserve_first(self) -> list[str]:
        out: list[str] = []
        for name, trace in self.jobs.items():
            if name in self.judged:
                continue
            spec = trace.job.get("spec") or {}
            if (spec.get("mode") or "ReservationFirst") != "ReservationFirst" or not trace.evicting:
                continue
            pod = self.pods.get(trace.pod_uid or "")
            evicted_by = evicted_by_at_latest(pod, trace.evict_complete_at)
            if pod is None or evicted_by is None:
                continue
            ref = (spec.get("reservationOptions") or {}).get("reservationRef") or {}
            reservation = self.reservations.get(str(ref.get("name") or ""))
            if ref.get("name") and reservation is None:
                continue  # made and gone between two samples: nothing to judge by
            available_from = None if reservation is None else available_at_earliest(reservation)
            if available_from is None and (
                reservation is not None
                and (reservation.unplaced_at or 0.0) < evicted_by + RESOLUTION
            ):
                # Seen unplaced only up to a second after the eviction, by lists that may
                # lag: one look showed the pod leaving and its reservation Pending, though
                # the scheduler had placed it before the operator evicted (its log), and it
                # was used up before the next look. The next look shows its Scheduled time.
                continue
            if available_from is None or available_from >= evicted_by:
                self.judged.add(name)
                when = "never" if available_from is None else clock(available_from)
                out.append(
                    f"migration {name}: pod {pod.namespace}/{pod.name} evicted by "
                    f"{clock(evicted_by)} before its reservation "
                    f"{ref.get('name') or '(none)'} was Available (from {when})"
                )
        return out

    def _unavailable(self, sample: Sample) -> list[str]:
        running: set[str] = set()
        for job in sample.jobs:
            if (job.get("status") or {}).get("phase") != "Running":
                continue
            trace = self.jobs.get(str(_meta(job).get("name")))
            pod = self.pods.get(trace.pod_uid or "") if trace is not None else None
            if pod is not None and pod.controller is not None:
                running.add(pod.controller)
        out: list[str] = []
        for controller in sample.controllers:
            meta = _meta(controller)
            uid = str(meta.get("uid"))
            if uid not in running:
                continue
            replicas = int((controller.get("spec") or {}).get("replicas") or 0)
            mine = [p for p in sample.pods if controller_uid(p) == uid]
            unavailable = replicas - sum(1 for p in mine if available(p))
            limit = max_unavailable(replicas, self.max_unavailable_per_workload)
            why = f"maxUnavailable {limit}"
            for pdb in sample.budgets:
                if _meta(pdb).get("namespace") != meta.get("namespace"):
                    continue
                selector = (pdb.get("spec") or {}).get("selector")
                if any(_selects(selector, _meta(p).get("labels") or {}) for p in mine):
                    allowed = budget_allows(pdb, replicas)
                    if allowed < limit:
                        limit, why = allowed, f"PodDisruptionBudget {_meta(pdb).get('name')}"
            workload = f"{controller.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
            self.worst_unavailable[workload] = max(
                self.worst_unavailable.get(workload, 0), unavailable
            )
            if unavailable > limit:
                out.append(
                    f"{workload}: {unavailable} of {replicas} replicas unavailable during "
                    f"migrations, over its {why} ({limit})"
                )
        return out


def overdue(jobs: Iterable[Json], now: float, since: float, grace: float) -> dict[str, str]:
    """Jobs not yet ended ``grace`` seconds past their ttl, or past ``since`` if that is
    later (the moment the operator that ends them surely ran), by name."""
    out = {}
    for job in jobs:
        phase = (job.get("status") or {}).get("phase") or "Pending"
        created = epoch(_meta(job).get("creationTimestamp"))
        if phase in TERMINAL_JOB or created is None:
            continue
        ttl = duration_seconds(str((job.get("spec") or {}).get("ttl") or DEFAULT_TTL))
        if now > max(created + ttl, since) + grace:
            name = str(_meta(job).get("name"))
            out[name] = (
                f"migration {name}: still {phase} {now - created - ttl:.0f}s past its ttl "
                f"{ttl:.0f}s"
            )
    return out


def unfinished(jobs: Iterable[Json]) -> list[str]:
    """At rest: the jobs that have not ended."""
    return [
        f"at rest, migration {_meta(j).get('name')} not ended: "
        f"{(j.get('status') or {}).get('phase') or 'Pending'}"
        for j in jobs
        if (j.get("status") or {}).get("phase") not in TERMINAL_JOB
    ]


def evicted_by_at_latest(pod: _PodTrace | None, evict_complete_at: float | None) -> float | None:
    """The latest moment the pod can have been evicted, or ``None`` if it was not seen going.

    A deletion the API server recorded is exact to the second; a disappearance between two
    samples, or a job saying the eviction completed, bounds it from above.
    """
    if pod is None:
        return None
    bounds: list[float] = []
    if pod.deletion_requested is not None:
        bounds.append(pod.deletion_requested + RESOLUTION)
    if pod.gone_by is not None:
        bounds.append(pod.gone_by)
    if evict_complete_at is not None:
        bounds.append(evict_complete_at + RESOLUTION)
    return min(bounds, default=None)


def available_at_earliest(reservation: _ReservationTrace) -> float | None:
    """The earliest moment the reservation can have become Available; ``None`` if it never
    was as far as the samples and its conditions show."""
    if reservation.scheduled_at is None and not reservation.placed_seen:
        return None
    unplaced = None if reservation.unplaced_at is None else reservation.unplaced_at - RESOLUTION
    bounds = [b for b in (reservation.scheduled_at, unplaced) if b is not None]
    return max(bounds, default=float("-inf"))
