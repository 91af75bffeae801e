"""Invariants of gang scheduling, judged from the observed timeline of each gang's members
with no Berth code: who the members are (scheduler-plugins' PodGroup label, Koordinator's
gang annotations), when each was bound (its PodScheduled condition's time) and when the
looks first saw it gone or being deleted.

- ``below_minimum``: a placement, the bindings of one gang made within ``PLACEMENT_WITHIN``
  of its first, brings the gang to its minimum, counting the members already bound.
- ``partly_placed_together``: never two gangs at once each with some but fewer than its
  minimum bound while each still has members pending.

Both excuse what the churn or a kill did rather than the scheduler: members that left
(deleted, evicted, collected with their node) may have been bound or placed in between
two looks, so each counts as possibly bound; a placement that a kill of the scheduler
interrupted between its bindings may stay short (docs/gang.md, "Not yet").

Why ``PLACEMENT_WITHIN`` (10 s) bounds one placement: its members are decided in one
synchronous group cycle and their bindings start together right after it; a member's
binding that fails is tried again on the same node until the gang's wait is up (the
churn's gangs say 3 s: ``scheduleTimeoutSeconds``, ``waiting-time``) and is otherwise given
back to the queue, so every binding of the decision lands within that wait plus the API
calls' own latency on a loaded 2-core machine (about 5 s, the checker's ``SLACK``) plus
the second the PodScheduled time is truncated to. A member placed later is another
placement, judged on its own (counting those bound before it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.reliability.checker import (
    POD_GROUP_LABEL,
    SLACK,
    TERMINAL,
    Obj,
    Snapshot,
    bound_at,
    gang_of,
    key,
)

KOORD_MIN = "gang.scheduling.koordinator.sh/min-available"
KOORD_LEGACY_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
PLACEMENT_WITHIN = 10.0
# A member that left this long before a placement may still have been counted bound by
# the scheduler, whose view of deletions lags the API on a loaded machine.
VIEW_LAG = 2 * SLACK


def minimum_of(pod: Obj, podgroups: Mapping[str, Obj]) -> int | None:
    """The gang's minimum: the PodGroup's ``spec.minMember`` (``podgroups`` by
    ``ns/name``), or the member's ``min-available``; None while unknown or not a number."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    text: Any
    if labels.get(POD_GROUP_LABEL):
        group = podgroups.get(f"{meta.get('namespace')}/{labels[POD_GROUP_LABEL]}")
        text = (group.get("spec") or {}).get("minMember", 1) if group else None
    else:
        annotations = meta.get("annotations") or {}
        text = annotations.get(KOORD_MIN) or labels.get(KOORD_LEGACY_MIN)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass
class Member:
    """A member as the looks (and the watch of deletions) saw it."""

    name: str
    seen: float  # the first look that knew of it
    bound: float | None = None  # its binding's time; None: never seen bound
    left: float | None = None  # the first look that saw it gone or being deleted

    def bound_by(self, at: float) -> bool:
        return self.bound is not None and self.bound <= at and not self.left_by(at)

    def left_by(self, at: float) -> bool:
        return self.left is not None and self.left <= at


@dataclass
class GangTimeline:
    title: str  # ``PodGroup ns/name``
    minimum: int
    members: dict[str, Member] = field(default_factory=dict)  # by uid


@dataclass(frozen=True)
class Placement:
    """The bindings of a gang from ``start`` to ``start + PLACEMENT_WITHIN``, and what
    counts towards its minimum."""

    start: float
    bound: int  # members bound in the window
    before: int  # bound before it and possibly still bound then
    left: int  # never seen bound and gone around it: possibly placed, then deleted
    cut: bool  # a kill of the scheduler fell between its first binding and its window's end

    @property
    def possibly(self) -> int:
        return self.bound + self.before + self.left


def placements(gang: GangTimeline, kills: Sequence[float] = ()) -> list[Placement]:
    """The gang's placements: its bindings grouped from the earliest, each group the
    bindings within ``PLACEMENT_WITHIN`` of its first."""
    times = sorted(m.bound for m in gang.members.values() if m.bound is not None)
    starts: list[float] = []
    for when in times:
        if not starts or when > starts[-1] + PLACEMENT_WITHIN:
            starts.append(when)
    out = []
    for start in starts:
        end = start + PLACEMENT_WITHIN
        members = gang.members.values()
        out.append(
            Placement(
                start,
                bound=sum(1 for m in members if m.bound is not None and start <= m.bound <= end),
                before=sum(
                    1
                    for m in members
                    if m.bound is not None
                    and m.bound < start
                    and (m.left is None or m.left >= start - VIEW_LAG)
                ),
                left=sum(
                    1
                    for m in members
                    if m.bound is None
                    and m.left is not None
                    and start - VIEW_LAG <= m.left <= end + SLACK
                ),
                # A binding in flight when the kill came lands a moment after it.
                cut=any(start - 1 <= k <= end for k in kills),
            )
        )
    return out


def due(placement: Placement, now: float) -> bool:
    """The looks and the watch have surely shown every binding and leaving of its window."""
    return now >= placement.start + PLACEMENT_WITHIN + SLACK


def below_minimum(gang: GangTimeline, now: float, kills: Sequence[float] = ()) -> list[str]:
    """A line per placement, due by ``now``, that left the gang below its minimum even
    counting every member that may have been bound then; placements a kill cut are
    excused."""
    return [
        f"{gang.title}: a placement at {p.start:.0f} bound {p.bound} with {p.before} already "
        f"bound ({p.left} left unseen) of minimum {gang.minimum}"
        for p in placements(gang, kills)
        if due(p, now) and not p.cut and p.possibly < gang.minimum
    ]


def partly_placed(
    gang: GangTimeline, at: float, kills: Sequence[float] = ()
) -> tuple[int, int] | None:
    """(bound, pending) at ``at`` when the gang is partly placed with members pending and
    nothing excuses it: not mid-placement, its shortfall not made up by members that
    left, its last placement not cut by a kill. None otherwise."""
    members = gang.members.values()
    bound = sum(1 for m in members if m.bound_by(at))
    waiting = sum(1 for m in members if m.seen <= at and not m.left_by(at) and not m.bound_by(at))
    if not 0 < bound < gang.minimum or not waiting:
        return None
    gone = sum(1 for m in members if m.left_by(at))
    landing = any(
        m.bound is not None and at - PLACEMENT_WITHIN <= m.bound <= at + 1 for m in members
    )
    before = [p for p in placements(gang, kills) if p.start <= at]
    if landing or bound + gone >= gang.minimum or (before and before[-1].cut):
        return None
    return bound, waiting


def partly_placed_together(
    gangs: Iterable[GangTimeline], at: float, kills: Sequence[float] = ()
) -> list[str]:
    """One line when, at ``at``, two gangs or more are each partly placed with members
    pending (each unexcused, see ``partly_placed``): what all or nothing keeps from happening."""
    partly = []
    for gang in gangs:
        counts = partly_placed(gang, at, kills)
        if counts is not None:
            partly.append(f"{gang.title} {counts[0]} of {gang.minimum} bound, {counts[1]} pending")
    if len(partly) < 2:
        return []
    return [f"gangs each partly placed at once at {at:.0f}: {'; '.join(sorted(partly))}"]


@dataclass
class GangJudge:
    """Each gang's timeline kept from the looks, both invariants judged at each look."""

    scheduler: str
    counts: Counter[str] = field(default_factory=Counter)
    kills: list[float] = field(default_factory=list)  # the scheduler killed on purpose
    gangs: dict[str, GangTimeline] = field(default_factory=dict)  # by title
    _judged: set[tuple[str, float]] = field(default_factory=set)  # placements, by start
    _placed: set[str] = field(default_factory=set)  # gangs a placement brought to minimum
    _reported: set[str | frozenset[str]] = field(default_factory=set)
    _look_before: float = 0.0

    @property
    def judging(self) -> bool:
        """Placements whose window the looks have not surely passed yet."""
        return any(
            (gang.title, p.start) not in self._judged
            for gang in self.gangs.values()
            for p in placements(gang, self.kills)
        )

    def check(self, snap: Snapshot) -> list[str]:
        now = snap.taken_at
        podgroups = {key(g): g for g in snap.podgroups}
        listed: set[str] = set()
        for pod in snap.pods:
            if self._see(pod, podgroups, now) is not None:
                listed.add(pod["metadata"]["uid"])
        for pod in snap.departed:  # deleted since the look before, as last shown
            member = self._see(pod, podgroups, now)
            if member is not None:
                member.left = member.left or now
        for gang in self.gangs.values():
            for uid, member in gang.members.items():
                if uid not in listed and member.left is None:
                    member.left = now
        self._look_before = now
        found = []
        for gang in self.gangs.values():
            for p in placements(gang, self.kills):
                if due(p, now) and (gang.title, p.start) not in self._judged:
                    self._judged.add((gang.title, p.start))
                    self.counts["gang placements judged"] += 1
                    short = p.possibly < gang.minimum
                    self.counts["gang placements short after a kill"] += int(p.cut and short)
                    if p.bound + p.before >= gang.minimum:
                        self._placed.add(gang.title)
            found += [line for line in below_minimum(gang, now, self.kills) if self._new(line)]
        together = partly_placed_together(self.gangs.values(), now, self.kills)
        partly = (g.title for g in self.gangs.values() if partly_placed(g, now, self.kills))
        if together and self._new(frozenset(partly)):  # once per set of gangs
            found += together
        self.counts["gangs placed"] = len(self._placed)
        self.counts["gang bindings"] = sum(
            1 for g in self.gangs.values() for m in g.members.values() if m.bound is not None
        )
        return found

    def _new(self, what: str | frozenset[str]) -> bool:
        """Reported once."""
        if what in self._reported:
            return False
        self._reported.add(what)
        return True

    def _see(self, pod: Obj, podgroups: Mapping[str, Obj], now: float) -> Member | None:
        """Record a member of a gang of this scheduler as this look shows it; None for a
        pod of no gang, or of one whose minimum is not known yet or is 1 (no gang)."""
        title = gang_of(pod)
        if title is None or (pod.get("spec") or {}).get("schedulerName") != self.scheduler:
            return None
        gang = self.gangs.get(title)
        if gang is None:
            minimum = minimum_of(pod, podgroups)
            if minimum is None or minimum < 2:
                return None
            gang = self.gangs[title] = GangTimeline(title, minimum)
            self.counts["gangs seen"] += 1
        meta = pod["metadata"]
        member = gang.members.setdefault(meta["uid"], Member(meta["name"], now))
        if pod["spec"].get("nodeName") and member.bound is None:
            member.bound = bound_at(pod) or self._look_before or now
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL:
            member.left = member.left or now
        return member
