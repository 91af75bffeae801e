"""What a node reports (NodeMetric) and what the pods its report does not include will add.

Reported usage lags: a pod bound after the report is not in it, and a pod that has just
started uses little yet. Such a pod is estimated at max(request, limit) times a scaling
factor, capped at its limit (250m cpu / 200Mi memory when it asks for nothing), and adds
what its estimate exceeds the usage reported for it. The score counts these estimates;
the filter reads the report alone (design 004).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.api.duration import DurationError, parse_duration
from berth.api.nodemetric import NodeMetric
from berth.podresources import CPU, MEMORY, Resources, resource_list

DEFAULT_ESTIMATE = {CPU: 250, MEMORY: 200 * 1024 * 1024}


@dataclass(frozen=True)
class PodUsage:
    usage: Resources
    priority: str | None  # podsMetric[].priority as the agent reported it


@dataclass(frozen=True)
class NodeReport:
    """The parts of a NodeMetric the scheduler uses, in scheduler units."""

    updated: float | None  # status.updateTime; None: the agent has not reported yet
    interval: float  # spec.metricCollectPolicy.reportIntervalSeconds
    usage: Resources
    pods: dict[tuple[str, str], PodUsage] = field(default_factory=dict)
    # (window in seconds, statistic → usage) per aggregatedNodeUsages entry
    aggregated: tuple[tuple[float, dict[str, Resources]], ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeReport:
        metric = NodeMetric.model_validate(obj)
        status = metric.status
        updated = status.update_time.timestamp() if status and status.update_time else None
        node = status.node_metric if status else None
        usage = node.node_usage.resources if node and node.node_usage else None
        pods: dict[tuple[str, str], PodUsage] = {}
        for pod in (status.pods_metric if status else None) or ():
            if pod.namespace and pod.name:
                amounts = pod.pod_usage.resources if pod.pod_usage else None
                pods[(pod.namespace, pod.name)] = PodUsage(_units(amounts), pod.priority)
        aggregated = []
        for entry in (node.aggregated_node_usages if node else None) or ():
            try:
                window = parse_duration(entry.duration).total_seconds() if entry.duration else 0
            except DurationError:
                continue
            stats = {k: _units(v.resources) for k, v in (entry.usage or {}).items()}
            aggregated.append((window, stats))
        interval = metric.spec.metric_collect_policy.report_interval_seconds
        return cls(updated, float(interval), _units(usage), pods, tuple(aggregated))

    def aggregated_usage(self, statistic: str, window: float) -> Resources | None:
        """Koordinator's choice of percentile usage: the window asked for (None when it is
        not reported), or without one the longest window that has the statistic (the
        latest usage when none has it, or none is reported)."""
        if window:
            return next(
                (s[statistic] for w, s in self.aggregated if w == window and s.get(statistic)),
                None,
            )
        present = [(w, s[statistic]) for w, s in self.aggregated if s.get(statistic)]
        if present:
            return max(present, key=lambda item: item[0])[1]
        return self.usage


def _units(amounts: Mapping[str, Any] | None) -> Resources:
    return resource_list({k: str(v) for k, v in (amounts or {}).items()})


def estimate(
    requests: Mapping[str, int], limits: Mapping[str, int], factors: Mapping[str, int]
) -> Resources:
    """The usage to expect of a pod not (fully) in its node's report yet, for every
    resource with a scaling factor."""
    out: Resources = {}
    for resource, factor in factors.items():
        request = requests.get(resource, 0)
        limit = limits.get(resource, 0)
        quantity = max(request, limit)
        if quantity == 0:
            out[resource] = DEFAULT_ESTIMATE.get(resource, 0)
            continue
        value = (quantity * factor + 50) // 100  # rounded, as Koordinator
        out[resource] = min(value, limit) if limit else value
    return out


def pending_load(estimates: Iterable[tuple[Resources, Resources | None]]) -> Resources:
    """Σ max(0, estimate - reported usage) over the pods the report may not include."""
    total: Resources = {}
    for estimated, reported in estimates:
        for resource, value in estimated.items():
            used = (reported or {}).get(resource, 0)
            total[resource] = total.get(resource, 0) + max(0, value - used)
    return total
