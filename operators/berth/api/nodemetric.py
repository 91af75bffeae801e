"""NodeMetric (``slo.koordinator.sh/v1alpha1``, cluster-scoped, one per Node with the Node's
name): how a node's agent should collect usage (spec) and the usage it reported (status).
Wire-compatible with Koordinator.

The collect-policy defaults are schema defaults, and ``spec`` and ``metricCollectPolicy``
default to ``{}``, so even a NodeMetric created with no spec reads back with the full policy.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Final

from pydantic import Field

from berth.api.base import SERVER_DEFAULT, SERVER_DEFAULT_OBJECT, ApiModel, Time
from berth.api.duration import Duration, parse_duration
from berth.api.meta import KubeObject
from berth.api.quantity import ResourceList
from berth.api.resource import CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "GROUP",
    "VERSION",
    "AggregatePolicy",
    "AggregatedUsage",
    "AggregationType",
    "HostApplicationMetricInfo",
    "NodeMemoryCollectPolicy",
    "NodeMetric",
    "NodeMetricCollectPolicy",
    "NodeMetricInfo",
    "NodeMetricSpec",
    "NodeMetricStatus",
    "NumaUsage",
    "PeakMetric",
    "PodMetricInfo",
    "ReclaimableMetric",
    "ResourceMap",
]

GROUP: Final = "slo.koordinator.sh"
VERSION: Final = "v1alpha1"


class NodeMemoryCollectPolicy(StrEnum):
    """What counts as a node's memory usage."""

    USAGE_WITHOUT_PAGE_CACHE = "usageWithoutPageCache"
    """Used memory minus all page cache (the default)."""
    USAGE_WITH_HOT_PAGE_CACHE = "usageWithHotPageCache"
    """Used memory minus page cache, plus the active (hot) page cache."""
    USAGE_WITH_PAGE_CACHE = "usageWithPageCache"
    """Used memory including all page cache."""


class AggregationType(StrEnum):
    """Statistics reported for each aggregation window (keys of ``usage``)."""

    AVG = "avg"
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"


class AggregatePolicy(ApiModel):
    """The windows over which node usage is aggregated."""

    durations: list[Duration] = Field(
        default_factory=lambda: ["5m", "10m", "30m"],
        json_schema_extra={
            **SERVER_DEFAULT,
            "default": ["5m", "10m", "30m"],
            "x-kubernetes-list-type": "set",
        },
    )
    """Window lengths (default 5m, 10m, 30m)."""


class NodeMetricCollectPolicy(ApiModel):
    """How the node agent collects and reports usage."""

    aggregate_duration_seconds: int = Field(default=300, ge=1, json_schema_extra=SERVER_DEFAULT)
    """The period (seconds) ``nodeUsage``, ``systemUsage`` and each pod's usage are averaged
    over (default 300)."""
    report_interval_seconds: int = Field(default=60, ge=1, json_schema_extra=SERVER_DEFAULT)
    """How often (seconds) the agent writes the status (default 60)."""
    node_aggregate_policy: AggregatePolicy = Field(
        default_factory=AggregatePolicy, json_schema_extra=SERVER_DEFAULT_OBJECT
    )
    """Aggregation windows of node usage."""
    node_memory_collect_policy: NodeMemoryCollectPolicy = Field(
        default=NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE, json_schema_extra=SERVER_DEFAULT
    )
    """What counts as memory usage (default ``usageWithoutPageCache``)."""

    def report_interval(self) -> timedelta:
        """The report interval as a duration."""
        return timedelta(seconds=self.report_interval_seconds)

    def aggregation_windows(self) -> list[timedelta]:
        """The aggregation windows as durations."""
        return [parse_duration(d) for d in self.node_aggregate_policy.durations]


class NodeMetricSpec(ApiModel):
    """What the node agent is asked to do."""

    metric_collect_policy: NodeMetricCollectPolicy = Field(
        default_factory=NodeMetricCollectPolicy, json_schema_extra=SERVER_DEFAULT_OBJECT
    )
    """The collection policy, computed by Berth from ``slo-controller-config``."""


class ResourceMap(ApiModel):
    """A set of resource amounts (Koordinator wraps the resource list in ``resources``)."""

    resources: ResourceList | None = None
    """Resource name to amount (cpu in cores, memory in bytes)."""


class AggregatedUsage(ApiModel):
    """Usage statistics over one window."""

    usage: dict[str, ResourceMap] | None = None
    """Statistic (``avg``, ``p50``, ``p90``, ``p95``, ``p99``) to usage."""
    duration: Duration | None = None
    """The window length (e.g. ``5m``)."""


class NumaUsage(ApiModel):
    """Usage of one NUMA node (written by Koordinator's agent; Berth's does not report it)."""

    numa_node_id: int = Field(alias="numaNodeID")
    """The NUMA node's ID."""
    node_usage: ResourceMap | None = None
    """Usage of the NUMA node."""
    system_usage: ResourceMap | None = None
    """Usage outside pods on the NUMA node."""


class NodeMetricInfo(ApiModel):
    """Usage of the node as a whole."""

    node_usage: ResourceMap | None = None
    """Mean usage of the node over the last ``aggregateDurationSeconds``."""
    aggregated_node_usages: list[AggregatedUsage] | None = None
    """Usage statistics over each ``nodeAggregatePolicy`` window, once the agent's samples
    cover at least half of it."""
    system_usage: ResourceMap | None = None
    """Usage outside pods (system daemons, kernel): node usage minus pods' usage, averaged
    like ``nodeUsage``."""
    aggregated_system_usages: list[AggregatedUsage] | None = None
    """Statistics of ``systemUsage`` over the same windows as ``aggregatedNodeUsages``."""
    numa_usages: list[NumaUsage] | None = None
    """Usage of each NUMA node."""


class PodMetricInfo(ApiModel):
    """Usage of one pod on the node."""

    namespace: str | None = None
    """Namespace of the pod."""
    name: str | None = None
    """Name of the pod."""
    pod_usage: ResourceMap | None = None
    """Mean usage of the pod over the last ``aggregateDurationSeconds``."""
    priority: str | None = None
    """Koordinator priority class of the pod (``koord-prod``, ``koord-mid``, ``koord-batch``,
    ``koord-free``)."""
    qos: str | None = None
    """Koordinator QoS class of the pod (``LSE``, ``LSR``, ``LS``, ``BE``, ``SYSTEM``)."""


class HostApplicationMetricInfo(ApiModel):
    """Usage of an application running on the host outside pods (written by Koordinator's
    agent; Berth's does not report it)."""

    name: str | None = None
    """Name of the host application."""
    usage: ResourceMap | None = None
    """Its usage."""
    priority: str | None = None
    """Its Koordinator priority class."""
    qos: str | None = None
    """Its Koordinator QoS class."""


class ReclaimableMetric(ApiModel):
    """Predicted reclaimable resources of a priority (written by Koordinator's agent)."""

    resource: ResourceMap | None = None
    """The predicted reclaimable amounts."""


class PeakMetric(ApiModel):
    """Predicted peak usage of a priority (written by Koordinator's agent)."""

    resource: ResourceMap | None = None
    """The predicted peak amounts."""


class NodeMetricStatus(ApiModel):
    """What the node agent reported."""

    update_time: Time | None = None
    """When the agent last reported; older than the expiration means stale."""
    node_metric: NodeMetricInfo | None = None
    """Usage of the node."""
    pods_metric: list[PodMetricInfo] | None = None
    """Usage of each pod on the node."""
    host_application_metric: list[HostApplicationMetricInfo] | None = None
    """Usage of host applications outside pods."""
    prod_reclaimable_metric: ReclaimableMetric | None = None
    """Reclaimable resources of Prod pods."""
    prod_peak_metric: PeakMetric | None = None
    """Predicted peak usage of Prod pods."""


class NodeMetric(KubeObject):
    """A NodeMetric: collect policy for a node's agent and the usage it reports."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "NodeMetric"
    spec: NodeMetricSpec = Field(
        default_factory=NodeMetricSpec, json_schema_extra=SERVER_DEFAULT_OBJECT
    )
    """The collection policy."""
    status: NodeMetricStatus | None = None
    """The reported usage."""


CRD: Final = CustomResource(
    model=NodeMetric,
    group=GROUP,
    version=VERSION,
    kind="NodeMetric",
    plural="nodemetrics",
    singular="nodemetric",
    scope="Cluster",
    categories=("berth",),
    printer_columns=(
        PrinterColumn(
            "CPU",
            ".status.nodeMetric.nodeUsage.resources.cpu",
            description="The node's CPU usage in the last report",
        ),
        PrinterColumn(
            "Memory",
            ".status.nodeMetric.nodeUsage.resources.memory",
            description="The node's memory usage in the last report",
        ),
        PrinterColumn("Updated", ".status.updateTime", type="date", description="Last report"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
        PrinterColumn(
            "Interval",
            ".spec.metricCollectPolicy.reportIntervalSeconds",
            type="integer",
            description="Seconds between reports",
            priority=1,
        ),
    ),
)
