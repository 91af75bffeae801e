"""What a node will use: its last report plus the pods placed since, estimated.

Reported usage lags: a pod bound after the report is not in it, and a pod that has just
started uses little yet. Such a pod is estimated at max(request, limit) times a scaling
factor, capped at its limit (250m cpu / 200Mi memory when it asks for nothing), and adds
what its estimate exceeds the usage reported for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.api.nodemetric import NodeMetric
from berth.podresources import CPU, MEMORY, Resources, resource_list

DEFAULT_ESTIMATE = {CPU: 250, MEMORY: 200 * 1024 * 1024}
RESOURCES = (CPU, MEMORY)


@dataclass(frozen=True)
class NodeReport:
    """The parts of a NodeMetric the scheduler uses, in scheduler units."""

    updated: float | None  # status.updateTime; None: the agent has not reported yet
    interval: float  # spec.metricCollectPolicy.reportIntervalSeconds
    usage: Resources
    pods: dict[tuple[str, str], Resources] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeReport:
        metric = NodeMetric.model_validate(obj)
        status = metric.status
        updated = status.update_time.timestamp() if status and status.update_time else None
        node = status.node_metric if status else None
        usage = node.node_usage.resources if node and node.node_usage else None
        pods: dict[tuple[str, str], Resources] = {}
        for pod in (status.pods_metric if status else None) or ():
            if pod.namespace and pod.name:
                amounts = pod.pod_usage.resources if pod.pod_usage else None
                pods[(pod.namespace, pod.name)] = _units(amounts)
        interval = metric.spec.metric_collect_policy.report_interval_seconds
        return cls(updated, float(interval), _units(usage), pods)


def _units(amounts: Mapping[str, Any] | None) -> Resources:
    return resource_list({k: str(v) for k, v in (amounts or {}).items()})


def estimate(
    requests: Mapping[str, int], limits: Mapping[str, int], factors: Mapping[str, int]
) -> Resources:
    """The usage to expect of a pod that is not (fully) in its node's report yet."""
    out: Resources = {}
    for resource in RESOURCES:
        request = requests.get(resource, 0)
        limit = limits.get(resource, 0)
        if request == 0 and limit == 0:
            out[resource] = DEFAULT_ESTIMATE[resource]
            continue
        value = max(request, limit) * factors.get(resource, 100) // 100
        out[resource] = min(value, limit) if limit else value
    return out


def pending_load(
    estimates: list[tuple[Resources, Resources | None]],
) -> Resources:
    """Σ max(0, estimate - reported usage) over the pods the report may not include."""
    total: Resources = dict.fromkeys(RESOURCES, 0)
    for estimated, reported in estimates:
        for resource in RESOURCES:
            used = (reported or {}).get(resource, 0)
            total[resource] += max(0, estimated[resource] - used)
    return total
