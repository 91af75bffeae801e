"""The scheduling queue, checked against kube-scheduler's PriorityQueue.

kube-scheduler facts used here (pkg/scheduler/backend/queue): the active queue is ordered
by PrioritySort (higher priority first, then the earlier QueuedPodInfo.Timestamp, which is
refreshed whenever a pod is re-added after an attempt); the backoff doubles from
podInitialBackoffSeconds up to podMaxBackoffSeconds; unschedulable pods wait for a cluster
event or podMaxInUnschedulablePodsDuration (5 minutes); an event during an attempt sends
the pod to backoff instead of the unschedulable pool when its queueing hints, asked with
the plugins that rejected it in that attempt, say it may help.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.queue.scheduling_queue import UNSCHEDULABLE_TIMEOUT, SchedulingQueue
from tests.unit.scheduler_fixtures import info, pod


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> SchedulingQueue:
    return SchedulingQueue(initial_backoff=1.0, max_backoff=10.0, clock=clock)


def pending(name: str, *, priority: int = 0, created: float = 0) -> PodInfo:
    return info(pod(name, "100m", priority=priority, created=created))


async def pop_now(queue: SchedulingQueue) -> PodInfo:
    """The next pod, which must be ready without waiting."""
    return await asyncio.wait_for(queue.pop(), timeout=1)


async def nothing_ready(queue: SchedulingQueue) -> bool:
    """No pod can be popped now (the fake clock does not move while pop waits)."""
    try:
        await asyncio.wait_for(queue.pop(), timeout=0.03)
    except TimeoutError:
        return True
    return False


def empty_counts(**changes: int) -> dict[str, int]:
    return {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0, **changes}


async def test_higher_priority_first_then_earlier() -> None:
    queue = SchedulingQueue(clock=FakeClock())
    for p in [
        pending("low-old", priority=0, created=1),
        pending("high-new", priority=100, created=50),
        pending("high-old", priority=100, created=10),
        pending("mid", priority=10, created=5),
        pending("low-new", priority=0, created=2),
    ]:
        queue.add(p)
    order = [(await pop_now(queue)).name for _ in range(5)]
    assert order == ["high-old", "high-new", "mid", "low-old", "low-new"]


async def test_negative_priorities_sort_below_zero(queue: SchedulingQueue) -> None:
    queue.add(pending("negative", priority=-5))
    queue.add(pending("zero", priority=0, created=100))
    assert (await pop_now(queue)).name == "zero"


async def test_a_pod_back_from_an_attempt_queues_behind_its_peers(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    # PrioritySort breaks ties by the queue timestamp, refreshed when a pod comes back
    # after an attempt: an old pod that failed does not jump ahead of equal-priority
    # pods that have been waiting since.
    old = pending("old", created=0)
    queue.add(old)
    assert (await pop_now(queue)).name == "old"
    queue.add(pending("newer", created=10))
    queue.unschedulable(old)
    clock.advance(30)
    queue.move_all()
    assert (await pop_now(queue)).name == "newer"
    assert (await pop_now(queue)).name == "old"


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0), (30, 10.0)],
)
def test_backoff_doubles_up_to_the_max(attempts: int, seconds: float) -> None:
    assert SchedulingQueue(1.0, 10.0).backoff(attempts) == seconds


async def test_retry_waits_out_each_backoff(queue: SchedulingQueue, clock: FakeClock) -> None:
    queue.add(pending("p"))
    popped = await pop_now(queue)
    for wait in (1.0, 2.0, 4.0, 8.0, 10.0, 10.0):
        queue.retry(popped)
        assert queue.counts() == empty_counts(backoff=1)
        clock.advance(wait - 0.01)
        assert await nothing_ready(queue), f"left backoff before {wait}s"
        clock.advance(0.01)
        popped = await pop_now(queue)


@pytest.mark.parametrize(
    ("seconds", "waited"),
    [(5.0, 5.0), (-3.0, 1.0)],  # the second: its own backoff is longer (the gang's ended)
)
async def test_a_pod_waits_out_a_given_time_then_is_tried_without_an_event(
    queue: SchedulingQueue, clock: FakeClock, seconds: float, waited: float
) -> None:
    """A backed-off gang's member: no cluster event ends a gang's backoff, so its members
    wait in the backoff area (not the unschedulable one) and come back when it ends."""
    queue.add(pending("p"))
    queue.wait_out(await pop_now(queue), seconds)
    assert queue.counts() == empty_counts(backoff=1)
    queue.move_all()  # an event meanwhile neither hastens nor loses it
    clock.advance(waited - 0.01)
    assert await nothing_ready(queue)
    clock.advance(0.01)
    assert (await pop_now(queue)).name == "p"


async def test_unschedulable_pods_wait_for_a_cluster_event(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    p = pending("p")
    queue.add(p)
    queue.unschedulable(await pop_now(queue))
    clock.advance(60)  # backoff long over, yet nothing changed in the cluster
    queue.flush_unschedulable_leftovers()
    assert await nothing_ready(queue)
    assert queue.counts() == empty_counts(unschedulable=1)
    queue.move_all()
    assert queue.counts() == empty_counts(active=1)
    assert (await pop_now(queue)).uid == p.uid


async def test_moved_while_still_backing_off_goes_to_backoff(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pending("p"))
    queue.unschedulable(await pop_now(queue))
    clock.advance(0.5)  # first backoff is 1s
    queue.move_all()
    assert queue.counts() == empty_counts(backoff=1)
    clock.advance(0.5)
    assert (await pop_now(queue)).name == "p"


async def test_with_no_pod_active_an_event_s_pod_leaves_its_backoff_at_once(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """kube-scheduler's PopFromBackoffQ (on by default since 1.33): an idle loop tries the
    pod whose backoff ends first among those an event sent back; an active pod still goes
    first, and an error's retry still waits out its backoff."""
    queue.add(pending("later", created=2))
    queue.add(pending("first", created=1))
    first, later = await pop_now(queue), await pop_now(queue)
    queue.unschedulable(first)
    clock.advance(0.2)
    queue.unschedulable(later)
    queue.move_all()  # both back, in backoff for about a second more
    assert queue.counts() == empty_counts(backoff=2)
    queue.add(pending("new", created=3))
    assert (await pop_now(queue)).name == "new"  # the active one first
    assert (await pop_now(queue)).name == "first"  # its backoff ends first
    assert (await pop_now(queue)).name == "later"
    # An error's retry is not taken early.
    errored = pending("errored", created=4)
    queue.add(errored)
    queue.retry(await pop_now(queue))
    assert await nothing_ready(queue)
    clock.advance(1)
    assert (await pop_now(queue)).name == "errored"


async def test_a_pod_refused_again_and_again_waits_out_its_backoff_even_when_idle(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """An idle loop takes a pod an event sent back early only for its first retries: on
    its third refusal it waits its 4 s backoff, whatever events send it back meanwhile."""
    queue.add(pending("p"))
    popped = await pop_now(queue)
    for _ in range(2):
        queue.unschedulable(popped)
        queue.move_all()
        popped = await pop_now(queue)  # early: its backoff had not ended
    queue.unschedulable(popped)  # the third refusal: 4 s
    queue.move_all()
    assert await nothing_ready(queue)
    clock.advance(4)
    assert (await pop_now(queue)).name == "p"


async def refused_three_times(queue: SchedulingQueue, clock: FakeClock, p: PodInfo) -> None:
    """``p`` refused three times, waiting among the unschedulable (its backoff 4 s); the
    first two times sent back and taken early, the clock still."""
    queue.add(p)
    for _ in range(2):
        queue.unschedulable(await pop_now(queue), frozenset({"Fit"}))
        queue.requeue(frozenset({p.uid}), "PeriodicCheck")
    queue.unschedulable(await pop_now(queue), frozenset({"Fit"}))


@pytest.mark.parametrize("room", [True, False])
async def test_a_pod_refused_again_and_again_is_tried_at_once_when_the_event_made_room_for_it(
    queue: SchedulingQueue, clock: FakeClock, room: bool
) -> None:
    """An event on a node whose ``fits`` says the pod now fits there: it leaves its
    backoff for the active queue, however often it was refused; else it waits it out."""
    await refused_three_times(queue, clock, pending("p"))
    asked = []
    queue.move(
        lambda pod, rejected_by: True,
        "AssignedPodDelete",
        lambda pod, rejected_by: asked.append(rejected_by) or room,
    )
    assert asked == [frozenset({"Fit"})]
    assert queue.counts() == (empty_counts(active=1) if room else empty_counts(backoff=1))
    if room:
        assert (await pop_now(queue)).name == "p"
        assert queue.sent_by(pending("p").uid) == "AssignedPodDelete"
        return
    assert await nothing_ready(queue)
    clock.advance(4)
    assert (await pop_now(queue)).name == "p"


async def test_a_pod_waiting_out_its_backoff_is_tried_at_once_after_a_later_event_s_room(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """Sent to backoff by an event that made no room for it, the pod is tried at once when
    another event does (it waited out ten-second backoffs while deletions freed room for
    it); an error's retry never is, nor is an unschedulable pod the event cannot help."""
    await refused_three_times(queue, clock, pending("p"))
    queue.move(lambda pod, rejected_by: True, "NodeTaintChange", lambda pod, rejected_by: False)
    errored, stuck = pending("errored", created=1), pending("stuck", created=2)
    for other in (errored, stuck):
        queue.add(other)
    queue.retry(await pop_now(queue))
    queue.unschedulable(await pop_now(queue), frozenset({"Fit"}))
    assert queue.counts() == empty_counts(backoff=2, unschedulable=1)
    assert await nothing_ready(queue)
    asked: list[str] = []
    queue.move(
        lambda pod, rejected_by: False,
        "AssignedPodDelete",
        lambda pod, rejected_by: asked.append(pod.name) or True,
    )
    assert asked == ["p"]
    assert (await pop_now(queue)).name == "p"
    assert await nothing_ready(queue)


async def test_the_room_an_event_made_is_offered_in_queue_order(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """Two pods it would fit alone: the one ahead in the queue is asked first and takes
    the room (``fits`` counts it); the other waits out its backoff."""
    low, high = pending("low", created=1), pending("high", priority=10, created=2)
    for p in (low, high):
        await refused_three_times(queue, clock, p)
    room = [1]

    def fits(pod: PodInfo, rejected_by: frozenset[str]) -> bool:
        if not room:
            return False
        room.pop()
        return True

    queue.move(lambda pod, rejected_by: True, "AssignedPodDelete", fits)
    assert (await pop_now(queue)).name == "high"
    assert await nothing_ready(queue)


async def test_a_pod_the_room_was_made_for_goes_behind_the_pods_already_active(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """It enters the active queue as if it had just arrived: a pod that arrived before the
    room was made is tried first, one that arrives after it, after."""
    await refused_three_times(queue, clock, pending("big", created=0))
    queue.add(pending("before", created=1))
    clock.advance(0.5)
    queue.move(lambda pod, rejected_by: True, "AssignedPodDelete", lambda pod, rejected_by: True)
    clock.advance(0.5)
    queue.add(pending("after", created=2))
    assert [(await pop_now(queue)).name for _ in range(3)] == ["before", "big", "after"]


@pytest.mark.parametrize(("helps", "room"), [(True, True), (True, False), (False, True)])
async def test_an_event_during_the_attempt_that_made_room_has_the_pod_tried_at_once(
    queue: SchedulingQueue, clock: FakeClock, helps: bool, room: bool
) -> None:
    """The event's verdict is asked when the attempt fails, with the plugins that rejected
    the pod in it: one that may help and made room for it sends it back to be tried at
    once; one that made no room, to wait out its backoff; one its hints say cannot help
    leaves it unschedulable, whatever ``fits`` would say."""
    p = pending("p")
    await refused_three_times(queue, clock, p)
    clock.advance(10)
    queue.requeue(frozenset({p.uid}), "PeriodicCheck")
    popped = await pop_now(queue)
    queue.move(lambda pod, rejected_by: helps, "AssignedPodDelete", lambda pod, rejected_by: room)
    queue.unschedulable(popped, frozenset({"Fit"}))
    if not helps:
        assert queue.counts() == empty_counts(unschedulable=1)
    elif room:
        assert (await pop_now(queue)).name == "p"
    else:
        assert queue.counts() == empty_counts(backoff=1)
        assert await nothing_ready(queue)


async def test_event_during_the_attempt_sends_the_pod_to_backoff(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pending("p"))
    popped = await pop_now(queue)
    queue.move_all()  # e.g. a pod freed its node while we decided
    queue.unschedulable(popped)
    assert queue.counts() == empty_counts(backoff=1)
    clock.advance(1)
    assert (await pop_now(queue)).name == "p"


async def test_an_event_during_the_attempt_that_cannot_help_leaves_it_unschedulable(
    queue: SchedulingQueue,
) -> None:
    """Under load some event arrives during nearly every attempt; were each to send the
    pod back, every refused pod would be tried again after every backoff."""
    queue.add(pending("p"))
    popped = await pop_now(queue)
    asked = []
    queue.move(
        lambda pod, rejected_by: asked.append(rejected_by) or "Fit" not in rejected_by, "NodeAdd"
    )
    queue.unschedulable(popped, frozenset({"Fit"}))
    assert asked == [frozenset({"Fit"})]
    assert queue.counts() == empty_counts(unschedulable=1)


async def test_event_before_the_attempt_does_not_count(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pending("p"))
    queue.move_all()  # nothing in flight yet
    queue.unschedulable(await pop_now(queue))
    assert queue.counts() == empty_counts(unschedulable=1)


async def test_event_in_one_attempt_does_not_leak_into_the_next(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pending("p"))
    first = await pop_now(queue)
    queue.move_all()
    queue.unschedulable(first)  # to backoff
    clock.advance(1)
    queue.unschedulable(await pop_now(queue))  # no event this time
    assert queue.counts() == empty_counts(unschedulable=1)


async def test_gated_pod_is_held_until_added_again_ungated(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    gated = info(pod("gated", "100m", gates=["example.com/wait"]))
    queue.add(gated, gated=True)
    assert queue.counts() == empty_counts(gated=1)
    queue.move_all()  # cluster events do not release gates
    clock.advance(UNSCHEDULABLE_TIMEOUT + 1)
    queue.flush_unschedulable_leftovers()
    assert queue.counts() == empty_counts(gated=1)
    queue.add(gated, gated=True)  # an update that keeps a gate
    assert queue.counts() == empty_counts(gated=1)
    ungated = info(pod("gated", "100m"))
    queue.add(ungated)
    assert queue.counts() == empty_counts(active=1)
    assert (await pop_now(queue)).uid == gated.uid


async def test_gate_added_to_a_waiting_pod_takes_it_out(queue: SchedulingQueue) -> None:
    p = pending("p")
    queue.add(p)
    queue.add(p, gated=True)
    assert queue.counts() == empty_counts(gated=1)


async def test_update_of_an_unschedulable_pod_retries_it(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    p = pending("p")
    queue.add(p)
    queue.unschedulable(await pop_now(queue))
    clock.advance(5)
    queue.add(p)  # e.g. its tolerations were edited
    assert queue.counts() == empty_counts(active=1)


async def test_readding_a_queued_pod_does_not_duplicate_it(queue: SchedulingQueue) -> None:
    p = pending("p")
    queue.add(p)
    queue.add(p)
    assert queue.counts() == empty_counts(active=1)
    await pop_now(queue)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.pop(), timeout=0.05)


async def test_delete_while_in_flight(queue: SchedulingQueue) -> None:
    p = pending("p")
    queue.add(p)
    popped = await pop_now(queue)
    queue.delete(p.uid)
    queue.unschedulable(popped)
    queue.retry(popped)
    assert p.uid not in queue
    assert queue.counts() == empty_counts()


@pytest.mark.parametrize("area", ["active", "backoff", "unschedulable", "gated"])
async def test_delete_from_every_area(queue: SchedulingQueue, area: str) -> None:
    p = pending("p")
    queue.add(p, gated=area == "gated")
    if area in ("backoff", "unschedulable"):
        popped = await pop_now(queue)
        if area == "backoff":
            queue.retry(popped)
        else:
            queue.unschedulable(popped)
    assert queue.counts()[area] == 1
    queue.delete(p.uid)
    assert queue.counts() == empty_counts()
    assert p.uid not in queue


async def test_done_lets_go_of_the_pod(queue: SchedulingQueue) -> None:
    p = pending("p")
    queue.add(p)
    await pop_now(queue)
    assert p.uid in queue
    queue.done(p.uid)
    assert p.uid not in queue
    assert queue.counts() == empty_counts()


async def test_update_while_in_flight_is_kept_for_the_retry(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pending("p", priority=0))
    popped = await pop_now(queue)
    queue.add(pending("p", priority=7))  # updated while the attempt runs
    assert queue.counts() == empty_counts()
    queue.retry(popped)
    clock.advance(1)
    assert (await pop_now(queue)).priority == 7


async def test_leftovers_flushed_after_five_minutes(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    assert UNSCHEDULABLE_TIMEOUT == 300
    queue.add(pending("early"))
    queue.unschedulable(await pop_now(queue))
    clock.advance(120)
    queue.add(pending("late"))
    queue.unschedulable(await pop_now(queue))
    clock.advance(179)  # early has waited 299s
    queue.flush_unschedulable_leftovers()
    assert queue.counts() == empty_counts(unschedulable=2)
    clock.advance(2)  # early 301s, late 181s
    queue.flush_unschedulable_leftovers()
    assert queue.counts() == empty_counts(active=1, unschedulable=1)
    assert (await pop_now(queue)).name == "early"
    clock.advance(120)
    queue.flush_unschedulable_leftovers()
    assert (await pop_now(queue)).name == "late"


async def test_pop_waits_for_an_add() -> None:
    queue = SchedulingQueue()
    waiting = asyncio.create_task(queue.pop())
    await asyncio.sleep(0)
    assert not waiting.done()
    queue.add(pending("p"))
    assert (await asyncio.wait_for(waiting, timeout=1)).name == "p"


async def test_pop_wakes_when_a_backoff_ends() -> None:
    queue = SchedulingQueue(initial_backoff=0.05, max_backoff=0.05)
    queue.add(pending("p"))
    queue.retry(await pop_now(queue))
    assert queue.counts() == empty_counts(backoff=1)
    assert (await asyncio.wait_for(queue.pop(), timeout=2)).name == "p"


def test_counts_by_area(queue: SchedulingQueue) -> None:
    queue.add(pending("a"))
    queue.add(pending("b"))
    queue.add(pending("c"), gated=True)
    assert queue.counts() == empty_counts(active=2, gated=1)


async def test_among_equal_priorities_the_lowest_share_goes_first(clock: FakeClock) -> None:
    """The fair share orders pods of equal priority; priority still comes first, and a pod
    without a share (0) keeps its arrival order."""
    shares = {"busy-quota": 0.9, "idle-quota": 0.1}
    queue = SchedulingQueue(clock=clock, share=lambda p: shares.get(p.namespace, 0.0))
    for p in [
        info(pod("busy", "100m", namespace="busy-quota")),
        info(pod("idle", "100m", namespace="idle-quota")),
        info(pod("urgent-busy", "100m", namespace="busy-quota", priority=10)),
    ]:
        clock.advance(1)
        queue.add(p)
    assert [(await pop_now(queue)).name for _ in range(3)] == ["urgent-busy", "idle", "busy"]


async def test_a_share_that_changed_is_read_again_before_popping(clock: FakeClock) -> None:
    shares = {"a": 0.1, "b": 0.5}
    queue = SchedulingQueue(clock=clock, share=lambda p: shares[p.namespace])
    queue.add(info(pod("a-1", "100m", namespace="a")))
    queue.add(info(pod("b-1", "100m", namespace="b")))
    shares["a"] = 0.9  # a's first pod was placed meanwhile: a now uses most of its runtime
    assert (await pop_now(queue)).name == "b-1"
    assert (await pop_now(queue)).name == "a-1"


async def test_without_shares_the_order_is_kube_schedulers(clock: FakeClock) -> None:
    """Every pod at share 0 (no tree quota anywhere): the same order as with no share."""
    pods = [pending(f"p{i}", priority=i % 3, created=i) for i in range(9)]
    plain = SchedulingQueue(clock=clock)
    shared = SchedulingQueue(clock=clock, share=lambda _p: 0.0)
    for p in pods:
        plain.add(p)
        shared.add(p)
    assert [(await pop_now(plain)).name for _ in pods] == [
        (await pop_now(shared)).name for _ in pods
    ]


async def test_requeue_moves_only_the_named_unschedulable_pods(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    for name in ("a", "b"):
        queue.add(pending(name))
        queue.unschedulable(await pop_now(queue))
    assert queue.is_unschedulable(pending("a").uid)
    clock.advance(20)  # past the backoff
    assert queue.requeue(frozenset({pending("a").uid, "unknown"}), "PeriodicCheck") == 1
    assert (await pop_now(queue)).name == "a"
    assert queue.counts() == empty_counts(unschedulable=1)


async def test_a_pod_is_backed_off_once_unschedulable_with_its_backoff_over(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    a = pending("a")
    queue.add(a)
    assert not queue.backed_off(a.uid), "active, not unschedulable"
    queue.unschedulable(await pop_now(queue))
    assert queue.is_unschedulable(a.uid)
    assert not queue.backed_off(a.uid), "its first backoff (1 s) runs"
    clock.advance(1.0)
    assert queue.backed_off(a.uid)
    assert queue.requeue(frozenset({a.uid}), "PeriodicCheck") == 1
    assert (await pop_now(queue)).name == "a", "sent back with its backoff over: active"


async def test_a_pod_taken_with_its_gang_is_in_flight_as_if_popped(
    queue: SchedulingQueue,
) -> None:
    popped, waiting, gated = pending("a"), pending("b"), pending("c")
    queue.add(popped)
    queue.add(waiting)
    queue.add(gated, gated=True)
    assert await pop_now(queue) is popped
    assert queue.take(waiting.uid)
    assert queue.take(gated.uid)
    assert not queue.take(waiting.uid)  # already in flight
    assert not queue.take("unknown")
    assert queue.counts() == empty_counts()
    queue.unschedulable(waiting)
    queue.done(gated.uid)
    assert queue.counts() == empty_counts(unschedulable=1)


async def test_each_entry_is_counted_with_the_event_that_sent_the_pod(clock: FakeClock) -> None:
    """kube-scheduler's scheduler_queue_incoming_pods_total: what brings pods back to be
    tried, an event while in flight included."""
    seen: list[tuple[str, str]] = []
    queue = SchedulingQueue(1.0, 10.0, clock=clock, incoming=lambda e, q: seen.append((e, q)))
    queue.add(pending("p"))
    queue.unschedulable(await pop_now(queue), frozenset({"Fit"}))
    queue.move(lambda pod, rejected_by: True, "NodeAdd")  # in its backoff still
    clock.advance(1)
    popped = await pop_now(queue)
    queue.move(lambda pod, rejected_by: True, "AssignedPodDelete")  # while in flight
    queue.unschedulable(popped, frozenset({"Fit"}))
    clock.advance(300)
    queue.flush_unschedulable_leftovers()  # in backoff: nothing unschedulable is left
    assert seen == [
        ("PodAdd", "active"),
        ("ScheduleAttemptFailure", "unschedulable"),
        ("NodeAdd", "backoff"),
        ("BackoffComplete", "active"),
        ("AssignedPodDelete", "backoff"),
    ]
    await pop_now(queue)
    assert seen[-1] == ("BackoffComplete", "active")


async def test_where_says_the_area_attempts_and_pods_ahead(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    """What a person asking about a pod with no decision yet is told: never tried and
    behind others in the active queue reads differently from tried and waiting."""
    for name, priority in (("a", 10), ("b", 0), ("c", 0)):
        queue.add(pending(name, priority=priority))
        clock.advance(1)
    assert queue.where("default", "c") == {
        "queue": "active",
        "attempts": 0,
        "waitingSeconds": 1.0,
        "sentBy": "PodAdd",
        "ahead": 2,
    }
    first = await pop_now(queue)
    assert queue.where("default", first.name) == {
        "queue": "in flight",
        "attempts": 0,
        "waitingSeconds": 3.0,
        "sentBy": "PodAdd",
    }
    queue.unschedulable(first)
    assert queue.where("default", "a") == {
        "queue": "unschedulable",
        "attempts": 1,
        "waitingSeconds": 0.0,
        "sentBy": "PodAdd",
    }
    clock.advance(1)
    queue.move_all("NodeAdd")
    assert queue.sent_by(first.uid) == "NodeAdd"
    await pop_now(queue)  # its backoff is over: sent back, it is active
    assert queue.sent_by(first.uid) == "NodeAdd", "what sent it back, not BackoffComplete"
    assert queue.where("default", "c")["ahead"] == 1  # type: ignore[index]
    assert queue.where("default", "gone") is None


async def test_the_events_seen_in_flight_are_asked_newest_first(queue: SchedulingQueue) -> None:
    """A preemptor in flight while its victims are deleted sees hundreds of deletions on
    other nodes, then its own victims' last: the newest is asked first, and alone, and the
    room it made takes the preemptor at once."""
    queue.add(pending("preemptor"))
    popped = await pop_now(queue)
    asked: list[int] = []

    def on_node(i: int) -> Callable[[PodInfo, frozenset[str]], bool]:
        def helps(pod: PodInfo, rejected_by: frozenset[str]) -> bool:
            asked.append(i)
            return i == 499  # its own node's victim, deleted last

        return helps

    for i in range(500):
        queue.move(on_node(i), "AssignedPodDelete", on_node(i))
    queue.unschedulable(popped, frozenset({"NodeResourcesFit"}))
    assert asked == [499, 499]  # helps, then fits
    assert (await pop_now(queue)).uid == popped.uid
