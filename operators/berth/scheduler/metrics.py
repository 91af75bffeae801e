"""Scheduler metrics under kube-scheduler's names, and Berth's features under ``berth_``.

The names, labels and buckets of the first are kube-scheduler's (pkg/scheduler/metrics), so
the dashboards and alerts people already have for kube-scheduler work for Berth unchanged.
The feature metrics (quotas, reservations, NodeMetric reports, the NUMA pending ledger,
pods by the plugin keeping them pending) are read from the scheduler's view at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from berth.api.base import epoch_seconds
from berth.podresources import CPU, Resources, resource_list

if TYPE_CHECKING:
    from berth.scheduler.cache.view import ClusterView
    from berth.scheduler.decisions.ledger import DecisionLedger

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
# Half a second to 128 s: a view seconds behind wastes attempts on room already taken.
WATCH_DELAY_BUCKETS = exponential_buckets(0.5, 2, 9)


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
            "Seconds one scheduling attempt took: filtering, scoring, assume and reserve (the "
            "binding runs after it, in its own task).",
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
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods_total",
            "Pods entering a scheduling queue ('active', 'backoff', 'unschedulable'), by "
            "the event that sent them: 'PodAdd', 'ScheduleAttemptFailure', "
            "'BackoffComplete', 'UnschedulableTimeout', a cluster event ('NodeAdd', "
            "'AssignedPodDelete', ...), or Berth's own ('NominationDropped', "
            "'AssumedPodForget', '<plugin>PeriodicCheck').",
            ["event", "queue"],
            registry=self.registry,
        )
        self._incoming: dict[tuple[str, str], Counter] = {}
        self.podgroup_attempts = Counter(
            "scheduler_podgroup_schedule_attempts_total",
            "Attempts to place a pod group (a gang) whole: 'scheduled' when at least its "
            "minMember were placed together, 'unschedulable' when the gang waits.",
            ["result", "profile"],
            registry=self.registry,
        )
        self.podgroup_attempt_duration = Histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Seconds one attempt to place a pod group took, its members' binding aside.",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=self.registry,
        )
        self.podgroup_algorithm_duration = Histogram(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            "Seconds the group cycle took to decide a pod group: quorum, quota, and placing "
            "its members on one snapshot.",
            buckets=ATTEMPT_BUCKETS,
            registry=self.registry,
        )
        # Berth's own, registered by ``watch`` with the feature metrics.
        self.periodic_retries: Counter | None = None
        self.watch_delay: Histogram | None = None
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
                self.podgroup_attempts.labels(result=result, profile=profile)

    def observe_attempt(self, result: str, profile: str, seconds: float) -> None:
        """Count one scheduling attempt of a pod and record how long it took."""
        if result not in ATTEMPT_RESULTS:
            raise ValueError(f"result must be one of {ATTEMPT_RESULTS}, not {result!r}")
        self.schedule_attempts.labels(result=result, profile=profile).inc()
        self.attempt_duration.labels(result=result, profile=profile).observe(seconds)

    def observe_group_attempt(
        self, result: str, profile: str, seconds: float, algorithm: float
    ) -> None:
        """Count one attempt to place a pod group, with how long it and its decision took."""
        if result not in ATTEMPT_RESULTS:
            raise ValueError(f"result must be one of {ATTEMPT_RESULTS}, not {result!r}")
        self.podgroup_attempts.labels(result=result, profile=profile).inc()
        self.podgroup_attempt_duration.labels(result=result, profile=profile).observe(seconds)
        self.podgroup_algorithm_duration.observe(algorithm)

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

    def observe_incoming(self, event: str, queue: str) -> None:
        """Count a pod entering ``queue`` on ``event`` (each pod on each entry: the
        labelled child is kept)."""
        child = self._incoming.get((event, queue))
        if child is None:
            child = self._incoming[(event, queue)] = self.queue_incoming_pods.labels(
                event=event, queue=queue
            )
        child.inc()

    def observe_periodic_retries(self, plugin: str, pods: int) -> None:
        """Count pods a periodic check sent back to be tried."""
        if self.periodic_retries is not None:
            self.periodic_retries.labels(plugin=plugin).inc(pods)

    def observe_watch_delay(self, kind: str, seconds: float) -> None:
        """Record how late one watch event of ``kind`` was handled."""
        if self.watch_delay is not None:
            self.watch_delay.labels(kind=kind).observe(seconds)

    def observe_scheduled(self, attempts: int, seconds: float) -> None:
        """Record a pod's time from entering the queue to being scheduled."""
        self.pod_scheduling_sli_duration.labels(attempts=attempts_label(attempts)).observe(seconds)

    def watch(
        self,
        view: ClusterView,
        decisions: DecisionLedger,
        pending_ledgers: Callable[[], Iterable[Mapping[str, Resources]]] = tuple,
    ) -> None:
        """Export the feature metrics of a scheduler's view from now on."""
        self.registry.register(FeatureCollector(view, decisions, pending_ledgers))
        self.periodic_retries = Counter(
            "berth_scheduler_periodic_retries_total",
            "Unschedulable pods a plugin's periodic check sent back to be tried (Berth's: "
            "CapacityScheduling's over-runtime check retries pods that may reclaim).",
            ["plugin"],
            registry=self.registry,
        )
        self.watch_delay = Histogram(
            "berth_scheduler_watch_delay_seconds",
            "Seconds from an object's creation (or deletion) on the API server to the "
            "scheduler handling its watch event, by kind: how far the scheduler's view runs "
            "behind. From the server's whole-second timestamps (up to a second high) and "
            "this machine's clock.",
            ["kind"],
            buckets=WATCH_DELAY_BUCKETS,
            registry=self.registry,
        )


def base_units(resource: str, value: int) -> float:
    """Scheduler units to Prometheus' base units: cpu in cores, the rest as they are."""
    return value / 1000 if resource == CPU else float(value)


class FeatureCollector(Collector):
    """Berth's feature metrics, computed from the view on each scrape (the view is only
    changed by the event loop the scrape also runs in, so it is consistent)."""

    def __init__(
        self,
        view: ClusterView,
        decisions: DecisionLedger,
        pending_ledgers: Callable[[], Iterable[Mapping[str, Resources]]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.view = view
        self.decisions = decisions
        self.pending_ledgers = pending_ledgers
        self.clock = clock

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def _families(self) -> list[GaugeMetricFamily]:
        quota = ["namespace", "name", "resource"]
        units = "cpu in cores, memory and storage in bytes, other resources in counts"
        return [
            GaugeMetricFamily(
                "berth_elasticquota_min",
                f"ElasticQuota spec.min per resource ({units}).",
                labels=quota,
            ),
            GaugeMetricFamily(
                "berth_elasticquota_max",
                f"ElasticQuota spec.max per resource ({units}); absent: unlimited.",
                labels=quota,
            ),
            GaugeMetricFamily(
                "berth_elasticquota_used",
                f"ElasticQuota status.used per resource ({units}).",
                labels=quota,
            ),
            GaugeMetricFamily(
                "berth_reservations", "Reservations by status.phase.", labels=["phase"]
            ),
            GaugeMetricFamily(
                "berth_reservation_allocatable",
                f"Resources held by reservations (status.allocatable), by phase ({units}).",
                labels=["phase", "resource"],
            ),
            GaugeMetricFamily(
                "berth_reservation_allocated",
                f"Resources of reservations used by their owners (status.allocated), by phase "
                f"({units}).",
                labels=["phase", "resource"],
            ),
            GaugeMetricFamily(
                "berth_nodemetric_report_age_seconds",
                "Seconds since each node's NodeMetric was last reported (status.updateTime).",
                labels=["node"],
            ),
            GaugeMetricFamily(
                "scheduler_unschedulable_pods",
                "Pending pods by the plugins that rejected them in their last attempt (a pod "
                "counts once for each such plugin), as recorded in the decision records.",
                labels=["plugin", "profile"],
            ),
            GaugeMetricFamily(
                "berth_decision_records",
                "Pending pods whose last scheduling decision is kept for /debug/pods.",
            ),
            GaugeMetricFamily(
                "berth_numa_pending_ledger_nodes",
                "Nodes whose NodeResourceTopology report does not include pods placed on them "
                "yet (the NUMA pending ledger's entries).",
            ),
            GaugeMetricFamily(
                "berth_numa_pending_ledger_requests",
                f"Requests of the pods in the NUMA pending ledger, summed over nodes ({units}).",
                labels=["resource"],
            ),
        ]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {f.name: f for f in self._families()}
        self._quotas(families)
        self._reservations(families)
        self._node_metrics(families)
        self._scheduler(families)
        return iter(families.values())

    def _quotas(self, families: dict[str, GaugeMetricFamily]) -> None:
        for obj in self.view.custom.get("ElasticQuota", {}).values():
            meta = obj.get("metadata") or {}
            quota = [meta.get("namespace") or "", meta.get("name") or ""]
            spec = obj.get("spec") or {}
            status = obj.get("status") or {}
            for field, source in (
                ("min", spec.get("min")),
                ("max", spec.get("max")),
                ("used", status.get("used")),
            ):
                for resource, value in sorted(resource_list(source).items()):
                    families[f"berth_elasticquota_{field}"].add_metric(
                        [*quota, resource], base_units(resource, value)
                    )

    def _reservations(self, families: dict[str, GaugeMetricFamily]) -> None:
        phases: dict[str, int] = {}
        held: dict[tuple[str, str, str], int] = {}
        for obj in self.view.custom.get("Reservation", {}).values():
            status = obj.get("status") or {}
            phase = str(status.get("phase") or "")
            phases[phase] = phases.get(phase, 0) + 1
            for field in ("allocatable", "allocated"):
                for resource, value in resource_list(status.get(field)).items():
                    slot = (field, phase, resource)
                    held[slot] = held.get(slot, 0) + value
        for phase, count in sorted(phases.items()):
            families["berth_reservations"].add_metric([phase], count)
        for (field, phase, resource), value in sorted(held.items()):
            families[f"berth_reservation_{field}"].add_metric(
                [phase, resource], base_units(resource, value)
            )

    def _node_metrics(self, families: dict[str, GaugeMetricFamily]) -> None:
        now = self.clock()
        for obj in self.view.custom.get("NodeMetric", {}).values():
            updated = epoch_seconds((obj.get("status") or {}).get("updateTime"))
            if updated is not None:
                name = (obj.get("metadata") or {}).get("name") or ""
                families["berth_nodemetric_report_age_seconds"].add_metric(
                    [name], max(0.0, now - updated)
                )

    def _scheduler(self, families: dict[str, GaugeMetricFamily]) -> None:
        for (plugin, profile), count in sorted(self.decisions.by_plugin().items()):
            families["scheduler_unschedulable_pods"].add_metric([plugin, profile], count)
        families["berth_decision_records"].add_metric([], len(self.decisions))
        nodes = 0
        requests: Resources = {}
        for ledger in self.pending_ledgers():
            nodes += len(ledger)
            for pending in ledger.values():
                for resource, value in pending.items():
                    requests[resource] = requests.get(resource, 0) + value
        families["berth_numa_pending_ledger_nodes"].add_metric([], nodes)
        for resource, value in sorted(requests.items()):
            families["berth_numa_pending_ledger_requests"].add_metric(
                [resource], base_units(resource, value)
            )
