"""The scheduler's writes: reservation status over a stale version (retried over what is
stored when the decision still holds, refused when the reservation ended meanwhile), and
decisions before explanations in the shared rate limit."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from berth.kube.write import Conflict
from berth.scheduler.placement import not_ended
from berth.scheduler.writer import TokenBucket, Writer
from tests.unit.scheduler_fixtures import info, pod

Json = dict[str, Any]


class StoredReservation:
    """One reservation as the API server keeps it: a patch naming another version is
    refused with 409."""

    def __init__(self, phase: str) -> None:
        self.obj: Json = {"metadata": {"name": "r", "resourceVersion": "7"}, "status": {}}
        self.obj["status"]["phase"] = phase
        self.patches: list[tuple[Json, str | None]] = []

    async def patch_status(
        self, kind: Any, name: str, status: Json, *, resource_version: str | None = None
    ) -> Json:
        if resource_version not in (None, self.obj["metadata"]["resourceVersion"]):
            raise Conflict(status=409, reason="Conflict")
        self.patches.append((status, resource_version))
        self.obj["status"].update(status)
        return self.obj

    async def read(self, kind: Any, name: str, *, namespace: str | None = None) -> Json:
        return self.obj


def writer_over(stored: StoredReservation) -> Writer:
    writer = Writer(cast(ApiClient, None), "test")
    writer.api = cast(Any, stored)
    return writer


async def test_a_placement_over_an_operator_write_is_made_over_the_stored_version() -> None:
    """The operator wrote Pending after the scheduler read the reservation: the placement
    still holds, and is written over version 7."""
    stored = StoredReservation("Pending")
    placed = {"phase": "Available", "nodeName": "n1"}
    await writer_over(stored).reservation_status("r", placed, "5", still=not_ended)
    assert stored.patches == [(placed, "7")]


async def test_a_placement_of_a_reservation_ended_meanwhile_is_refused() -> None:
    stored = StoredReservation("Failed")
    with pytest.raises(Conflict):
        await writer_over(stored).reservation_status(
            "r", {"phase": "Available"}, "5", still=not_ended
        )
    assert stored.patches == []
    assert stored.obj["status"]["phase"] == "Failed"


async def test_a_placement_is_retried_while_the_operator_keeps_writing() -> None:
    """The operator wrote twice after the scheduler read a new reservation (its Pending
    status, then again between the scheduler's read and its patch): a single retry left
    the reservation Pending and unplaced until its ttl; it is retried as client-go's
    RetryOnConflict does, and written over the version stored last."""
    stored = StoredReservation("Pending")
    reads = 0

    async def read(kind: Any, name: str, *, namespace: str | None = None) -> Json:
        nonlocal reads
        reads += 1
        answer = {**stored.obj, "metadata": dict(stored.obj["metadata"])}
        if reads < 3:  # the operator writes again right after this read
            stored.obj["metadata"]["resourceVersion"] = str(7 + reads)
        return answer

    stored.read = read  # type: ignore[method-assign]
    placed = {"phase": "Waiting", "nodeName": "n1"}
    await writer_over(stored).reservation_status("r", placed, "5", still=not_ended)
    assert stored.patches == [(placed, "9")]
    assert reads == 3


async def test_a_decision_takes_the_next_token_before_explanations_queued_earlier() -> None:
    """The budget is spent; ten condition writes wait, then a binding asks: the binding
    has the next token, and the conditions follow in their order."""
    bucket = TokenBucket(qps=200, burst=1)
    await bucket.take()
    order: list[str] = []

    async def take(name: str, urgent: bool) -> None:
        await bucket.take(urgent=urgent)
        order.append(name)

    explaining = [asyncio.create_task(take(f"c{i}", False)) for i in range(10)]
    await asyncio.sleep(0)
    await take("bind", True)
    await asyncio.gather(*explaining)
    assert order == ["bind", *(f"c{i}" for i in range(10))]


async def test_a_condition_already_stored_by_an_earlier_scheduler_is_not_written_again() -> None:
    writes: list[Json] = []

    class Stored:
        async def patch_status(self, kind: Any, name: str, status: Json, **_: Any) -> None:
            writes.append(status)

    writer = Writer(cast(ApiClient, None), "test")
    writer.api = cast(Any, Stored())
    stored = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/3 nodes are available."}  # fmt: skip
    raw = pod("p", "1", "1Gi", conditions=[stored])
    await writer.unschedulable(info(raw), "0/3 nodes are available.")
    assert writes == []
    await writer.unschedulable(info(raw), "0/4 nodes are available.")
    assert [w["conditions"][0]["message"] for w in writes] == ["0/4 nodes are available."]


class StoredPod:
    """One pod as the API server keeps it: the binding sets PodScheduled=True, a status
    patch replaces the condition of its type, ``delay`` seconds after it was sent (a slow
    request: one sent later may be applied before it)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.node = ""
        self.condition: Json = {}
        self.requests: list[str] = []

    async def create_subresource(
        self, kind: Any, name: str, sub: str, body: Json, **_: Any
    ) -> None:
        self.requests.append("bind")
        self.node = body["target"]["name"]
        self.condition = {"type": "PodScheduled", "status": "True"}

    async def patch_status(self, kind: Any, name: str, status: Json, **_: Any) -> None:
        self.requests.append("condition")
        await asyncio.sleep(self.delay)
        self.condition = status["conditions"][0]


def writer_of(stored: StoredPod, burst: int = 100) -> Writer:
    writer = Writer(cast(ApiClient, None), "test", qps=200, burst=burst)
    writer.api = cast(Any, stored)
    return writer


async def test_an_explanation_that_waited_behind_the_pods_binding_is_not_written() -> None:
    """The budget is spent; the pod's unschedulable condition waits for a token, the pod
    is retried and bound meanwhile (decisions first): the bound pod is not then marked
    Unschedulable."""
    stored = StoredPod()
    writer = writer_of(stored, burst=1)
    await writer.bucket.take()
    p = info(pod("p", "1", "1Gi"))
    explaining = asyncio.create_task(writer.unschedulable(p, "0/3 nodes are available."))
    await asyncio.sleep(0)
    await writer.bind(p, "n1")
    await explaining
    assert stored.requests == ["bind"]
    assert (stored.node, stored.condition["status"]) == ("n1", "True")


async def test_a_binding_waits_for_its_pods_explanation_already_on_the_wire() -> None:
    """The condition was sent before the binding was asked for and is slow to land: the
    binding is sent once it has, so the API server applies them in that order."""
    stored = StoredPod(delay=0.05)
    writer = writer_of(stored)
    p = info(pod("p", "1", "1Gi"))
    explaining = asyncio.create_task(writer.unschedulable(p, "0/3 nodes are available."))
    await asyncio.sleep(0.01)
    assert stored.requests == ["condition"]
    await writer.bind(p, "n1")
    await explaining
    assert stored.requests == ["condition", "bind"]
    assert stored.condition["status"] == "True"


class SlowFirst(StoredPod):
    """The pod's first condition write is slow to land, the later ones are not."""

    def __init__(self) -> None:
        super().__init__()
        self.delays = [0.05]

    async def patch_status(self, kind: Any, name: str, status: Json, **_: Any) -> None:
        self.requests.append("condition")
        await asyncio.sleep(self.delays.pop(0) if self.delays else 0)
        self.condition = status["conditions"][0]


async def test_a_binding_waits_for_every_explanation_of_its_pod_on_the_wire() -> None:
    """A gang member explained twice in a moment (1 of 4 members exist, then 3 of 4) and
    placed right after, the first write slow: the first must not land over the binding.
    The second waits for the first and is then dropped for the binding."""
    stored = SlowFirst()
    writer = writer_of(stored)
    p = info(pod("p", "1", "1Gi"))
    first = asyncio.create_task(writer.unschedulable(p, "1 of 4 exist"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(writer.unschedulable(p, "3 of 4 exist"))
    await asyncio.sleep(0.01)
    await writer.bind(p, "n1")
    await asyncio.gather(first, second)
    assert stored.requests == ["condition", "bind"]
    assert (stored.node, stored.condition["status"]) == ("n1", "True")


async def test_a_pods_later_explanation_lands_after_its_earlier_one() -> None:
    stored = SlowFirst()
    writer = writer_of(stored)
    p = info(pod("p", "1", "1Gi"))
    first = asyncio.create_task(writer.unschedulable(p, "1 of 4 exist"))
    await asyncio.sleep(0.01)
    await writer.unschedulable(p, "3 of 4 exist")
    await first
    assert stored.condition["message"] == "3 of 4 exist"


async def test_a_pod_whose_binding_failed_is_explained_again() -> None:
    class Refusing(StoredPod):
        async def create_subresource(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("node gone")

    stored = Refusing()
    writer = writer_of(stored)
    p = info(pod("p", "1", "1Gi"))
    with pytest.raises(RuntimeError):
        await writer.bind(p, "n1")
    await writer.unschedulable(p, "0/3 nodes are available.")
    assert stored.condition["status"] == "False"


async def test_of_explanations_waiting_for_a_token_only_the_pods_latest_is_written() -> None:
    """The budget is spent while a pod is refused three times and another pod is refused
    and then deleted: once tokens come, the first pod's latest explanation is written, the
    two before it and the deleted pod's are dropped (they would land late, saying what the
    latest says again, or on a pod that is gone)."""
    written: list[tuple[str, str]] = []

    class Stored:
        async def patch_status(self, kind: Any, name: str, status: Json, **_: Any) -> None:
            written.append((name, status["conditions"][0]["message"]))

    writer = Writer(cast(ApiClient, None), "test", qps=200, burst=1)
    writer.api = cast(Any, Stored())
    await writer.bucket.take()
    p, gone = info(pod("p", "1", "1Gi")), info(pod("gone", "1", "1Gi"))
    waiting = [
        asyncio.create_task(writer.unschedulable(p, f"0/{n} nodes are available."))
        for n in (3, 4, 5)
    ]
    waiting.append(asyncio.create_task(writer.unschedulable(gone, "0/3 nodes are available.")))
    await asyncio.sleep(0)
    writer.forget(gone.uid)
    await asyncio.gather(*waiting)
    assert written == [("p", "0/5 nodes are available.")]


class SlowEvents:
    """An API server that takes 50 ms to store each event, counting those in flight."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.created = 0
        self.in_flight = 0
        self.most = 0
        self.all_in = asyncio.Event()

    async def create(self, kind: Any, body: Json, *, namespace: str | None = None) -> Json:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        self.created += 1
        if self.created == self.expected:
            self.all_in.set()
        return body


async def test_events_are_written_many_at_once_so_a_slow_api_server_leaves_none_behind() -> None:
    """Two at a time, a busy API server left thousands of events waiting (minutes late,
    or dropped); kube-scheduler writes each in its own goroutine."""
    api = SlowEvents(200)
    writer = Writer(cast(ApiClient, None), "test", qps=5000, burst=5000)
    writer.api = cast(Any, api)
    for i in range(200):
        writer.event(pod(f"p{i}", "1"), "Pod", "Scheduled", "assigned")
    stop = asyncio.Event()
    sending = asyncio.create_task(writer.send_events(stop))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(api.all_in.wait(), timeout=5)
    stop.set()
    await sending
    assert api.created == 200
    assert api.most >= 16
