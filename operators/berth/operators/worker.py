"""The worker every operator runs: objects marked by their events, decided one at a time.

Marks come from an operator's Kopf handlers for its custom kinds, from the pod and node
informers the operators share (:mod:`berth.operators.cluster`), and from its own informers
where it keeps one; each only marks keys (an object's name, or a namespace when one
decision covers a namespace). The worker calls the operator's ``reconcile(key)`` for each
marked key, in order, one at a time, and follows what came of it:

- it returned a time: decide the key again then, when time alone changes the decision
  (a reservation's expiry) or what it reads is not listed yet, so there is no timer per
  object;
- it raised :class:`~berth.kube.write.Stale` (404 or 409): the object is gone or changed
  since it was read; its watch event marks it again, so it is not retried blindly;
- it raised anything else: decide it again after a backoff that doubles with each failure
  in a row, and never let one object stop the others.

A mark is news, so a marked key is decided at once even while it waits out a backoff.
Marks that arrive during a decision are kept for the next round: nothing is lost, and an
object marked many times meanwhile is decided once.

Each finished decision beats the worker's heartbeat; ``berth run``'s liveness probe fails
when a started worker has had work waiting (a key marked or due, or a decision under way)
with no beat for the configured time: a reconcile stuck on an await is a dead operator.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.health import Heartbeat, Progress
from berth.kube.write import Stale

__all__ = ["Backoff", "Reconcile", "Worker", "liveness", "wall_clock"]

Reconcile = Callable[[str], Awaitable[datetime | None]]
"""Decide one key and write what differs; return when to decide it again, if ever."""

CONNECTION_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""The API server out of reach: retried like a refusal, logged without a traceback."""

logger = log.get(__name__)


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Backoff:
    """How long a key waits after failures in a row: doubling from ``initial`` to ``limit``."""

    initial: timedelta = timedelta(seconds=1)
    limit: timedelta = timedelta(seconds=30)

    def after(self, failures: int) -> timedelta:
        doublings = min(max(failures - 1, 0), 32)  # far past any limit; keeps the product small
        return min(self.limit, self.initial * (1 << doublings))


class Worker:
    """Marked and due keys of one operator, reconciled one at a time, or with
    ``concurrency`` above 1 that many distinct keys at once (never one key twice at once)."""

    def __init__(
        self,
        kind: str,
        reconcile: Reconcile,
        *,
        key_field: str = "name",
        clock: Callable[[], datetime] = wall_clock,
        backoff: Backoff = Backoff(),
        concurrency: int = 1,
    ) -> None:
        """``kind`` and ``key_field`` (what a key names: ``name`` or ``namespace``) label logs.
        ``concurrency`` above 1 only for an operator whose decisions are independent of each
        other (one object each, no limit counted across objects)."""
        self.kind = kind
        self.concurrency = concurrency
        self.reconcile = reconcile
        self.key_field = key_field
        self.clock = clock
        self.backoff = backoff
        self._marked: set[str] = set()
        self._due: dict[str, datetime] = {}
        self._failures: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.heartbeat = Heartbeat()
        self._deciding = 0

    def mark(self, key: str) -> None:
        self._marked.add(key)
        self._wake.set()

    def mark_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.mark(key)

    def next_due(self) -> datetime | None:
        """The earliest time a key is due (a recheck or a retry), if any is."""
        return min(self._due.values(), default=None)

    def waiting(self) -> bool:
        """Work is waiting: a key marked or due by now, or a decision under way."""
        now = self.clock()
        return (
            self._deciding > 0 or bool(self._marked) or any(at <= now for at in self._due.values())
        )

    def start(self) -> None:
        self.heartbeat.beat()
        self._task = asyncio.create_task(self._run(), name=f"{self.kind}-worker")
        _STARTED[self] = None

    async def stop(self) -> None:
        _STARTED.pop(self, None)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def drain(self) -> None:
        """Reconcile every key marked, or due by now, once."""
        now = self.clock()
        keys = self._marked | {key for key, at in self._due.items() if at <= now}
        self._marked = set()
        if self.concurrency == 1:
            for key in sorted(keys):
                await self._reconcile(key)
            return
        slots = asyncio.Semaphore(self.concurrency)

        async def one(key: str) -> None:
            async with slots:
                await self._reconcile(key)

        await asyncio.gather(*(one(key) for key in sorted(keys)))

    async def _run(self) -> None:
        while True:
            await self._sleep()
            await self.drain()

    async def _sleep(self) -> None:
        """Until a key is marked, or until the earliest due time."""
        due = self.next_due()
        timeout = None if due is None else max(0.0, (due - self.clock()).total_seconds())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()

    async def _reconcile(self, key: str) -> None:
        self._due.pop(key, None)
        self._deciding += 1
        try:
            await self._decide(key)
        finally:
            self._deciding -= 1
            self.heartbeat.beat()

    async def _decide(self, key: str) -> None:
        where = {self.key_field: key}
        try:
            recheck = await self.reconcile(key)
        except Stale as err:
            # Gone or changed meanwhile: its watch event brings the news and marks it again.
            self._failures.pop(key, None)
            logger.debug("changed meanwhile", kind=self.kind, status=err.status, **where)
            return
        except Exception as err:
            # One bad object must never stop the worker for all the others.
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = self.backoff.after(failures)
            self._due[key] = self.clock() + delay
            retry = {"failures": failures, "retry_in": delay.total_seconds(), **where}
            if isinstance(err, ApiException):
                logger.warning("not written; retrying", kind=self.kind, status=err.status, **retry)
            elif isinstance(err, CONNECTION_ERRORS):
                logger.warning("not written; retrying", kind=self.kind, error=repr(err), **retry)
            else:
                logger.exception("not decided; retrying", kind=self.kind, **retry)
            return
        self._failures.pop(key, None)
        if recheck is not None:
            self._due[key] = recheck


# The started workers (the operators run once per process, as Kopf's registry does).
_STARTED: dict[Worker, None] = {}


def liveness(stall_after: float) -> Callable[[], bool]:
    """A liveness check over every started worker: failing while one has had work waiting
    for ``stall_after`` seconds without finishing a decision."""
    checks: dict[Worker, Progress] = {}

    def check() -> bool:
        for worker in list(checks):
            if worker not in _STARTED:
                del checks[worker]
        alive = True
        for worker in list(_STARTED):
            progress = checks.get(worker)
            if progress is None:
                progress = checks[worker] = Progress(worker.heartbeat, worker.waiting, stall_after)
            if not progress():
                logger.error("operator worker stalled", kind=worker.kind, namespace=None)
                alive = False
        return alive

    return check
