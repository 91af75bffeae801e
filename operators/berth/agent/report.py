"""The NodeMetric status the agent writes, from the sample window (pure).

As Koordinator's agent does: ``nodeUsage``, ``systemUsage`` and each pod's usage are means
over the last ``aggregateDurationSeconds`` (the collect policy's aggregation period), not
one noisy sample; ``systemUsage`` is the node's usage minus every pod cgroup's;
``aggregatedNodeUsages`` and ``aggregatedSystemUsages`` have one entry per
``nodeAggregatePolicy`` window whose statistics the kept samples allow (see ``window``),
its duration written as Go writes it (``5m0s``). The agent keeps enough history for the
aggregation period and the longest window.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from berth.agent.pods import PodRef
from berth.agent.window import Part, Usage, Window, node_of, system_of
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

__all__ = ["build_status", "history_seconds", "resources"]


def resources(usage: Usage) -> ResourceMap:
    """Usage as quantities: cpu to the millicore, memory to the byte."""
    units = {CPU: round(usage.cpu * 1000), MEMORY: round(usage.memory)}
    return ResourceMap.from_dict({"resources": as_resource_list(units)})


def _go_duration(text: str) -> str:
    length = parse_duration(text)
    return format_duration(length) if length.microseconds == 0 else text


def history_seconds(policy: NodeMetricCollectPolicy) -> float:
    """The samples to keep: the aggregation period or the longest window, whichever is
    longer."""
    windows = [w.total_seconds() for w in policy.aggregation_windows()]
    return float(max([policy.aggregate_duration_seconds, *windows]))


def _aggregated(
    window: Window, policy: NodeMetricCollectPolicy, part: Part
) -> list[AggregatedUsage]:
    aggregated = []
    for duration in policy.node_aggregate_policy.durations:
        stats = window.aggregate(parse_duration(duration).total_seconds(), part)
        if stats is not None:
            usage = {kind.value: resources(value) for kind, value in stats.items()}
            aggregated.append(AggregatedUsage(duration=_go_duration(duration), usage=usage))
    return aggregated


def build_status(
    now: datetime,
    window: Window,
    policy: NodeMetricCollectPolicy,
    pods: Mapping[str, PodRef],
) -> NodeMetricStatus | None:
    """The status to report at ``now``; None before the first sample."""
    period = policy.aggregate_duration_seconds
    node = window.mean(period, node_of)
    system = window.mean(period, system_of)
    if node is None or system is None:
        return None
    pod_usages = window.pod_usages(period)
    named = sorted(
        ((pods[uid], usage) for uid, usage in pod_usages.items() if uid in pods),
        key=lambda item: (item[0].namespace, item[0].name),
    )
    return NodeMetricStatus(
        update_time=now,
        node_metric=NodeMetricInfo(
            node_usage=resources(node),
            aggregated_node_usages=_aggregated(window, policy, node_of),
            system_usage=resources(system),
            aggregated_system_usages=_aggregated(window, policy, system_of),
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
