"""The cluster events that arrive while pods are in flight, kept once for all of them.

A pod is in flight from the moment the loop takes it until its attempt ends: refused, or
bound (the binding included). An event that came meanwhile may have helped it, so when a
refusal comes back the queue asks the events seen since the pod took off. kube-scheduler
keeps one list for every pod in flight (its inFlightEvents), each pod remembering where it
joined; so does this. Recording an event is one append, whatever the number of pods in
flight: a scheduler that decides faster than the API server binds has thousands of pods
binding at once, and a copy of every event for each of them cost more than the
scheduling itself. Events older than the oldest pod in flight are dropped.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

from berth.scheduler.cache.podinfo import PodInfo

# Whether a cluster event may help a pod, given the plugins that rejected it.
Helps = Callable[[PodInfo, frozenset[str]], bool]
# Whether a pod, given the plugins that rejected it, now fits where an event on one node
# made room: asked in queue order, each pod it says yes to takes its share of the room.
Fits = Callable[[PodInfo, frozenset[str]], bool]
# An event as the queue was told of it: its label, ``helps`` and ``fits``.
Event = tuple[str, Helps, Fits | None]


class InFlight:
    """The pods in flight, and the events each has seen since it took off."""

    def __init__(self) -> None:
        self._since: dict[str, int] = {}
        """Each pod in flight: the number of the first event it may see."""
        self._order: deque[tuple[int, str]] = deque()
        """(number, pod) in the order pods took off; a pod that landed is skipped lazily."""
        self._events: deque[Event] = deque()
        self._first = 0
        """The number of ``_events[0]``."""
        self._next = 0
        """The number the next event gets."""

    def __contains__(self, uid: object) -> bool:
        return uid in self._since

    def take_off(self, uid: str) -> None:
        self._since[uid] = self._next
        self._order.append((self._next, uid))

    def record(self, event: Event) -> None:
        """An event every pod now in flight has seen; nothing to keep with none in flight."""
        if self._since:
            self._events.append(event)
            self._next += 1

    def land(self, uid: str) -> list[Event]:
        """The pod's attempt ended: the events it saw in flight, oldest first."""
        since = self._since.pop(uid, None)
        if since is None:
            return []
        seen = list(itertools.islice(self._events, since - self._first, None))
        self._trim()
        return seen

    def discard(self, uid: str) -> None:
        """The pod's attempt ended and what it saw does not matter (bound, or deleted)."""
        if self._since.pop(uid, None) is not None:
            self._trim()

    def _trim(self) -> None:
        """Drop the events no pod in flight has seen all of."""
        order = self._order
        while order and self._since.get(order[0][1]) != order[0][0]:
            order.popleft()
        oldest = order[0][0] if order else self._next
        while self._first < oldest:
            self._events.popleft()
            self._first += 1
