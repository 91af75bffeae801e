"""SchedulingGates: a gated pod is held before the queue."""

from __future__ import annotations

from berth.scheduler.cache.podinfo import PodInfo
from tests.unit.scheduler_fixtures import (
    info,
    make_env,
    pod,
)

Mi = 1024**2
Gi = 1024**3


def test_scheduling_gates_hold_the_pod_before_the_queue() -> None:
    env = make_env()
    (gate,) = env.plugins.at("preEnqueue")
    gated: PodInfo = info(pod("p", "1", gates=["example.com/quota"]))
    status = gate.pre_enqueue(gated)
    assert not status.ok
    assert "example.com/quota" in status.message
    assert gate.pre_enqueue(info(pod("p", "1"))).ok
