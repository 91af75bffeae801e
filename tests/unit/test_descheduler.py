"""LowNodeLoad: its configuration, hot and idle nodes, the plan, the anomaly detector."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.descheduler.balance import (
    Detector,
    NodeLoad,
    PodLoad,
    is_hot,
    is_idle,
    observe,
    plan,
    usage_now,
)
from berth.descheduler.config import DeschedulerConfigError, check_against_scheduler, parse
from berth.descheduler.fit import fits
from berth.descheduler.lownodeload import LoadAnomalyCondition, LowNodeLoadArgs
from berth.run import RunOptions, run
from berth.scheduler.config import parse as parse_scheduler

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GI = 1024**3


def configuration(args: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "profiles": [
            {
                "name": "koord-descheduler",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": [{"name": "LowNodeLoad", "args": args or {}}],
            }
        ],
        **top,
    }


def test_defaults_are_koordinators() -> None:
    settings = parse(configuration())
    args = settings.low_node_load
    assert args is not None
    assert settings.interval_seconds == 60
    assert args.node_fit is True
    assert args.node_metric_expiration_seconds == 180
    assert args.number_of_nodes == 0
    assert args.anomaly_condition is None
    pool = args.pools()[0]
    assert pool.anomaly == LoadAnomalyCondition()
    assert pool.anomaly.window() == timedelta(minutes=1)
    assert (pool.anomaly.consecutive_abnormalities, pool.anomaly.consecutive_normalities) == (5, 3)
    assert pool.weights == {"cpu": 1, "memory": 1}
    assert settings.migration.max_migrating_per_node == 2


def test_unknown_args_and_plugins_are_refused_by_name() -> None:
    with pytest.raises(DeschedulerConfigError, match="highThreshold"):
        parse(configuration({"highThreshold": {"cpu": 70}}))
    with pytest.raises(DeschedulerConfigError, match="RemoveDuplicates"):
        parse(
            {
                **configuration(),
                "profiles": [
                    {"plugins": {"deschedule": {"enabled": [{"name": "RemoveDuplicates"}]}}}
                ],
            }
        )
    with pytest.raises(DeschedulerConfigError, match="useDeviationThresholds"):
        parse(configuration({"useDeviationThresholds": True}))
    document = configuration()
    document["profiles"][0]["pluginConfig"].append(
        {"name": "MigrationController", "args": {"maxMigratingPerZone": 1}}
    )
    with pytest.raises(DeschedulerConfigError, match="maxMigratingPerZone"):
        parse(document)


def test_migration_controller_args_come_from_the_file() -> None:
    document = configuration()
    document["profiles"][0]["pluginConfig"].append(
        {"name": "MigrationController", "args": {"maxMigratingPerNode": 1, "evictQPS": 5}}
    )
    settings = parse(document)
    assert settings.migration.max_migrating_per_node == 1
    assert settings.migration.evict_qps == 5


def test_high_thresholds_below_the_schedulers_are_refused_naming_both() -> None:
    scheduler = parse_scheduler(
        {
            "profiles": [
                {
                    "schedulerName": "berth-scheduler",
                    "plugins": {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]}},
                    "pluginConfig": [
                        {"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 70}}}
                    ],
                }
            ]
        }
    )
    low = parse(configuration({"highThresholds": {"cpu": 60}, "lowThresholds": {"cpu": 20}}))
    with pytest.raises(DeschedulerConfigError) as err:
        check_against_scheduler(low, scheduler)
    assert "highThresholds.cpu 60" in str(err.value)
    assert "LoadAwareScheduling usageThresholds.cpu 70" in str(err.value)
    fine = parse(configuration({"highThresholds": {"cpu": 75}, "lowThresholds": {"cpu": 20}}))
    check_against_scheduler(fine, scheduler)


CORES = 1000


def node(name: str, cpu_used: int, pods: tuple[PodLoad, ...] = ()) -> NodeLoad:
    return NodeLoad(
        name, {"cpu": 10 * CORES, "memory": 32 * GI}, {"cpu": cpu_used, "memory": GI}, pods
    )


def pod(name: str, cpu: int, priority: int = 0, movable: bool = True) -> PodLoad:
    return PodLoad("shop", name, {"cpu": cpu, "memory": 0}, priority=priority, movable=movable)


def pool(high: float = 70, low: float = 30) -> Any:
    args = LowNodeLoadArgs.from_dict(
        {"highThresholds": {"cpu": high}, "lowThresholds": {"cpu": low, "memory": 50}}
    )
    return args.pools()[0]


def test_hot_and_idle() -> None:
    assert is_hot(node("a", 8 * CORES), pool())
    assert not is_hot(node("a", 7 * CORES), pool())
    assert is_idle(node("b", 2 * CORES), pool())
    assert not is_idle(node("b", 3 * CORES), pool())


def test_pods_leave_a_hot_node_until_it_is_under_its_high_threshold() -> None:
    hot = node("a", 9 * CORES, (pod("big", 1500), pod("small", 500), pod("other", 1000)))
    moves = plan([hot], [node("b", 1 * CORES)], pool())
    # 9 cores used, 7 allowed: the busiest pods go first until 2 cores have left.
    assert [m.pod.name for m in moves] == ["big", "other"]


def test_lower_priority_pods_go_first_and_unmovable_pods_stay() -> None:
    hot = node(
        "a",
        9 * CORES,
        (pod("vip", 3000, priority=1000), pod("batch", 1000), pod("pinned", 5000, movable=False)),
    )
    moves = plan([hot], [node("b", 1 * CORES)], pool())
    assert [m.pod.name for m in moves] == ["batch", "vip"]


def test_never_more_than_the_idle_nodes_can_absorb() -> None:
    """The idle node can take 2 cores below its own high threshold (70% of 10 = 7, minus 5)."""
    hot = node("a", 10 * CORES, (pod("p1", 1500), pod("p2", 1500), pod("p3", 1000)))
    idle = node("b", 2 * CORES)
    roomy = plan([hot], [idle], pool(high=70, low=30))
    assert sum(m.pod.usage["cpu"] for m in roomy) <= 5 * CORES
    tight = NodeLoad("b", {"cpu": 4 * CORES, "memory": 32 * GI}, {"cpu": 1000, "memory": GI})
    moves = plan([hot], [tight], pool())
    # 70% of 4 cores is 2.8; 1 used: 1.8 cores of room, so only one 1.5-core pod moves.
    assert [m.pod.name for m in moves] == ["p1"]


def test_a_report_counts_no_pod_that_has_left_or_is_leaving() -> None:
    """A report taken before a migration ended still lists the pod that left: its usage is
    not the node's any more, nor is a leaving pod's; a staying pod's is."""
    reported = {
        ("shop", "gone"): {"cpu": 800},
        ("shop", "leaving"): {"cpu": 800},
        ("shop", "stays"): {"cpu": 800},
    }
    usage = usage_now({"cpu": 2600, "memory": GI}, reported, {("shop", "stays")})
    assert usage == {"cpu": 1000, "memory": GI}
    assert usage_now({"cpu": 500}, reported, set()) == {"cpu": 0}


def test_node_fit_keeps_pods_no_idle_node_takes() -> None:
    hot = node("a", 9 * CORES, (pod("big", 1500), pod("small", 600)))
    moves = plan([hot], [node("b", 1 * CORES)], pool(), fits=lambda p: p.name != "big")
    assert [m.pod.name for m in moves] == ["small"]


def test_anomaly_needs_consecutive_hot_rounds() -> None:
    condition = LoadAnomalyCondition()
    detector = Detector()
    seen = []
    for i in range(5):
        detector, anomalous = observe(detector, True, NOW + timedelta(seconds=10 * i), condition)
        seen.append(anomalous)
    assert seen == [False, False, False, False, True]
    # Normal rounds (three) clear the streak.
    for i in range(3):
        detector, _ = observe(detector, False, NOW + timedelta(seconds=60 + i), condition)
    assert detector.abnormal == 0
    # An anomaly lasts at most the timeout: then the streak starts again.
    detector = Detector(abnormal=5, anomalous_since=NOW)
    detector, anomalous = observe(detector, True, NOW + timedelta(seconds=30), condition)
    assert anomalous
    detector, anomalous = observe(detector, True, NOW + timedelta(minutes=2), condition)
    assert (detector.abnormal, anomalous) == (1, False)


def k8s_node(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "b", "labels": {"zone": "z1"}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }


def k8s_pod(cpu: str = "1", **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


def test_fit_checks_selector_affinity_taints_and_requests() -> None:
    assert fits(k8s_pod(), k8s_node(), {})
    assert not fits(k8s_pod("4"), k8s_node(), {"cpu": 1000})
    assert not fits(k8s_pod(nodeSelector={"zone": "z2"}), k8s_node(), {})
    taint = {"key": "gpu", "effect": "NoSchedule"}
    assert not fits(k8s_pod(), k8s_node(taints=[taint]), {})
    tolerant = k8s_pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert fits(tolerant, k8s_node(taints=[taint]), {})
    away = {"key": "metadata.name", "operator": "NotIn", "values": ["b"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [away]}]
            }
        }
    }
    assert not fits(k8s_pod(affinity=affinity), k8s_node(), {})


def test_berth_run_exits_naming_a_bad_descheduler_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "descheduler.yaml"
    path.write_text(yaml.safe_dump(configuration({"highThreshold": {"cpu": 70}})))
    assert run(RunOptions(descheduler_config=str(path), log_level="error")) == 2
    captured = capsys.readouterr()
    assert "highThreshold" in captured.out + captured.err
