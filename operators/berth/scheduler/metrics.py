"""Scheduler metrics under kube-scheduler's names.

The names, labels and buckets are kube-scheduler's (pkg/scheduler/metrics), so the
dashboards and alerts people already have for kube-scheduler work for Berth unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

ATTEMPT_RESULTS = ("scheduled", "unschedulable", "error")
PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated")
# kube-scheduler caps the attempts label so the SLI histogram's cardinality stays bounded.
MAX_ATTEMPTS_LABEL = 15


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Upper bounds ``start * factor**i`` for i below ``count``, as Prometheus' Go client."""
    return tuple(start * factor**i for i in range(count))


# 1ms to about 16s: one attempt is the scheduling algorithm plus binding.
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
# 10ms to about 88 minutes: end to end, a pod may wait through many attempts.
SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
# 1 to 64 victims; more than 64 is rare enough for the +Inf bucket.
VICTIM_BUCKETS = exponential_buckets(1, 2, 7)


def attempts_label(attempts: int) -> str:
    """The SLI histogram's ``attempts`` label: the count, or "15+" from fifteen on."""
    return f"{MAX_ATTEMPTS_LABEL}+" if attempts >= MAX_ATTEMPTS_LABEL else str(attempts)


class SchedulerMetrics:
    """The scheduler's metrics, in a registry of their own.

    A registry per instance (not prometheus_client's global one) lets tests, and a process
    running several schedulers, create as many as they need without name clashes.
    """

    def __init__(self, profiles: Iterable[str] = ()) -> None:
        # kube-scheduler exposes no ``*_created`` series; without this every counter and
        # histogram would gain one. The switch is process-wide and only drops those series.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts_total",
            "Scheduling attempts by result: 'scheduled'; 'unschedulable' when no node fits "
            "the pod; 'error' when the scheduler itself failed.",
            ["result", "profile"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Seconds one scheduling attempt took, filtering and scoring through binding.",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=self.registry,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Pods waiting to be scheduled, by queue: 'active' (ready for an attempt), "
            "'backoff' (waiting out a backoff after a failure), 'unschedulable' (tried, "
            "waiting for a cluster change), 'gated' (scheduling gates keep them from any "
            "attempt).",
            ["queue"],
            registry=self.registry,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts_total",
            "Preemption attempts made for pods that did not fit any node.",
            registry=self.registry,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Pods chosen for eviction by each preemption that found a node.",
            buckets=VICTIM_BUCKETS,
            registry=self.registry,
        )
        self.pod_scheduling_sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "Seconds from a pod entering the scheduling queue to its being scheduled, "
            "across all its attempts (capped label: '15+').",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=self.registry,
        )
        # Series that exist from the start read 0 instead of being absent, so rate() and
        # alerts on them work before the first event.
        for queue in PENDING_QUEUES:
            self.pending_pods.labels(queue=queue).set(0)
        for profile in profiles:
            for result in ATTEMPT_RESULTS:
                self.schedule_attempts.labels(result=result, profile=profile)

    def observe_attempt(self, result: str, profile: str, seconds: float) -> None:
        """Count one scheduling attempt of a pod and record how long it took."""
        if result not in ATTEMPT_RESULTS:
            raise ValueError(f"result must be one of {ATTEMPT_RESULTS}, not {result!r}")
        self.schedule_attempts.labels(result=result, profile=profile).inc()
        self.attempt_duration.labels(result=result, profile=profile).observe(seconds)

    def set_pending(self, queue: str, count: int) -> None:
        """Set how many pods wait in one of the scheduling queues."""
        if queue not in PENDING_QUEUES:
            raise ValueError(f"queue must be one of {PENDING_QUEUES}, not {queue!r}")
        self.pending_pods.labels(queue=queue).set(count)

    def observe_preemption(self, victims: int | None) -> None:
        """Count one preemption attempt; record its victims when a node was chosen.

        As in kube-scheduler, an attempt that finds no candidate node (``None``) moves only
        the attempts counter, so the victims histogram describes actual preemptions.
        """
        self.preemption_attempts.inc()
        if victims is not None:
            self.preemption_victims.observe(victims)

    def observe_scheduled(self, attempts: int, seconds: float) -> None:
        """Record a pod's time from entering the queue to being scheduled."""
        self.pod_scheduling_sli_duration.labels(attempts=attempts_label(attempts)).observe(seconds)
