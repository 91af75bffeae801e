"""The liveness check that means something (a loop that stops going round while work
waits fails it, an idle loop does not) and the write fence of the API client (a write
from a leader's work goes out only while its lease is fresh; reads always do)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration, CoreV1Api

from berth.health import Heartbeat, Progress
from berth.kube.client import FencedApiClient, NotLeading, api_client, fence_writes
from berth.operators.worker import Worker, liveness


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr("berth.health.time.monotonic", lambda: self.now)


def test_an_idle_loop_is_alive_however_long_it_idles(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    waiting = [False]
    heartbeat = Heartbeat()
    check = Progress(heartbeat, lambda: waiting[0], stall_after=60)
    clock.now += 3600
    assert check()
    waiting[0] = True  # work arrives after an hour's idling: the clock starts now
    assert check()
    clock.now += 59
    assert check()


def test_a_loop_that_stops_going_round_while_work_waits_is_dead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    waiting = [True]
    heartbeat = Heartbeat()
    check = Progress(heartbeat, lambda: waiting[0], stall_after=60)
    for _ in range(10):  # going round: alive
        clock.now += 30
        heartbeat.beat()
        assert check()
    clock.now += 59
    assert check()
    clock.now += 2
    assert not check(), "work waited 61 s with no beat"
    heartbeat.beat()
    assert check(), "a beat revives it"
    clock.now += 61
    waiting[0] = False
    assert check(), "nothing waits: nothing to be late for"


async def test_an_operator_worker_stuck_in_a_decision_fails_the_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that finishes decisions is alive, an idle one too; one whose reconcile
    hangs on an await while its keys wait fails after the stall time, and recovers once
    it finishes a decision."""
    clock = Clock(monkeypatch)
    release = asyncio.Event()
    decided: list[str] = []

    async def reconcile(key: str) -> None:
        if key == "hangs":
            await release.wait()
        decided.append(key)

    worker = Worker("thing", reconcile)
    check = liveness(stall_after=60)
    worker.start()
    try:
        worker.mark("a")
        for _ in range(100):
            if decided:
                break
            await asyncio.sleep(0)
        assert decided == ["a"]
        clock.now += 3600
        assert check(), "idle: nothing waits"
        worker.mark("hangs")
        await asyncio.sleep(0)
        worker.mark("b")  # waits behind the stuck decision
        assert check()
        clock.now += 59
        assert check()
        clock.now += 2
        assert not check(), "work waited 61 s with no decision finished"
        release.set()
        for _ in range(100):
            if decided[-1:] == ["b"]:
                break
            await asyncio.sleep(0)
        assert decided == ["a", "hangs", "b"]
        assert check(), "deciding again: alive"
    finally:
        await worker.stop()
    clock.now += 3600
    assert check(), "a stopped worker is not watched"


class Recorder:
    """Stands in for the HTTP layer: records what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __getattr__(self, method: str) -> Any:
        async def send(url: str, **_: Any) -> Any:
            self.sent.append(method)
            raise RuntimeError("recorded, not sent")

        return send


async def test_writes_go_out_only_while_the_lease_is_fresh() -> None:
    client = api_client(Configuration(host="http://127.0.0.1:9"))
    assert isinstance(client, FencedApiClient)
    recorder = Recorder()
    http = client.rest_client
    client.rest_client = recorder  # type: ignore[assignment]
    core = CoreV1Api(client)
    fresh = [True]

    async def leader_work() -> None:
        fence_writes(lambda: fresh[0])

        async def write() -> None:
            with pytest.raises(RuntimeError, match="recorded"):
                await core.delete_namespaced_pod("p", "ns")

        await write()
        fresh[0] = False
        with pytest.raises(NotLeading):
            await core.delete_namespaced_pod("p", "ns")
        # A task the work starts is fenced as well.
        with pytest.raises(NotLeading):
            await asyncio.create_task(core.create_namespaced_pod("ns", {}))
        with pytest.raises(RuntimeError, match="recorded"):
            await core.read_namespaced_pod("p", "ns")  # reads are never fenced

    await asyncio.create_task(leader_work())
    assert recorder.sent == ["DELETE", "GET"]
    # Outside the leader's work (the elector renewing its lease) nothing is fenced.
    with pytest.raises(RuntimeError, match="recorded"):
        await core.delete_namespaced_pod("p", "ns")
    assert recorder.sent == ["DELETE", "GET", "DELETE"]
    client.rest_client = http
    await client.close()
