"""The health/metrics server over a real HTTP round trip on loopback, and metric names,
labels and buckets exactly as kube-scheduler exposes them (pkg/scheduler/metrics)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from berth.health import DEFAULT_HOST, DEFAULT_PORT, HealthServer
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.decisions.ledger import DecisionLedger
from berth.scheduler.metrics import SchedulerMetrics

PROFILE = "default-scheduler"


def kube_scheduler_buckets(start: float, factor: float, count: int) -> list[float]:
    """The bucket bounds kube-scheduler declares, written out independently of the code."""
    return [start * factor**i for i in range(count)] + [math.inf]


# name -> (type, labels besides "le"/"quantile", bucket upper bounds or None)
KUBE_SCHEDULER = {
    "scheduler_schedule_attempts": ("counter", {"result", "profile"}, None),
    "scheduler_scheduling_attempt_duration_seconds": (
        "histogram",
        {"result", "profile"},
        kube_scheduler_buckets(0.001, 2, 15),
    ),
    "scheduler_pending_pods": ("gauge", {"queue"}, None),
    "scheduler_queue_incoming_pods": ("counter", {"event", "queue"}, None),
    "scheduler_preemption_attempts": ("counter", set(), None),
    "scheduler_preemption_victims": ("histogram", set(), kube_scheduler_buckets(1, 2, 7)),
    "scheduler_pod_scheduling_sli_duration_seconds": (
        "histogram",
        {"attempts"},
        kube_scheduler_buckets(0.01, 2, 20),
    ),
    # kube-scheduler 1.36's pod group cycle (GenericWorkload).
    "scheduler_podgroup_schedule_attempts": ("counter", {"result", "profile"}, None),
    "scheduler_podgroup_scheduling_attempt_duration_seconds": (
        "histogram",
        {"result", "profile"},
        kube_scheduler_buckets(0.001, 2, 15),
    ),
    "scheduler_podgroup_scheduling_algorithm_duration_seconds": (
        "histogram",
        set(),
        kube_scheduler_buckets(0.001, 2, 15),
    ),
}


@pytest.fixture
async def server() -> AsyncIterator[HealthServer]:
    health = HealthServer("127.0.0.1", 0)
    await health.start()
    try:
        yield health
    finally:
        await health.stop()


async def get(server: HealthServer, path: str) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}{path}") as response,
    ):
        return response.status, await response.text(), response.headers["Content-Type"]


def samples(exposition: str) -> dict[str, list[Sample]]:
    return {family.name: family.samples for family in text_string_to_metric_families(exposition)}


def value(found: list[Sample], name: str, **labels: str) -> float:
    matches = [s.value for s in found if s.name == name and s.labels == labels]
    assert len(matches) == 1, (name, labels, found)
    return matches[0]


def observed_metrics() -> SchedulerMetrics:
    metrics = SchedulerMetrics(profiles=[PROFILE])
    metrics.observe_attempt("scheduled", PROFILE, 0.003)
    metrics.observe_attempt("scheduled", PROFILE, 0.02)
    metrics.observe_attempt("unschedulable", PROFILE, 0.5)
    metrics.set_pending("active", 7)
    metrics.set_pending("gated", 2)
    metrics.observe_incoming("NodeAdd", "active")
    metrics.observe_incoming("NodeAdd", "active")
    metrics.observe_incoming("ScheduleAttemptFailure", "unschedulable")
    metrics.observe_preemption(3)
    metrics.observe_preemption(None)
    metrics.observe_scheduled(attempts=2, seconds=1.5)
    metrics.observe_scheduled(attempts=40, seconds=120.0)
    metrics.observe_group_attempt("scheduled", PROFILE, 0.01, 0.005)
    return metrics


def test_default_address_is_all_interfaces_on_10251() -> None:
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("0.0.0.0", 10251)
    assert HealthServer().port == 10251


async def test_port_is_the_one_the_os_chose(server: HealthServer) -> None:
    assert server.port > 0
    status, body, _ = await get(server, "/healthz")
    assert (status, body) == (200, "ok")


async def test_readiness_flips_with_its_check(server: HealthServer) -> None:
    synced = False
    server.add_readiness("informers-synced", lambda: synced)
    server.add_readiness("always", lambda: True)

    status, body, _ = await get(server, "/readyz")
    assert status == 503
    assert "[-]informers-synced failed" in body
    assert "[+]always ok" in body

    synced = True
    assert (await get(server, "/readyz"))[:2] == (200, "ok")

    synced = False
    assert (await get(server, "/readyz"))[0] == 503


async def test_liveness_failure_is_500_naming_the_failing_check(server: HealthServer) -> None:
    server.add_liveness("event-loop", lambda: True)
    server.add_liveness("leader-election", lambda: False)

    status, body, _ = await get(server, "/healthz")
    assert status == 500
    assert "[-]leader-election failed" in body
    assert "[+]event-loop ok" in body
    assert "[-]event-loop" not in body
    # Readiness is separate: a failed liveness check does not show up there.
    assert (await get(server, "/readyz"))[:2] == (200, "ok")


async def test_a_check_that_raises_fails(server: HealthServer) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    server.add_liveness("broken", broken)
    status, body, _ = await get(server, "/healthz")
    assert status == 500
    assert "[-]broken failed" in body


async def test_verbose_lists_passing_checks(server: HealthServer) -> None:
    server.add_readiness("informers-synced", lambda: True)
    status, body, _ = await get(server, "/readyz?verbose")
    assert status == 200
    assert "[+]informers-synced ok" in body


async def test_metrics_exposes_the_observations_with_their_labels(server: HealthServer) -> None:
    server.add_registry(observed_metrics().registry)

    status, body, content_type = await get(server, "/metrics")
    assert status == 200
    assert content_type == CONTENT_TYPE_LATEST
    found = samples(body)

    attempts = found["scheduler_schedule_attempts"]
    total = "scheduler_schedule_attempts_total"
    assert value(attempts, total, result="scheduled", profile=PROFILE) == 2
    assert value(attempts, total, result="unschedulable", profile=PROFILE) == 1
    # Declared profiles start at 0 so that rate() works before the first error.
    assert value(attempts, total, result="error", profile=PROFILE) == 0

    duration = found["scheduler_scheduling_attempt_duration_seconds"]
    bucket = "scheduler_scheduling_attempt_duration_seconds_bucket"
    labels = {"result": "scheduled", "profile": PROFILE}
    assert value(duration, bucket, le="0.002", **labels) == 0
    assert value(duration, bucket, le="0.004", **labels) == 1
    assert value(duration, bucket, le="0.032", **labels) == 2
    assert value(duration, "scheduler_scheduling_attempt_duration_seconds_count", **labels) == 2

    pending = found["scheduler_pending_pods"]
    assert value(pending, "scheduler_pending_pods", queue="active") == 7
    assert value(pending, "scheduler_pending_pods", queue="gated") == 2
    assert value(pending, "scheduler_pending_pods", queue="backoff") == 0
    assert value(pending, "scheduler_pending_pods", queue="unschedulable") == 0

    incoming = found["scheduler_queue_incoming_pods"]
    total = "scheduler_queue_incoming_pods_total"
    assert value(incoming, total, event="NodeAdd", queue="active") == 2
    assert value(incoming, total, event="ScheduleAttemptFailure", queue="unschedulable") == 1

    preemptions = found["scheduler_preemption_attempts"]
    assert value(preemptions, "scheduler_preemption_attempts_total") == 2
    victims = found["scheduler_preemption_victims"]
    assert value(victims, "scheduler_preemption_victims_count") == 1
    assert value(victims, "scheduler_preemption_victims_sum") == 3
    assert value(victims, "scheduler_preemption_victims_bucket", le="2.0") == 0
    assert value(victims, "scheduler_preemption_victims_bucket", le="4.0") == 1

    sli = found["scheduler_pod_scheduling_sli_duration_seconds"]
    count = "scheduler_pod_scheduling_sli_duration_seconds_count"
    assert value(sli, count, attempts="2") == 1
    assert value(sli, count, attempts="15+") == 1


async def test_metric_names_labels_and_buckets_match_kube_scheduler(
    server: HealthServer,
) -> None:
    server.add_registry(observed_metrics().registry)
    body = (await get(server, "/metrics"))[1]

    families = {family.name: family for family in text_string_to_metric_families(body)}
    assert set(families) == set(KUBE_SCHEDULER), "no more and no fewer metrics"
    for name, (kind, labels, buckets) in KUBE_SCHEDULER.items():
        family = families[name]
        assert family.type == kind, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample)
        if buckets is not None:
            bounds = sorted(
                {float(s.labels["le"]) for s in family.samples if s.name == f"{name}_bucket"}
            )
            assert bounds == pytest.approx(buckets), name
    # The exposition's own spelling, which is what dashboards and alerts match on.
    for line in (
        "# TYPE scheduler_schedule_attempts_total counter",
        "# TYPE scheduler_scheduling_attempt_duration_seconds histogram",
        "# TYPE scheduler_pending_pods gauge",
        "# TYPE scheduler_preemption_attempts_total counter",
        "# TYPE scheduler_preemption_victims histogram",
        "# TYPE scheduler_pod_scheduling_sli_duration_seconds histogram",
    ):
        assert line in body.splitlines()
    assert "_created" not in body, "kube-scheduler exposes no *_created series"


async def test_several_registries_are_served_together(server: HealthServer) -> None:
    scheduler = SchedulerMetrics()
    scheduler.set_pending("active", 4)
    operators = CollectorRegistry()
    Counter("berth_reconciles_total", "Reconciles.", registry=operators).inc()
    server.add_registry(scheduler.registry)
    server.add_registry(operators)

    body = (await get(server, "/metrics"))[1]
    found = samples(body)
    assert value(found["scheduler_pending_pods"], "scheduler_pending_pods", queue="active") == 4
    assert value(found["berth_reconciles"], "berth_reconciles_total") == 1


def test_instances_have_registries_of_their_own() -> None:
    first, second = SchedulerMetrics(), SchedulerMetrics()
    first.set_pending("active", 1)
    second.set_pending("active", 9)
    assert first.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 1
    assert second.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 9


def test_watch_delay_is_berths_own_and_counted_by_kind_once_watching() -> None:
    metrics = SchedulerMetrics()
    metrics.observe_watch_delay("Pod", 3.0)  # before watch(): not a metric yet, dropped
    metrics.watch(ClusterView(), DecisionLedger())
    metrics.observe_watch_delay("Pod", 0.2)
    metrics.observe_watch_delay("Pod", 3.0)
    metrics.observe_watch_delay("Node", 40.0)

    def bucket(kind: str, le: str) -> float | None:
        return metrics.registry.get_sample_value(
            "berth_scheduler_watch_delay_seconds_bucket", {"kind": kind, "le": le}
        )

    assert (bucket("Pod", "0.5"), bucket("Pod", "2.0"), bucket("Pod", "4.0")) == (1, 1, 2)
    assert (bucket("Node", "32.0"), bucket("Node", "64.0")) == (0, 1)


def test_unknown_result_or_queue_is_refused() -> None:
    metrics = SchedulerMetrics()
    with pytest.raises(ValueError, match="result"):
        metrics.observe_attempt("failed", PROFILE, 0.1)
    with pytest.raises(ValueError, match="queue"):
        metrics.set_pending("waiting", 1)


async def test_stop_closes_the_port() -> None:
    health = HealthServer("127.0.0.1", 0)
    await health.start()
    assert (await get(health, "/healthz"))[0] == 200
    await health.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(health, "/healthz")
