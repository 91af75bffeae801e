"""Migration metrics: jobs started, succeeded and failed (by reason)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["MigrationMetrics"]


class MigrationMetrics:
    """Counters in a registry of their own, served with the others by ``berth run``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.started = Counter(
            "berth_pod_migrations_started_total",
            "PodMigrationJobs that passed arbitration and started, by mode.",
            ["mode"],
            registry=self.registry,
        )
        self.succeeded = Counter(
            "berth_pod_migrations_succeeded_total",
            "PodMigrationJobs that moved (or, EvictDirectly, evicted) their pod, by mode.",
            ["mode"],
            registry=self.registry,
        )
        self.failed = Counter(
            "berth_pod_migrations_failed_total",
            "PodMigrationJobs that failed, by Koordinator's reason (Timeout, FailedEvict...).",
            ["reason"],
            registry=self.registry,
        )
