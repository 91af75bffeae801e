"""The status the agent writes, from a window of samples."""

from __future__ import annotations

from datetime import UTC, datetime

from berth.agent.pods import PodRef, pod_ref
from berth.agent.report import build_status
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
    """t = 1..6: node cpu 1..6 cores, memory 1..6 GiB; pod p on the last two."""
    filled = Window(4)
    for t in range(1, 7):
        pods = {"p": Usage(0.25 * t, 0.5 * GIB), "unlisted": Usage(0.5, 0.0)} if t > 4 else {}
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
    status = build_status(NOW, window(), policy(["3s", "4s", "1m"]), pods)
    assert status is not None

    assert status.to_dict() == {
        "updateTime": "2026-05-01T12:00:00Z",
        "nodeMetric": {
            "nodeUsage": res("5500m", "5632Mi"),  # mean of t = 5, 6
            # node minus every pod cgroup, named or not: 5.5 - 1.375 - 0.5 cores
            "systemUsage": res("3625m", "5Gi"),
            "aggregatedNodeUsages": [
                # t = 4..6: cpu 4, 5, 6 cores, memory 4, 5, 6 GiB
                {"duration": "3s", "usage": stats(5.0, 5.0, 5.8, 5.9, 5.98)},
                # the whole history, t = 3..6
                {"duration": "4s", "usage": stats(4.5, 4.5, 5.7, 5.85, 5.97)},
                # 1m: longer than the history kept, not reported
            ],
        },
        "podsMetric": [
            {
                "namespace": "team",
                "name": "web",
                "podUsage": res("1375m", "512Mi"),
                "priority": "koord-prod",
                "qos": "LS",
            }
        ],
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
    def pod(labels: dict[str, str], priority: int | None) -> PodRef:
        meta = {"namespace": "ns", "name": "p", "labels": labels}
        return pod_ref({"metadata": meta, "spec": {"priority": priority}})

    assert pod({}, 9500) == PodRef("ns", "p", "koord-prod", None)
    assert pod({}, 5000) == PodRef("ns", "p", "koord-batch", None)
    assert pod({}, 0) == PodRef("ns", "p", None, None)
    assert pod({}, None) == PodRef("ns", "p", None, None)
    labels = {"koordinator.sh/priority-class": "koord-mid", "koordinator.sh/qosClass": "BE"}
    assert pod(labels, 9500) == PodRef("ns", "p", "koord-mid", "BE")
