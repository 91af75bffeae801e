"""The operators' worker: marks, due times, backoff, and stale objects left to the watch.

Time is an injected clock moved by hand; ``drain`` is one round of the worker's loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from berth.kube.write import Conflict, NotFound
from berth.operators.worker import Backoff, Worker

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: float) -> None:
        self.now += seconds(by)


@dataclass
class Operator:
    """A reconcile that records its calls and does what each key is told to."""

    calls: list[str] = field(default_factory=list)
    outcomes: dict[str, list[datetime | BaseException | None]] = field(default_factory=dict)

    async def reconcile(self, key: str) -> datetime | None:
        self.calls.append(key)
        queue = self.outcomes.get(key) or [None]
        outcome = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def make(backoff: Backoff | None = None) -> tuple[Worker, Operator, Clock]:
    clock = Clock()
    operator = Operator()
    worker = Worker("thing", operator.reconcile, clock=clock, backoff=backoff or Backoff())
    return worker, operator, clock


async def test_marked_keys_are_decided_once_each_in_order() -> None:
    worker, operator, _ = make()
    for key in ("b", "a", "b", "b"):
        worker.mark(key)
    await worker.drain()
    assert operator.calls == ["a", "b"]
    await worker.drain()
    assert operator.calls == ["a", "b"], "nothing marked, nothing due: nothing decided"


async def test_a_mark_during_a_decision_is_kept_for_the_next_round() -> None:
    worker, operator, _ = make()

    async def reconcile(key: str) -> datetime | None:
        operator.calls.append(key)
        if len(operator.calls) == 1:
            worker.mark(key)  # its watch event arrives while it is being decided
        return None

    worker.reconcile = reconcile
    worker.mark("a")
    await worker.drain()
    assert operator.calls == ["a"]
    await worker.drain()
    assert operator.calls == ["a", "a"]


async def test_a_returned_time_decides_the_key_again_then() -> None:
    worker, operator, clock = make()
    operator.outcomes["r"] = [T0 + seconds(30), None]
    worker.mark("r")
    await worker.drain()
    assert worker.next_due() == T0 + seconds(30)
    clock.advance(29)
    await worker.drain()
    assert operator.calls == ["r"], "not due yet"
    clock.advance(1)
    await worker.drain()
    assert operator.calls == ["r", "r"]
    assert worker.next_due() is None


async def test_a_mark_decides_at_once_and_the_new_decision_replaces_the_due_time() -> None:
    worker, operator, clock = make()
    operator.outcomes["r"] = [T0 + seconds(60), T0 + seconds(90)]
    worker.mark("r")
    await worker.drain()
    clock.advance(10)
    worker.mark("r")
    await worker.drain()
    assert operator.calls == ["r", "r"]
    assert worker.next_due() == T0 + seconds(90)


async def test_errors_back_off_doubling_up_to_the_limit_and_reset_on_success() -> None:
    worker, operator, clock = make(Backoff(initial=seconds(1), limit=seconds(5)))
    down = ApiException(status=503, reason="Service Unavailable")
    operator.outcomes["r"] = [down, down, down, down, None, down]
    worker.mark("r")
    waits = []
    for _ in range(5):
        await worker.drain()
        due = worker.next_due()
        if due is None:
            break
        waits.append((due - clock.now).total_seconds())
        clock.now = due
    assert waits == [1, 2, 4, 5]
    assert operator.calls == ["r"] * 5
    worker.mark("r")
    await worker.drain()
    assert worker.next_due() == clock.now + seconds(1), "a success starts the count again"


async def test_an_error_is_not_retried_before_its_backoff() -> None:
    worker, operator, clock = make(Backoff(initial=seconds(4), limit=seconds(60)))
    operator.outcomes["r"] = [OSError("connection refused"), None]
    worker.mark("r")
    await worker.drain()
    clock.advance(3.9)
    await worker.drain()
    assert operator.calls == ["r"]
    clock.advance(0.1)
    await worker.drain()
    assert operator.calls == ["r", "r"]


@pytest.mark.parametrize("stale", [Conflict(status=409), NotFound(status=404)])
async def test_a_stale_object_waits_for_its_watch_event(stale: ApiException) -> None:
    worker, operator, clock = make()
    operator.outcomes["r"] = [T0 + seconds(5)]
    worker.mark("r")
    await worker.drain()
    assert worker.next_due() == T0 + seconds(5)
    operator.outcomes["r"] = [stale, None]
    clock.advance(5)
    await worker.drain()
    assert worker.next_due() is None, "no blind retry, and the old due time is gone"
    clock.advance(3600)
    await worker.drain()
    assert operator.calls == ["r", "r"]
    worker.mark("r")  # the watch event
    await worker.drain()
    assert operator.calls == ["r", "r", "r"]


async def test_a_stale_object_starts_its_backoff_again() -> None:
    worker, operator, clock = make()
    down = ApiException(status=500)
    operator.outcomes["r"] = [down, down, Conflict(status=409), down]
    worker.mark("r")
    await worker.drain()
    clock.advance(1)
    await worker.drain()
    assert worker.next_due() == clock.now + seconds(2)
    worker.mark("r")
    await worker.drain()  # the conflict
    worker.mark("r")
    await worker.drain()
    assert worker.next_due() == clock.now + seconds(1)


async def test_one_failing_key_never_holds_up_the_others() -> None:
    worker, operator, _ = make()
    operator.outcomes["a"] = [ValueError("a bug")]
    for key in ("a", "b", "c"):
        worker.mark(key)
    await worker.drain()
    assert operator.calls == ["a", "b", "c"]
    assert worker.next_due() is not None


def test_backoff_doubles_from_initial_to_limit() -> None:
    backoff = Backoff(initial=seconds(0.5), limit=seconds(3))
    assert [backoff.after(n).total_seconds() for n in range(1, 6)] == [0.5, 1, 2, 3, 3]
    assert backoff.after(10_000) == seconds(3)


async def test_the_loop_wakes_on_a_mark() -> None:
    decided = asyncio.Event()

    async def reconcile(key: str) -> datetime | None:
        decided.set()
        return None

    worker = Worker("thing", reconcile)
    worker.start()
    try:
        worker.mark("a")
        await asyncio.wait_for(decided.wait(), 10)
    finally:
        await worker.stop()


async def test_with_concurrency_distinct_keys_are_decided_together_up_to_the_limit() -> None:
    in_flight: list[int] = [0]
    peak: list[int] = [0]
    decided: list[str] = []
    release = asyncio.Event()

    async def reconcile(key: str) -> datetime | None:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await release.wait()
        in_flight[0] -= 1
        decided.append(key)
        return None

    worker = Worker("thing", reconcile, concurrency=3)
    worker.mark_all(f"k{i}" for i in range(7))
    drain = asyncio.create_task(worker.drain())
    for _ in range(20):
        await asyncio.sleep(0)
    assert in_flight[0] == 3, "three keys decided at once, the rest wait for a slot"
    assert worker.waiting()
    release.set()
    await drain
    assert sorted(decided) == [f"k{i}" for i in range(7)]
    assert peak[0] == 3
    assert not worker.waiting()
