"""The Grafana dashboard queries only metrics Berth exports, and imports as it is."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from berth.scheduler.cache.view import ClusterView
from berth.scheduler.decisions.ledger import DecisionLedger
from berth.scheduler.metrics import SchedulerMetrics
from tests.support import REPO

DASHBOARD = REPO / "manifests" / "dashboards" / "berth-scheduler.json"
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"and", "or", "unless"}
)
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    keywords, label names (inside {} or by/without lists) or parts of strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if match.group() in KEYWORDS or following.startswith("("):
            continue
        names.add(match.group())
    return names


def exported() -> set[str]:
    """Every sample name the scheduler's registry can export, feature metrics included."""
    metrics = SchedulerMetrics(["berth-scheduler"])
    metrics.watch(ClusterView(), DecisionLedger())
    names = set()
    for family in metrics.registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def panels() -> Iterator[dict[str, Any]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        if panel["type"] != "row":
            yield panel


def test_the_parser_finds_metric_names_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, result) (rate(a_bucket{result="x y"}[5m]))) '
        "/ on (profile) group_left b_total"
    )
    assert metric_names(expr) == {"a_bucket", "b_total"}


def test_every_panel_queries_metrics_berth_exports() -> None:
    known = exported()
    queried = {
        name for panel in panels() for t in panel["targets"] for name in metric_names(t["expr"])
    }
    assert queried, "the dashboard queries nothing"
    assert queried <= known, f"not exported: {sorted(queried - known)}"


@pytest.mark.parametrize(
    "wanted",
    [
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pending_pods",
        "berth_elasticquota_used",
        "berth_reservations",
        "berth_nodemetric_report_age_seconds",
        "berth_numa_pending_ledger_nodes",
        "scheduler_unschedulable_pods",
        "scheduler_podgroup_schedule_attempts_total",
        "scheduler_podgroup_scheduling_attempt_duration_seconds_bucket",
    ],
)
def test_the_dashboard_covers_throughput_latency_queues_and_each_feature(wanted: str) -> None:
    queried = {
        name for panel in panels() for t in panel["targets"] for name in metric_names(t["expr"])
    }
    assert wanted in queried


def test_the_dashboard_is_importable_as_it_is() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["__inputs"][0]["name"] == "DS_PROMETHEUS"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert panel["targets"]
        assert all(t["refId"] for t in panel["targets"])


def sample(metrics: SchedulerMetrics, metric: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(metric, labels)
    return None if value is None else float(value)


def test_the_feature_metrics_read_the_view_at_scrape_time() -> None:
    view = ClusterView()
    ledger = DecisionLedger()
    metrics = SchedulerMetrics(["berth-scheduler"])
    pending = [{"n1": {"cpu": 1500}}, {"n2": {"cpu": 500, "memory": 1024}}]
    metrics.watch(view, ledger, lambda: pending)
    view.on_custom(
        "ElasticQuota",
        "ADDED",
        {
            "metadata": {"namespace": "a", "name": "q", "uid": "q"},
            "spec": {"min": {"cpu": "2"}, "max": {"cpu": "4", "memory": "1Gi"}},
            "status": {"used": {"cpu": "1500m"}},
        },
    )
    for name, phase in (("r1", "Available"), ("r2", "Available"), ("r3", "Pending")):
        view.on_custom(
            "Reservation",
            "ADDED",
            {
                "metadata": {"name": name, "uid": name},
                "spec": {},
                "status": {
                    "phase": phase,
                    "allocatable": {"cpu": "1"},
                    "allocated": {"cpu": "250m"},
                }
                if phase == "Available"
                else {"phase": phase},
            },
        )
    view.on_custom(
        "NodeMetric",
        "ADDED",
        {"metadata": {"name": "n1", "uid": "n1"}, "status": {"updateTime": "2020-01-01T00:00:00Z"}},
    )
    assert (
        sample(metrics, "berth_elasticquota_used", namespace="a", name="q", resource="cpu") == 1.5
    )
    assert sample(metrics, "berth_elasticquota_min", namespace="a", name="q", resource="cpu") == 2
    assert sample(
        metrics, "berth_elasticquota_max", namespace="a", name="q", resource="memory"
    ) == (1024**3)
    assert sample(metrics, "berth_reservations", phase="Available") == 2
    assert sample(metrics, "berth_reservations", phase="Pending") == 1
    assert sample(metrics, "berth_reservation_allocatable", phase="Available", resource="cpu") == 2
    assert sample(metrics, "berth_reservation_allocated", phase="Available", resource="cpu") == 0.5
    age = sample(metrics, "berth_nodemetric_report_age_seconds", node="n1")
    assert age is not None
    assert age > 3600
    assert sample(metrics, "berth_numa_pending_ledger_nodes") == 2
    assert sample(metrics, "berth_numa_pending_ledger_requests", resource="cpu") == 2
    assert sample(metrics, "berth_decision_records") == 0
