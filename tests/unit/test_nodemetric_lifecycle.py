"""What the NodeMetric operator writes for one name, without a cluster."""

from __future__ import annotations

from typing import Any

from berth.slo.colocation import ColocationConfig, parse
from berth.slo.lifecycle import Change, MetricIndex, Verb, desired, metric_seen, node_seen

NODE = node_seen({"metadata": {"name": "n1", "uid": "u1", "labels": {"pool": "gpu"}}})
CONFIG = parse(
    '{"metricReportIntervalSeconds": 30, "nodeConfigs": '
    '[{"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "metricReportIntervalSeconds": 5}]}'
)
GPU_POLICY = {
    "aggregateDurationSeconds": 300,
    "reportIntervalSeconds": 5,
    "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
    "nodeMemoryCollectPolicy": "usageWithoutPageCache",
}


def metric(policy: dict[str, Any], owner: str | None = "u1") -> Any:
    refs = [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": owner}] if owner else []
    return metric_seen(
        {
            "metadata": {"name": "n1", "ownerReferences": refs},
            "spec": {"metricCollectPolicy": policy},
        }
    )


def test_a_new_node_gets_a_nodemetric_owned_by_it_with_its_policy() -> None:
    assert desired("n1", NODE, None, CONFIG) == Change(
        Verb.CREATE,
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {
                "name": "n1",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}
                ],
            },
            "spec": {"metricCollectPolicy": GPU_POLICY},
        },
    )


def test_nothing_to_write_when_the_policy_is_current() -> None:
    assert desired("n1", NODE, metric(GPU_POLICY), CONFIG) is None


def test_a_changed_policy_is_patched() -> None:
    old = {**GPU_POLICY, "reportIntervalSeconds": 60}
    assert desired("n1", NODE, metric(old), CONFIG) == Change(
        Verb.PATCH, {"spec": {"metricCollectPolicy": GPU_POLICY}}
    )


def test_labels_decide_the_policy() -> None:
    plain = node_seen({"metadata": {"name": "n1", "uid": "u1", "labels": {"pool": "web"}}})
    change = desired("n1", plain, metric(GPU_POLICY), CONFIG)
    assert change is not None
    assert change.body == {
        "spec": {"metricCollectPolicy": {**GPU_POLICY, "reportIntervalSeconds": 30}}
    }


def test_without_a_valid_config_policies_are_kept_and_new_ones_get_schema_defaults() -> None:
    assert desired("n1", NODE, metric({"reportIntervalSeconds": 1}), None) is None
    change = desired("n1", NODE, None, None)
    assert change is not None
    assert change.verb is Verb.CREATE
    assert change.body is not None
    assert change.body["spec"] == {}


def test_a_nodemetric_without_its_node_is_deleted() -> None:
    assert desired("n1", None, metric(GPU_POLICY), CONFIG) == Change(Verb.DELETE)
    assert desired("n1", None, None, CONFIG) is None


def test_a_nodemetric_of_an_earlier_node_with_the_same_name_is_deleted() -> None:
    assert desired("n1", NODE, metric(GPU_POLICY, owner="u0"), CONFIG) == Change(Verb.DELETE)


def test_a_nodemetric_written_by_hand_without_owner_is_adopted_for_its_policy() -> None:
    assert desired("n1", NODE, metric(GPU_POLICY, owner=None), CONFIG) is None
    assert desired("n1", NODE, metric({}, owner=None), ColocationConfig()) is not None


def _event_body(policy: dict[str, Any], *, status: dict[str, Any] | None = None) -> Any:
    refs = [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}]
    body: dict[str, Any] = {
        "metadata": {"name": "n1", "ownerReferences": refs},
        "spec": {"metricCollectPolicy": policy},
    }
    if status is not None:
        body["status"] = status
    return body


def test_only_events_that_change_what_the_decision_reads_mark_the_name() -> None:
    index = MetricIndex()
    assert index.observe("ADDED", _event_body(GPU_POLICY)) == "n1"
    assert index.seen["n1"] == metric(GPU_POLICY)
    # The node agent's report and a relabel leave the policy and the owner as they were.
    report = _event_body(GPU_POLICY, status={"updateTime": "2026-01-01T00:00:00Z"})
    assert index.observe("MODIFIED", report) is None
    relabelled = _event_body(GPU_POLICY)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert index.observe("MODIFIED", relabelled) is None
    # A new policy (the operator's own patch coming back, or somebody's edit) is news.
    edited = {**GPU_POLICY, "reportIntervalSeconds": 30}
    assert index.observe("MODIFIED", _event_body(edited)) == "n1"
    assert index.seen["n1"] == metric(edited)
    assert index.observe("DELETED", _event_body(edited)) == "n1"
    assert "n1" not in index.seen
    assert index.observe("DELETED", _event_body(edited)) is None
