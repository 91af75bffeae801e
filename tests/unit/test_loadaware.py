"""Load-aware scheduling without a cluster: the design's args and defaults, the estimate of
pods a report does not include yet, the filter's thresholds and expiry, the score, and a
burst onto cold nodes that must spread.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.loadaware.args import LoadAwareArgs, ThresholdsAnnotationError, node_thresholds
from berth.loadaware.estimate import estimate
from berth.scheduler.framework import CycleState
from berth.scheduler.plugins.loadaware import LoadAwareScheduling
from tests.unit.scheduler_fixtures import EPOCH, Env, Json, container, info, make_env, node, pod, ts

NOW = 3600.0  # seconds after the fixtures' epoch
MI = 1024 * 1024


def test_defaults_are_the_designs() -> None:
    args = LoadAwareArgs.parse({})
    assert args.filter_expired_node_metrics is True
    assert args.node_metric_expiration_seconds == 180
    assert args.usage_thresholds == {"cpu": 65, "memory": 95}
    assert args.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert args.resource_weights == {"cpu": 1, "memory": 1}


def test_a_partial_map_keeps_the_other_defaults() -> None:
    args = LoadAwareArgs.parse({"usageThresholds": {"cpu": 50}, "aggregated": {}})
    assert args.usage_thresholds == {"cpu": 50, "memory": 95}


@pytest.mark.parametrize(
    ("args", "word"),
    [
        ({"usageThreshold": {"cpu": 50}}, "usageThreshold"),
        ({"usageThresholds": {"cpu": 150}}, "percentage"),
        ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds"),
    ],
)
def test_bad_args_are_named(args: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        LoadAwareArgs.parse(args)


def test_the_node_annotation_overrides_thresholds() -> None:
    default = {"cpu": 65, "memory": 95}
    annotation = {"scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 30}}'}
    assert node_thresholds(annotation, default) == {"cpu": 30, "memory": 95}
    broken = {"scheduling.koordinator.sh/usage-thresholds": "{cpu: 30"}
    with pytest.raises(ThresholdsAnnotationError, match="is not"):
        node_thresholds(broken, default)
    wrong = {"scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 300}}'}
    with pytest.raises(ThresholdsAnnotationError, match="not a percentage"):
        node_thresholds(wrong, default)


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        ({"cpu": 1000, "memory": 1000 * MI}, {}, {"cpu": 850, "memory": 700 * MI}),
        # max(request, limit) x factor, capped at the limit
        ({"cpu": 1000}, {"cpu": 4000}, {"cpu": 3400, "memory": 200 * MI}),
        ({"cpu": 1000}, {"cpu": 1000}, {"cpu": 850, "memory": 200 * MI}),
        ({}, {}, {"cpu": 250, "memory": 200 * MI}),
    ],
)
def test_estimate(
    requests: dict[str, int], limits: dict[str, int], expected: dict[str, int]
) -> None:
    assert estimate(requests, limits, {"cpu": 85, "memory": 70}) == expected


def metric(
    name: str,
    cpu: str,
    memory: str = "1Gi",
    *,
    updated: float = NOW - 10,
    interval: int = 60,
    pods: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
) -> Json:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name, "resourceVersion": f"{name}-{cpu}-{updated}"},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": interval}},
        "status": {
            "updateTime": ts(updated),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
            "podsMetric": [
                {"namespace": ns, "name": n, "podUsage": {"resources": {"cpu": c}}}
                for ns, n, c in pods
            ],
        },
    }


def env(*objects: Json, args: Json | None = None, only_load_scores: bool = False) -> Env:
    plugins: Json = {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]}}
    if only_load_scores:  # no request-based spreading to hide what load-awareness does
        plugins["score"] = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": "LoadAwareScheduling"}],
        }
    profile = {
        "plugins": plugins,
        "pluginConfig": [{"name": "LoadAwareScheduling", "args": args or {}}],
    }
    made = make_env(*objects, profile=profile)
    plugin: LoadAwareScheduling = made.plugin("LoadAwareScheduling")
    plugin.clock = lambda: EPOCH.timestamp() + NOW
    return made


def cpu_pod(name: str, cpu: str = "1", **kwargs: Any) -> Json:
    return pod(name, cpu, "256Mi", created=NOW - 600, **kwargs)


def test_expired_metric_filters_the_node_unless_configured_not_to() -> None:
    objects = (node("n1"), node("n2"), metric("n1", "0", updated=NOW - 181), metric("n2", "1"))
    assert env(*objects).feasible(cpu_pod("p", "100m")) == ["n2"]
    assert env(*objects).message(cpu_pod("p", "2")) == (
        "0/2 nodes are available: 1 node(s) cpu usage exceed threshold, "
        "1 node(s) nodeMetric expired."
    )
    relaxed = env(*objects, args={"filterExpiredNodeMetrics": False})
    assert relaxed.feasible(cpu_pod("p", "100m")) == ["n1", "n2"]


def test_no_metric_or_no_report_yet_passes() -> None:
    unreported = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n2"},
    }
    made = env(node("n1"), node("n2"), unreported)
    assert made.feasible(cpu_pod("p")) == ["n1", "n2"]


def test_threshold_counts_the_incoming_pod() -> None:
    # 4 cpu nodes: 2.2 used + 0.85 estimated = 3.05 → 76% > 65%; 1.5 + 0.85 → 59%.
    made = env(node("n1"), node("n2"), metric("n1", "2200m"), metric("n2", "1500m"))
    assert made.feasible(cpu_pod("p")) == ["n2"]
    assert made.message(cpu_pod("big", "3")) == (
        "0/2 nodes are available: 2 node(s) cpu usage exceed threshold."
    )


def test_the_node_annotation_wins_over_the_configured_threshold() -> None:
    strict = node("n2")
    strict["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 40}}'
    }
    made = env(node("n1"), strict, metric("n1", "1500m"), metric("n2", "1500m"))
    assert made.feasible(cpu_pod("p")) == ["n1"]


def test_pods_placed_after_the_report_are_estimated() -> None:
    # Bound 5 s ago, after the report of 10 s ago: its 0.85 cpu estimate counts on n1.
    recent = cpu_pod("recent", node_name="n1")
    recent["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(NOW - 5)}
    ]
    made = env(node("n1"), metric("n1", "1500m"), recent)
    plugin: LoadAwareScheduling = made.plugin("LoadAwareScheduling")
    report = plugin.report("n1")
    assert report is not None
    assert plugin.load(0, report)["cpu"] == 1500 + 850


def test_pods_in_the_report_count_by_their_usage_only() -> None:
    # Bound long ago and reported at 200m: nothing is added to the node's usage.
    old = cpu_pod("old", node_name="n1")
    old["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(NOW - 500)}
    ]
    made = env(node("n1"), metric("n1", "1500m", pods=[("default", "old", "200m")]), old)
    plugin: LoadAwareScheduling = made.plugin("LoadAwareScheduling")
    report = plugin.report("n1")
    assert report is not None
    assert plugin.load(0, report)["cpu"] == 1500
    # Not in podsMetric: estimated whenever it was placed.
    unlisted = env(node("n1"), metric("n1", "1500m"), old)
    plugin = unlisted.plugin("LoadAwareScheduling")
    report = plugin.report("n1")
    assert report is not None
    assert plugin.load(0, report)["cpu"] == 1500 + 850


def test_score_prefers_the_least_loaded() -> None:
    made = env(node("n1"), node("n2"), metric("n1", "2000m"), metric("n2", "500m"))
    assert made.node_for(cpu_pod("p", "100m")) == "n2"


def test_a_burst_onto_cold_nodes_spreads() -> None:
    nodes = [node(f"n{i}", cpu="32", memory="128Gi") for i in range(5)]
    metrics = [metric(f"n{i}", "1" if i == 0 else "2") for i in range(5)]  # n0 is coldest
    made = env(*nodes, *metrics, only_load_scores=True)
    placed: dict[str, int] = {}
    for i in range(50):
        pending = info(pod(f"b{i}", containers=[container("1", "1Gi")], created=NOW))
        target = made.cycle.schedule(CycleState(), pending).node
        made.view.assume(pending, target)
        placed[target] = placed.get(target, 0) + 1
    assert sum(placed.values()) == 50
    assert max(placed.values()) <= 11, placed
