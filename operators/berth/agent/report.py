"""The NodeMetric status the agent writes, from the sample window (pure).

``nodeUsage`` and each pod's usage are means over the last report interval (what happened
since the previous report, not one noisy sample); ``systemUsage`` is the node's usage minus
every pod cgroup's; ``aggregatedNodeUsages`` has one entry per configured window that the
kept history covers, its duration written as Go writes it (``5m0s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from berth.agent.pods import PodRef
from berth.agent.window import Usage, Window
from berth.api.duration import format_duration, parse_duration
from berth.api.nodemetric import (
    AggregatedUsage,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from berth.podresources import CPU, MEMORY
from berth.quota.usage import as_resource_list

__all__ = ["build_status", "resources"]


def resources(usage: Usage) -> ResourceMap:
    """Usage as quantities: cpu to the millicore, memory to the byte."""
    units = {CPU: round(usage.cpu * 1000), MEMORY: round(usage.memory)}
    return ResourceMap.from_dict({"resources": as_resource_list(units)})


def _go_duration(text: str) -> str:
    length = parse_duration(text)
    return format_duration(length) if length.microseconds == 0 else text


def build_status(
    now: datetime,
    window: Window,
    policy: NodeMetricCollectPolicy,
    pods: Mapping[str, PodRef],
) -> NodeMetricStatus | None:
    """The status to report at ``now``; None before the first sample."""
    interval = policy.report_interval_seconds
    node = window.node_usage(interval)
    if node is None:
        return None
    pod_usages = window.pod_usages(interval)
    system = Usage(
        cpu=max(node.cpu - sum(u.cpu for u in pod_usages.values()), 0.0),
        memory=max(node.memory - sum(u.memory for u in pod_usages.values()), 0.0),
    )
    aggregated = []
    for duration in policy.node_aggregate_policy.durations:
        stats = window.aggregate(parse_duration(duration).total_seconds())
        if stats is not None:
            usage = {kind.value: resources(value) for kind, value in stats.items()}
            aggregated.append(AggregatedUsage(duration=_go_duration(duration), usage=usage))
    named = sorted(
        ((pods[uid], usage) for uid, usage in pod_usages.items() if uid in pods),
        key=lambda item: (item[0].namespace, item[0].name),
    )
    return NodeMetricStatus(
        update_time=now,
        node_metric=NodeMetricInfo(
            node_usage=resources(node),
            aggregated_node_usages=aggregated,
            system_usage=resources(system),
        ),
        pods_metric=[
            PodMetricInfo(
                namespace=ref.namespace,
                name=ref.name,
                pod_usage=resources(usage),
                priority=ref.priority,
                qos=ref.qos,
            )
            for ref, usage in named
        ],
    )
