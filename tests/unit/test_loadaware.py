"""Load-aware scheduling without a cluster: the filter reads the latest report only (design
004), the score counts the estimates of the pods the report misses and of the incoming
pod, and each of Koordinator's args changes a decision.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.loadaware.priority import priority_class
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.loadaware import LoadAwareScheduling
from tests.unit.scheduler_fixtures import EPOCH, Env, Json, container, info, make_env, node, pod, ts

NOW = 3600.0  # seconds after the fixtures' epoch
PROD = "koord-prod"
BATCH = {"koordinator.sh/priority-class": "koord-batch"}


def metric(
    name: str,
    cpu: str,
    memory: str = "1Gi",
    *,
    updated: float = NOW - 10,
    interval: int = 60,
    pods: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    priority: str | None = None,
    extra: dict[str, str] | None = None,
    aggregated: list[tuple[str, dict[str, str]]] = (),  # type: ignore[assignment]
) -> Json:
    """A NodeMetric; ``aggregated`` is (window, statistic → cpu) per aggregatedNodeUsages."""
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name, "resourceVersion": f"{name}-{cpu}-{updated}"},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": interval}},
        "status": {
            "updateTime": ts(updated),
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": cpu, "memory": memory, **(extra or {})}},
                "aggregatedNodeUsages": [
                    {
                        "duration": window,
                        "usage": {k: {"resources": {"cpu": v}} for k, v in stats.items()},
                    }
                    for window, stats in aggregated
                ],
            },
            "podsMetric": [
                {
                    "namespace": ns,
                    "name": n,
                    "podUsage": {"resources": {"cpu": c}},
                    **({"priority": priority} if priority else {}),
                }
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


def bound(name: str, node_name: str, cpu: str, seconds_ago: float, **kwargs: Any) -> Json:
    made = cpu_pod(name, cpu, node_name=node_name, **kwargs)
    made["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(NOW - seconds_ago)}
    ]
    return made


def daemonset(raw: Json) -> Json:
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "ds",
            "uid": "ds",
            "controller": True,
        }
    ]
    return raw


def load(made: Env, row: int = 0, *, prod_only: bool = False) -> dict[str, int]:
    plugin: LoadAwareScheduling = made.plugin("LoadAwareScheduling")
    report = plugin.report(made.view.nodes.names[row])
    assert report is not None
    return plugin.load(row, report, prod_only=prod_only)


# -- the filter: the latest report only ----------------------------------------------------


def test_a_pod_with_a_large_limit_fits_idle_nodes() -> None:
    # 500m request, 4 cpu limit: its estimate (3.4 cpu) would be 85% of an idle 4-cpu node.
    objects = (node("n1"), node("n2"), metric("n1", "0"), metric("n2", "0"))
    limited = pod("limited", containers=[container("500m", limits={"cpu": "4"})], created=NOW)
    assert env(*objects).feasible(limited) == ["n1", "n2"]
    assert env(*objects).node_for(limited) in ("n1", "n2")


def test_a_large_guaranteed_pod_fits_idle_nodes() -> None:
    # 3.2 cpu Guaranteed: estimated at 2.72 cpu, 68% of a 4-cpu node, over 65%.
    objects = (node("n1"), node("n2"), metric("n1", "0"), metric("n2", "0"))
    resources = {"cpu": "3200m", "memory": "1Gi"}
    guaranteed = pod(
        "guaranteed",
        containers=[container(requests=resources, limits=resources)],
        created=NOW,
    )
    assert env(*objects).feasible(guaranteed) == ["n1", "n2"]


def test_the_threshold_reads_the_report_alone() -> None:
    # 4 cpu nodes: 2.7 used is 68% > 65%; 2.5 used is 63%, whatever the pod asks.
    made = env(node("n1"), node("n2"), metric("n1", "2700m"), metric("n2", "2500m"))
    assert made.feasible(cpu_pod("p", "1500m")) == ["n2"]
    # Pods placed since the report do not count in the filter either.
    recent = bound("recent", "n2", "2", seconds_ago=1)
    made.add(recent)
    assert made.feasible(cpu_pod("p", "1500m")) == ["n2"]


def test_a_node_over_its_threshold_is_named() -> None:
    made = env(node("n1"), node("n2"), metric("n1", "2700m"), metric("n2", "3000m"))
    assert made.message(cpu_pod("p")) == (
        "0/2 nodes are available: 2 node(s) cpu usage exceed threshold."
    )


def test_daemonset_pods_are_not_filtered_by_load() -> None:
    made = env(node("n1"), metric("n1", "3900m"))
    assert made.feasible(cpu_pod("plain")) == []
    assert made.feasible(daemonset(cpu_pod("agent"))) == ["n1"]


def test_expired_metric_filters_the_node_by_default() -> None:
    objects = (node("n1"), node("n2"), metric("n1", "0", updated=NOW - 181), metric("n2", "1"))
    assert env(*objects).feasible(cpu_pod("p", "100m")) == ["n2"]
    assert env(node("n1"), metric("n1", "0", updated=NOW - 181)).message(cpu_pod("p")) == (
        "0/1 nodes are available: 1 node(s) nodeMetric expired."
    )


def test_node_metric_expiration_seconds_sets_the_age() -> None:
    objects = (node("n1"), metric("n1", "0", updated=NOW - 181))
    assert env(*objects).feasible(cpu_pod("p")) == []
    assert env(*objects, args={"nodeMetricExpirationSeconds": 600}).feasible(cpu_pod("p")) == ["n1"]


def test_without_filtering_expired_metrics_the_stale_report_is_still_checked() -> None:
    # Koordinator: filterExpiredNodeMetrics false keeps the thresholds on the old report.
    objects = (
        node("idle"),
        node("busy"),
        metric("idle", "0", updated=NOW - 999),
        metric("busy", "3900m", updated=NOW - 999),
    )
    assert env(*objects, args={"filterExpiredNodeMetrics": False}).feasible(cpu_pod("p")) == [
        "idle"
    ]


def test_enable_schedule_when_node_metrics_expired_lets_expired_nodes_pass() -> None:
    objects = (node("busy"), metric("busy", "3900m", updated=NOW - 999))
    assert env(*objects).feasible(cpu_pod("p")) == []
    relaxed = env(*objects, args={"enableScheduleWhenNodeMetricsExpired": True})
    assert relaxed.feasible(cpu_pod("p")) == ["busy"]


def test_no_metric_or_no_report_yet_passes() -> None:
    unreported = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n2"},
    }
    made = env(node("n1"), node("n2"), unreported)
    assert made.feasible(cpu_pod("p")) == ["n1", "n2"]


def test_a_partial_threshold_map_checks_only_its_resources() -> None:
    # 7.9 of 8 Gi memory used: over the default 95%, not checked with {cpu: 50}.
    objects = (node("n1"), metric("n1", "1", memory="7900Mi"))
    assert env(*objects).feasible(cpu_pod("p")) == []
    assert env(*objects, args={"usageThresholds": {"cpu": 50}}).feasible(cpu_pod("p")) == ["n1"]


def test_thresholds_apply_to_any_resource() -> None:
    gpu = "nvidia.com/gpu"
    objects = (
        node("n1", extra={gpu: "4"}),
        node("n2", extra={gpu: "4"}),
        metric("n1", "0", extra={gpu: "3"}),
        metric("n2", "0", extra={gpu: "1"}),
    )
    made = env(*objects, args={"usageThresholds": {gpu: 50}})
    assert made.feasible(cpu_pod("p")) == ["n2"]
    hot = env(objects[0], objects[2], args={"usageThresholds": {gpu: 50}})
    assert hot.message(cpu_pod("p")) == (
        f"0/1 nodes are available: 1 node(s) {gpu} usage exceed threshold."
    )


def test_prod_usage_thresholds_check_prod_pods_against_prod_usage() -> None:
    # 3.5 cpu used, of which prod pods 0.5: a prod pod checks 13% against 50; a batch pod
    # checks the whole node's 88% against 65.
    objects = (
        node("n1"),
        metric("n1", "3500m", pods=[("default", "web", "500m")], priority=PROD),
    )
    made = env(*objects, args={"prodUsageThresholds": {"cpu": 50}})
    assert made.feasible(cpu_pod("prod")) == ["n1"]  # Burstable: prod by default
    assert made.feasible(cpu_pod("batch", labels=BATCH)) == []
    hot = (node("n1"), metric("n1", "3500m", pods=[("default", "web", "2500m")], priority=PROD))
    assert env(*hot, args={"prodUsageThresholds": {"cpu": 50}}).feasible(cpu_pod("p")) == []


def test_a_pod_relabelled_out_of_prod_no_longer_counts_as_prod_usage() -> None:
    # The report gives no priority: a pod's own class decides, from the labels it has now.
    objects = (
        node("n1"),
        metric("n1", "3500m", pods=[("default", "web", "2500m")]),
        bound("web", "n1", "1", 600),
    )
    made = env(*objects, args={"prodUsageThresholds": {"cpu": 50}})
    assert made.feasible(cpu_pod("prod")) == []  # prod 63% > 50
    made.events.on_pod("MODIFIED", bound("web", "n1", "1", 600, labels=BATCH))
    assert load(made, prod_only=True) == {}
    assert made.feasible(cpu_pod("prod")) == ["n1"]


def test_aggregated_thresholds_read_the_percentile_and_window() -> None:
    windows = [("5m", {"p95": "3500m", "avg": "1"}), ("10m", {"p95": "1"})]
    objects = (node("n1"), metric("n1", "500m", aggregated=windows))
    aggregated = {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95"}
    five = env(*objects, args={"aggregated": {**aggregated, "usageAggregatedDuration": "5m"}})
    assert five.message(cpu_pod("p")) == (
        "0/1 nodes are available: 1 node(s) cpu aggregated usage exceed threshold."
    )
    ten = env(*objects, args={"aggregated": {**aggregated, "usageAggregatedDuration": "10m"}})
    assert ten.feasible(cpu_pod("p")) == ["n1"]
    avg = env(*objects, args={"aggregated": {**aggregated, "usageAggregationType": "avg"}})
    assert avg.feasible(cpu_pod("p")) == ["n1"]
    # Without a window: the longest one that has the statistic (10m here).
    assert env(*objects, args={"aggregated": aggregated}).feasible(cpu_pod("p")) == ["n1"]


def test_aggregated_thresholds_without_the_statistic_fall_back_as_koordinator() -> None:
    """No statistic to read: with no window named, nodeUsage (whether other windows are
    reported or none is, as after an agent restart); with a named window missing, the
    estimates of the node's pods."""
    busy = (node("n1"), bound("web", "n1", "3", 600))  # estimated at 2.55 cpu: 64 %
    idle = (node("n1"),)
    p95 = {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95"}
    five = {**p95, "usageAggregatedDuration": "5m"}
    hot = metric("n1", "3800m")  # 95 %
    hot_other = metric("n1", "3800m", aggregated=[("5m", {"avg": "1"})])
    refused = "0/1 nodes are available: 1 node(s) cpu aggregated usage exceed threshold."
    for nodes, obj, args, fits in (
        (idle, hot, p95, False),  # nodeUsage
        (idle, hot_other, p95, False),  # nodeUsage
        (idle, hot, five, True),  # the estimates: no pod there
        (idle, hot_other, five, True),
        (busy, hot, five, False),  # the estimates: 64 %
        (busy, metric("n1", "0"), five, False),
    ):
        made = env(*nodes, obj, args={"aggregated": args})
        if fits:
            assert made.feasible(cpu_pod("p")) == ["n1"]
        else:
            assert made.message(cpu_pod("p")) == refused


def test_every_threshold_zero_skips_the_node_expiry_included() -> None:
    """Koordinator's filter does not look at a node, not even at its report's age, when
    every threshold the pod is held to is 0; prod thresholds all 0 count as none."""
    stale = (node("n1"), metric("n1", "3900m", updated=NOW - 181))
    zero = {"usageThresholds": {"cpu": 0, "memory": 0}}
    assert env(*stale, args=zero).feasible(cpu_pod("p")) == ["n1"]
    assert env(*stale).feasible(cpu_pod("p")) == []
    hot = (node("n1"), metric("n1", "3900m"))
    assert env(*hot, args={"prodUsageThresholds": {"cpu": 0}}).feasible(cpu_pod("p")) == []


def test_the_node_annotation_wins_over_the_configured_thresholds() -> None:
    strict = node("n2")
    strict["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 30}}'
    }
    made = env(node("n1"), strict, metric("n1", "1500m"), metric("n2", "1500m"))
    assert made.feasible(cpu_pod("p")) == ["n1"]


def test_the_node_annotation_sets_prod_and_aggregated_thresholds() -> None:
    annotated = node("n1")
    annotated["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/usage-thresholds": (
            '{"prodUsageThresholds": {"cpu": 10}, "aggregatedUsage": {"usageThresholds": '
            '{"cpu": 50}, "usageAggregationType": "p99"}}'
        )
    }
    windows = [("5m", {"p99": "3"})]
    made = env(
        annotated,
        metric("n1", "1", pods=[("default", "web", "1")], priority=PROD, aggregated=windows),
    )
    assert made.feasible(cpu_pod("batch", labels=BATCH)) == []  # p99 75% > 50
    assert made.feasible(cpu_pod("prod")) == []  # prod 25% > 10


# -- the score: the report plus the estimates of what it misses ----------------------------


def test_pods_placed_after_the_report_are_estimated() -> None:
    # Bound 5 s ago, after the report of 10 s ago: its 0.85 cpu estimate counts on n1.
    made = env(node("n1"), metric("n1", "1500m"), bound("recent", "n1", "1", seconds_ago=5))
    assert load(made)["cpu"] == 1500 + 850


def test_pods_in_the_report_count_by_their_usage_only() -> None:
    old = bound("old", "n1", "1", seconds_ago=500)
    made = env(node("n1"), metric("n1", "1500m", pods=[("default", "old", "200m")]), old)
    assert load(made)["cpu"] == 1500
    # Not in podsMetric: estimated whenever it was placed.
    assert load(env(node("n1"), metric("n1", "1500m"), old))["cpu"] == 1500 + 850


def test_estimated_scaling_factors_scale_the_estimate() -> None:
    objects = (node("n1"), metric("n1", "1500m"), bound("recent", "n1", "1", seconds_ago=5))
    assert load(env(*objects, args={"estimatedScalingFactors": {"cpu": 50}}))["cpu"] == 2000


def test_the_estimates_decide_the_score() -> None:
    # n1 reports less but just received a 2-cpu pod the report misses.
    made = env(
        node("n1"),
        node("n2"),
        metric("n1", "500m"),
        metric("n2", "1"),
        bound("recent", "n1", "2", seconds_ago=1),
        only_load_scores=True,
    )
    assert made.node_for(cpu_pod("p", "100m")) == "n2"


def test_score_prefers_the_least_loaded() -> None:
    made = env(node("n1"), node("n2"), metric("n1", "2000m"), metric("n2", "500m"))
    assert made.node_for(cpu_pod("p", "100m")) == "n2"


def test_resource_weights_choose_what_counts() -> None:
    objects = (
        node("cpu-hot"),
        node("mem-hot"),
        metric("cpu-hot", "2", memory="1Gi"),
        metric("mem-hot", "500m", memory="6Gi"),
    )
    by_memory = env(*objects, args={"resourceWeights": {"memory": 1}}, only_load_scores=True)
    assert by_memory.node_for(cpu_pod("p", "100m")) == "cpu-hot"
    by_cpu = env(*objects, args={"resourceWeights": {"cpu": 1}}, only_load_scores=True)
    assert by_cpu.node_for(cpu_pod("p", "100m")) == "mem-hot"


def test_dominant_resource_weight_avoids_the_node_short_of_one_resource() -> None:
    # even: cpu and memory half used; skewed: cpu nearly idle, memory 85% used.
    objects = (
        node("even"),
        node("skewed"),
        metric("even", "1800m", memory="3900Mi"),
        metric("skewed", "200m", memory="6800Mi"),
    )
    plain = env(*objects, only_load_scores=True)
    assert plain.node_for(pod("p", created=NOW)) == "skewed"
    dominant = env(*objects, args={"dominantResourceWeight": 2}, only_load_scores=True)
    assert dominant.node_for(pod("p", created=NOW)) == "even"


def test_score_according_prod_usage_scores_prod_pods_by_prod_usage() -> None:
    # busy: 3 cpu used, 0.2 by prod pods; calm: 1.5 cpu used, all of it prod.
    objects = (
        node("busy"),
        node("calm"),
        metric("busy", "3", pods=[("default", "a", "200m")], priority=PROD),
        metric("calm", "1500m", pods=[("default", "b", "1500m")], priority=PROD),
    )
    args: Json = {"usageThresholds": {"cpu": 100}}
    plain = env(*objects, args=args, only_load_scores=True)
    assert plain.node_for(cpu_pod("p", "100m")) == "calm"
    by_prod = env(*objects, args={**args, "scoreAccordingProdUsage": True}, only_load_scores=True)
    assert by_prod.node_for(cpu_pod("p", "100m")) == "busy"
    assert by_prod.node_for(cpu_pod("batch", "100m", labels=BATCH)) == "calm"


def test_score_aggregation_scores_by_the_percentile() -> None:
    objects = (
        node("spiky"),
        node("steady"),
        metric("spiky", "500m", aggregated=[("5m", {"p90": "3500m"})]),
        metric("steady", "1500m", aggregated=[("5m", {"p90": "1500m"})]),
    )
    plain = env(*objects, only_load_scores=True)
    assert plain.node_for(cpu_pod("p", "100m")) == "spiky"
    args = {"aggregated": {"scoreAggregationType": "p90", "scoreAggregatedDuration": "5m"}}
    by_p90 = env(*objects, args=args, only_load_scores=True)
    assert by_p90.node_for(cpu_pod("p", "100m")) == "steady"


def test_an_expired_report_scores_zero() -> None:
    made = env(
        node("old"),
        node("new"),
        metric("old", "0", updated=NOW - 999),
        metric("new", "3"),
        args={"enableScheduleWhenNodeMetricsExpired": True, "usageThresholds": {"cpu": 100}},
        only_load_scores=True,
    )
    assert made.node_for(cpu_pod("p", "100m")) == "new"


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


@pytest.mark.parametrize(
    ("labels", "priority", "expected"),
    [
        ({"koordinator.sh/priority-class": "koord-batch"}, 9500, "koord-batch"),
        ({}, 5500, "koord-batch"),
        # Koordinator: an unknown value is no class, whatever spec.priority says; the QoS
        # decides (a Burstable pod is prod).
        ({"koordinator.sh/priority-class": "gold"}, 5500, "koord-prod"),
        ({"koordinator.sh/priority-class": "gold", "koordinator.sh/qosClass": "BE"}, 9500,
         "koord-batch"),
        ({"koordinator.sh/priority-class": "gold", "koordinator.sh/qosClass": "xx"}, 9500, None),
    ],
)  # fmt: skip
def test_the_priority_class_is_koordinators(
    labels: dict[str, str], priority: int, expected: str | None
) -> None:
    raw = pod("p", "1", labels=labels, priority=priority)
    assert priority_class(raw) == expected
