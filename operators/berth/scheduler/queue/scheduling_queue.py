"""The scheduling queue: active (priority, then age), backoff, and unschedulable pods.

Equal priorities go first in, first out by the time a pod (re-)entered the queue, so a pod
that keeps failing goes behind its peers, as with kube-scheduler's PrioritySort. Between
priority and that time comes the pod's fair share (``share``, by default 0 for every pod):
the dominant resource share of its tree quota, so that among quotas waiting for the same
capacity the one using least of its runtime goes first. A pod's share is read when it
reaches the top of the active heap (it keeps the last one read meanwhile); a changed share
puts it back in its new place before anything is popped. Reading shares only there keeps
intake cheap: a watch listing thousands of pods does not recompute the tree's accounting
for each. A pod that failed waits out its backoff (initial doubling to max per attempt); a
pod no node could take waits among the unschedulable until a cluster event that could help
(node added or changed, a bound pod gone, a reservation or quota changed), or five
minutes, as kube-scheduler does. Pods with scheduling gates are held until the gates go.
With no pod active, the pod an event sent back whose backoff ends first is tried at once
(kube-scheduler's PopFromBackoffQ, on by default since 1.33): the backoff keeps retries
from crowding out other pods, and an idle loop has none to crowd out. Unlike
kube-scheduler, only for a pod refused at most twice (a preemptor whose victims are gone):
one refused again and again waits out its backoff. The loop shares its process with the
operators and the watches, and in the long churn an idle loop tried such pods again on
every deletion, some a hundred times a minute, each attempt holding up the rest.

With that limit alone, large pods waited out ten-second backoffs while smaller ones took
the room deletions freed. So a pod an event on one node made room for leaves its backoff
for the active queue at once, as if it had just arrived, whatever its attempts: it now
passes there every filter that refused it, beside the pods that room went to first
(``fits``, which the event table judges). Placed behind the pods already active, it does
not hold up those that arrived before the room did.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.queue.inflight import Fits, Helps, InFlight

UNSCHEDULABLE_TIMEOUT = 300.0
# A pod refused more often than this waits out its backoff even when the loop is idle,
# unless an event made room for it.
EARLY_POP_ATTEMPTS = 2
# (event, queue) of a pod entering a queue: kube-scheduler's
# scheduler_queue_incoming_pods_total, which shows what sends pods back to be tried.
Incoming = Callable[[str, str], None]

POD_ADD = "PodAdd"
POD_UPDATE = "PodUpdate"
ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
UNSCHEDULABLE_TIMEOUT_EVENT = "UnschedulableTimeout"


@dataclass
class _Entry:
    pod: PodInfo
    attempts: int = 0
    queued_at: float = 0.0  # when it (re-)entered the queue: the tie-break after priority
    ready_at: float = 0.0  # end of backoff
    since: float = 0.0  # entered the unschedulable area
    # The plugins that rejected it last: only their cluster events bring it back.
    rejected_by: frozenset[str] = frozenset()
    share: float = 0.0  # the fair share last read for it
    # In backoff because an event sent it back (not an error's retry, not a gang's wait):
    # it may be tried before its backoff ends when no pod is active.
    early: bool = False
    # What sent it to be tried last (the queue's incoming event): a refusal's log line
    # names it, so what keeps a pod coming back shows without a profiler.
    sent_by: str = POD_ADD


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        share: Callable[[PodInfo], float] | None = None,
        incoming: Incoming | None = None,
    ) -> None:
        self.initial_backoff = initial_backoff
        self.incoming = incoming
        self.max_backoff = max_backoff
        self.clock = clock
        self.share = share
        self._entries: dict[str, _Entry] = {}
        self._active: list[tuple[int, float, float, int, float, int, str]] = []
        self._active_set: set[str] = set()
        self._backoff: list[tuple[float, int, str]] = []
        self._backoff_set: set[str] = set()
        self._unschedulable: set[str] = set()
        self._gated: set[str] = set()
        # The pods in flight and the events that arrived meanwhile: when an attempt
        # fails, those that may help the pod, rejected as it was, send it back, to be
        # tried at once if one of them made room for it.
        self._in_flight = InFlight()
        self._seq = itertools.count()
        self._wake = asyncio.Event()

    # -- intake ----------------------------------------------------------------------

    def add(self, pod: PodInfo, *, gated: bool = False, changed: bool = True) -> None:
        """A pending pod appeared or changed; ``gated`` holds it until a later change.
        An unschedulable pod is tried again only when ``changed`` (more than its status
        changed, as kube-scheduler's isPodUpdated): its PodScheduled condition, written
        after each refusal, would otherwise send it back after every attempt."""
        entry = self._entries.get(pod.uid)
        if entry is None:
            entry = self._entries[pod.uid] = _Entry(pod, queued_at=self.clock())
        else:
            entry.pod = pod
        if pod.uid in self._in_flight:
            return
        if gated:
            self._drop_from_areas(pod.uid)
            self._gated.add(pod.uid)
            return
        if pod.uid in self._gated:
            self._gated.discard(pod.uid)
            self._push_active(entry, POD_UPDATE)
        elif pod.uid in self._unschedulable:
            if changed:
                self._unschedulable.discard(pod.uid)
                self._to_backoff_or_active(entry, POD_UPDATE)
        elif pod.uid not in self._active_set and pod.uid not in self._backoff_set:
            self._push_active(entry, POD_ADD)

    def delete(self, uid: str) -> None:
        """The pod was deleted or bound elsewhere: forget it."""
        self._entries.pop(uid, None)
        self._drop_from_areas(uid)
        self._gated.discard(uid)

    def _drop_from_areas(self, uid: str) -> None:
        self._active_set.discard(uid)
        self._backoff_set.discard(uid)
        self._unschedulable.discard(uid)

    # -- the scheduling loop's side ------------------------------------------------------

    async def pop(self) -> PodInfo:
        """The next pod to schedule, waiting for one (or for a backoff to end)."""
        while True:
            self._flush_backoff()
            while self._active:
                key = heapq.heappop(self._active)
                uid = key[-1]
                if uid in self._active_set:
                    if self.share is not None:
                        entry = self._entries[uid]
                        entry.share = self.share(entry.pod)
                        if entry.share != key[1]:
                            self._push_active(entry, "")
                            continue
                    self._active_set.discard(uid)
                    self._in_flight.take_off(uid)
                    return self._entries[uid].pod
            early = self._pop_backoff_early()
            if early is not None:
                return early
            self._wake.clear()
            timeout = None
            if self._backoff:
                timeout = max(0.0, self._backoff[0][0] - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _pop_backoff_early(self) -> PodInfo | None:
        """The backoff's first pod an event sent back, taken in flight; None if none."""
        kept = []
        found = None
        while self._backoff:
            item = heapq.heappop(self._backoff)
            uid = item[2]
            if uid not in self._backoff_set:
                continue  # left the backoff since
            if self._entries[uid].early:
                found = uid
                break
            kept.append(item)
        for item in kept:
            heapq.heappush(self._backoff, item)
        if found is None:
            return None
        self._backoff_set.discard(found)
        self._in_flight.take_off(found)
        return self._entries[found].pod

    def done(self, uid: str) -> None:
        """Scheduled (assumed and sent to bind): the queue lets go of it."""
        self._in_flight.discard(uid)
        self._entries.pop(uid, None)

    def take(self, uid: str) -> bool:
        """A queued pod taken along with the one popped (its gang, decided together): in
        flight as if popped; False when it is not waiting here."""
        if uid not in self._entries or uid in self._in_flight:
            return False
        self._drop_from_areas(uid)
        self._gated.discard(uid)
        self._in_flight.take_off(uid)
        return True

    def unschedulable(self, pod: PodInfo, rejected_by: frozenset[str] = frozenset()) -> None:
        """No node fit. Waits for a helpful event, unless one that may help it, rejected as
        it was, came while it was in flight (kube-scheduler's in-flight events): then it
        goes to backoff, or is tried at once if one of those events made room for it."""
        events = self._in_flight.land(pod.uid)
        entry = self._finish_attempt(pod)
        if entry is None:
            return
        entry.rejected_by = rejected_by
        # Newest first: any one that helps will do, and a preemptor's own victims, whose
        # leaving is what it waits for, leave last (it scanned hundreds of others first).
        newest_first = reversed(events)
        helping = ((e, fits) for e, helps, fits in newest_first if helps(entry.pod, rejected_by))
        first = next(helping, None)
        if first is None:
            entry.since = self.clock()
            self._unschedulable.add(pod.uid)
            self._count(ATTEMPT_FAILURE, "unschedulable")
            return
        self._to_backoff_or_active(entry, first[0])
        if pod.uid not in self._backoff_set:
            return  # its backoff is over: active already
        for event, fits in itertools.chain([first], helping):
            if fits is not None and fits(entry.pod, rejected_by):
                self._take_now(entry, event)
                return

    def wait_out(self, pod: PodInfo, seconds: float) -> None:
        """Not tried for ``seconds`` (or its own backoff, if longer), then tried whatever
        happens: a gang's backoff, which no cluster event ends."""
        entry = self._finish_attempt(pod)
        if entry is not None:
            entry.ready_at = max(entry.ready_at, entry.queued_at + seconds)
            self._to_backoff_or_active(entry, ATTEMPT_FAILURE)

    def retry(self, pod: PodInfo) -> None:
        """An error (binding failed, API trouble): try again after the backoff."""
        entry = self._finish_attempt(pod)
        if entry is not None:
            self._to_backoff_or_active(entry, ATTEMPT_FAILURE)

    def _finish_attempt(self, pod: PodInfo) -> _Entry | None:
        self._in_flight.discard(pod.uid)
        entry = self._entries.get(pod.uid)
        if entry is None:
            return None  # deleted while in flight
        entry.attempts += 1
        entry.queued_at = self.clock()
        entry.ready_at = entry.queued_at + self.backoff(entry.attempts)
        return entry

    def backoff(self, attempts: int) -> float:
        return float(min(self.initial_backoff * 2 ** max(attempts - 1, 0), self.max_backoff))

    # -- cluster events ----------------------------------------------------------------

    def move_all(self, event: str = "WildCardEvent") -> None:
        """Something changed that may help any pod: unschedulable pods go back to be tried."""
        self.move(lambda _pod, _rejected_by: True, event)

    def move(self, helps: Helps, event: str, fits: Fits | None = None) -> None:
        """A cluster event (``event`` names it for the metric): the unschedulable pods it
        may help (``helps`` of the pod and the plugins that rejected it) go back to be
        tried. For pods in flight it is kept, and asked once their attempt fails. With
        ``fits`` (an event on one node), the pods in backoff it says fit there now, those
        just sent back included, are tried at once whatever their attempts."""
        self._in_flight.record((event, helps, fits))
        for uid in list(self._unschedulable):
            entry = self._entries[uid]
            if helps(entry.pod, entry.rejected_by):
                self._unschedulable.discard(uid)
                self._to_backoff_or_active(entry, event)
        if fits is not None:
            self._hasten(fits, event)

    def _hasten(self, fits: Fits, event: str) -> None:
        """The pods events sent to backoff (not an error's retry, not a gang's wait) that
        now fit where this event made room: tried at once, asked in queue order, each
        taking its share of the room before the next is asked."""
        now = self.clock()
        waiting = [
            entry
            for uid in self._backoff_set
            if (entry := self._entries[uid]).sent_by != ATTEMPT_FAILURE and entry.ready_at > now
        ]
        waiting.sort(key=_order)
        for entry in waiting:
            if fits(entry.pod, entry.rejected_by):
                self._take_now(entry, event)

    def _take_now(self, entry: _Entry, event: str) -> None:
        """Out of its backoff, into the active queue behind the pods already there."""
        self._backoff_set.discard(entry.pod.uid)
        entry.queued_at = self.clock()
        self._push_active(entry, event)

    def is_unschedulable(self, uid: str) -> bool:
        return uid in self._unschedulable

    def sent_by(self, uid: str) -> str | None:
        """The event that last sent the pod to be tried; None when the queue does not hold
        it."""
        entry = self._entries.get(uid)
        return entry.sent_by if entry is not None else None

    def backed_off(self, uid: str) -> bool:
        """Unschedulable with its backoff over: sent back now, it is tried at once."""
        return uid in self._unschedulable and self._entries[uid].ready_at <= self.clock()

    def requeue(self, uids: frozenset[str], event: str) -> int:
        """These unschedulable pods go back to be tried (a periodic check, ``event``, found
        them worth another attempt); returns how many did."""
        moved = 0
        for uid in sorted(uids & self._unschedulable):
            self._unschedulable.discard(uid)
            self._to_backoff_or_active(self._entries[uid], event)
            moved += 1
        return moved

    def flush_unschedulable_leftovers(self) -> None:
        """Pods unschedulable for five minutes are tried again whatever happened."""
        now = self.clock()
        for uid in list(self._unschedulable):
            entry = self._entries[uid]
            if now - entry.since >= UNSCHEDULABLE_TIMEOUT:
                self._unschedulable.discard(uid)
                self._to_backoff_or_active(entry, UNSCHEDULABLE_TIMEOUT_EVENT)

    # -- internals ---------------------------------------------------------------------

    def _count(self, event: str, queue: str) -> None:
        if self.incoming is not None and event:
            self.incoming(event, queue)

    def _push_active(self, entry: _Entry, event: str) -> None:
        if event and event != BACKOFF_COMPLETE:
            entry.sent_by = event
        self._count(event, "active")
        pod = entry.pod
        self._active_set.add(pod.uid)
        # Within one clock tick, pods back from an attempt go after first-time pods.
        key = (*_order(entry), next(self._seq), pod.uid)
        heapq.heappush(self._active, key)
        self._wake.set()

    def _to_backoff_or_active(self, entry: _Entry, event: str) -> None:
        if entry.ready_at > self.clock():
            entry.sent_by = event
            entry.early = event != ATTEMPT_FAILURE and entry.attempts <= EARLY_POP_ATTEMPTS
            self._count(event, "backoff")
            self._backoff_set.add(entry.pod.uid)
            heapq.heappush(self._backoff, (entry.ready_at, next(self._seq), entry.pod.uid))
            self._wake.set()
        else:
            self._push_active(entry, event)

    def _flush_backoff(self) -> None:
        now = self.clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoff)
            if uid in self._backoff_set:
                self._backoff_set.discard(uid)
                self._push_active(self._entries[uid], BACKOFF_COMPLETE)

    def counts(self) -> dict[str, int]:
        return {
            "active": len(self._active_set),
            "backoff": len(self._backoff_set),
            "unschedulable": len(self._unschedulable),
            "gated": len(self._gated),
        }

    def where(self, namespace: str, name: str) -> dict[str, object] | None:
        """Where a pod waits, for a person asking why it has no decision yet: its area,
        its attempts, how long since it (re-)entered the queue and, when active, how many
        active pods go before it. None when the queue does not hold it."""
        entry = next(
            (
                e
                for e in self._entries.values()
                if (e.pod.namespace, e.pod.name) == (namespace, name)
            ),
            None,
        )
        if entry is None:
            return None
        uid = entry.pod.uid
        area = next(
            (
                label
                for label, members in (
                    ("in flight", self._in_flight),
                    ("active", self._active_set),
                    ("backoff", self._backoff_set),
                    ("unschedulable", self._unschedulable),
                    ("gated", self._gated),
                )
                if uid in members
            ),
            "none",
        )
        place: dict[str, object] = {
            "queue": area,
            "attempts": entry.attempts,
            "waitingSeconds": round(self.clock() - entry.queued_at, 3),
            "sentBy": entry.sent_by,
        }
        if area == "active":
            mine = _order(entry)
            place["ahead"] = sum(
                1 for other in self._active_set if _order(self._entries[other]) < mine
            )
        return place

    def __contains__(self, uid: str) -> bool:
        return uid in self._entries


def _order(entry: _Entry) -> tuple[int, float, float, int, float]:
    """The active heap's order of a pod (its key less the tie-breaking sequence)."""
    return (-entry.pod.priority, entry.share, entry.queued_at, entry.attempts, entry.pod.created)
