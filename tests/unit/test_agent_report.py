"""The status the agent writes, from a window of samples."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from berth.agent.pods import PodRef, pod_ref
from berth.agent.report import build_status, history_seconds
from berth.agent.window import Sample, Usage, Window
from berth.api.nodemetric import NodeMetricCollectPolicy
from berth.quota.usage import as_resource_list

GIB = 1024**3
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def policy(durations: list[str]) -> NodeMetricCollectPolicy:
    return NodeMetricCollectPolicy.from_dict(
        {
            "reportIntervalSeconds": 2,
            "aggregateDurationSeconds": 4,
            "nodeAggregatePolicy": {"durations": durations},
        }
    )


def window() -> Window:
    """t = 1..6 kept for 4 s (t = 3..6): node cpu t cores, memory t GiB; pod p on the last
    two with 0.5 t cores and 0.5 GiB, beside an unlisted pod cgroup of 0.5 cores."""
    filled = Window(4)
    for t in range(1, 7):
        pods = {"p": Usage(0.5 * t, 0.5 * GIB), "unlisted": Usage(0.5, 0.0)} if t > 4 else {}
        filled.add(Sample(float(t), float(t - 1), Usage(float(t), float(t * GIB)), pods))
    return filled


def res(cpu: str, memory: str) -> dict[str, dict[str, str]]:
    return {"resources": {"cpu": cpu, "memory": memory}}


def stats(*values: float) -> dict[str, dict[str, dict[str, str]]]:
    """avg, p50, p90, p95, p99 of a series where memory in GiB equals cpu in cores."""
    kinds = ("avg", "p50", "p90", "p95", "p99")
    return {
        kind: {"resources": as_resource_list({"cpu": round(v * 1000), "memory": round(v * GIB)})}
        for kind, v in zip(kinds, values, strict=True)
    }


def test_status_as_written() -> None:
    pods = {"p": PodRef("team", "web", priority="koord-prod", qos="LS")}
    status = build_status(NOW, window(), policy(["3s", "4s", "8s", "9s", "1m"]), pods)
    assert status is not None

    written = status.to_dict()
    system_windows = written["nodeMetric"].pop("aggregatedSystemUsages")
    assert written == {
        "updateTime": "2026-05-01T12:00:00Z",
        "nodeMetric": {
            # the mean over aggregateDurationSeconds (4 s: t = 3..6), not the report interval
            "nodeUsage": res("4500m", "4608Mi"),
            # node minus every pod cgroup, named or not, sample by sample:
            # cpu 3, 4, 6 - 3.5, 6 - 3.5 - ... = 3, 4, 2, 2.5; memory 3, 4, 4.5, 5.5 GiB
            "systemUsage": res("2875m", "4352Mi"),
            "aggregatedNodeUsages": [
                # t = 4..6: cpu 4, 5, 6 cores, memory 4, 5, 6 GiB
                {"duration": "3s", "usage": stats(5.0, 5.0, 5.8, 5.9, 5.98)},
                # the whole history, t = 3..6
                {"duration": "4s", "usage": stats(4.5, 4.5, 5.7, 5.85, 5.97)},
                # 8s: half of it is kept, so it is the whole history too
                {"duration": "8s", "usage": stats(4.5, 4.5, 5.7, 5.85, 5.97)},
                # 9s and 1m: less than half of them kept, not reported
            ],
        },
        "podsMetric": [
            {
                "namespace": "team",
                "name": "web",
                "podUsage": res("2750m", "512Mi"),
                "priority": "koord-prod",
                "qos": "LS",
            }
        ],
    }
    assert [w["duration"] for w in system_windows] == ["3s", "4s", "8s"]
    # t = 4..6: system cpu 4, 2, 2.5 cores
    assert system_windows[0]["usage"]["p50"]["resources"]["cpu"] == "2500m"


def test_history_kept_covers_the_period_and_the_longest_window() -> None:
    assert history_seconds(NodeMetricCollectPolicy()) == 1800  # 300 s and 5m, 10m, 30m
    assert history_seconds(policy(["3s"])) == 4
    assert history_seconds(policy(["90s", "1m"])) == 90


def test_default_windows_appear_as_the_history_grows() -> None:
    """The default policy, a sample a second for 20 minutes: 5m and 10m appear, 30m once
    15 minutes are kept."""
    default = NodeMetricCollectPolicy()
    kept = Window(history_seconds(default))
    seen: dict[int, list[str]] = {}
    for t in range(1, 20 * 60 + 1):
        kept.add(Sample(float(t), float(t - 1), Usage(1.0, 1.0)))
        if t in (149, 150, 299, 300, 899, 900, 1200):
            status = build_status(NOW, kept, default, {})
            assert status is not None
            assert status.node_metric is not None
            usages = status.node_metric.aggregated_node_usages or []
            seen[t] = [str(a.duration) for a in usages]
    assert seen == {
        149: [],
        150: ["5m0s"],
        299: ["5m0s"],
        300: ["5m0s", "10m0s"],
        899: ["5m0s", "10m0s"],
        900: ["5m0s", "10m0s", "30m0s"],
        1200: ["5m0s", "10m0s", "30m0s"],
    }


def test_windows_are_written_as_go_durations() -> None:
    status = build_status(NOW, window(), policy(["0m3s"]), {})
    assert status is not None
    assert status.node_metric is not None
    assert [a.duration for a in status.node_metric.aggregated_node_usages or []] == ["3s"]
    wide = Window(600)
    for t in range(0, 301):
        wide.add(Sample(float(t), float(t - 1), Usage(1.0, 1.0)))
    status = build_status(NOW, wide, policy(["5m"]), {})
    assert status is not None
    assert status.node_metric is not None
    assert [a.duration for a in status.node_metric.aggregated_node_usages or []] == ["5m0s"]


def test_nothing_to_report_before_the_first_sample() -> None:
    assert build_status(NOW, Window(4), policy([]), {}) is None


def test_koordinator_priority_and_qos_of_a_pod() -> None:
    guaranteed = {"limits": {"cpu": "1", "memory": "1Gi"}}
    burstable = {"requests": {"cpu": "1"}}

    def pod(
        labels: dict[str, str], priority: int | None, resources: dict[str, Any] | None = None
    ) -> PodRef:
        meta = {"namespace": "ns", "name": "p", "labels": labels}
        containers = [{"name": "c", "resources": resources or {}}]
        return pod_ref({"metadata": meta, "spec": {"priority": priority, "containers": containers}})

    # The priority band, else the class derived from the QoS class.
    assert pod({}, 9500) == PodRef("ns", "p", "koord-prod", "BE")
    assert pod({}, 5000, guaranteed) == PodRef("ns", "p", "koord-batch", "LSR")
    assert pod({}, 0) == PodRef("ns", "p", "koord-batch", "BE")
    assert pod({}, None, burstable) == PodRef("ns", "p", "koord-prod", "LS")
    assert pod({}, None, guaranteed) == PodRef("ns", "p", "koord-prod", "LSR")
    labels = {"koordinator.sh/priority-class": "koord-mid", "koordinator.sh/qosClass": "BE"}
    assert pod(labels, 9500) == PodRef("ns", "p", "koord-mid", "BE")
    # Names Koordinator does not know count as unset.
    unknown = {"koordinator.sh/priority-class": "gold", "koordinator.sh/qosClass": "X"}
    assert pod(unknown, 9500, burstable) == PodRef("ns", "p", "koord-prod", "LS")
    # The kubelet's status.qosClass wins over the computed one.
    status = {"qosClass": "Guaranteed"}
    ref = pod_ref({"metadata": {"namespace": "ns", "name": "p"}, "spec": {}, "status": status})
    assert ref == PodRef("ns", "p", "koord-prod", "LSR")
