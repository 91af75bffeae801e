"""``kubectl berth``'s output: the why report from real decision records, the quota,
reservation and top tables from API objects, and its one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from berth.kubectl import tables, why
from berth.kubectl.client import ServiceRef, api_error, scheduler_error
from berth.kubectl.errors import PluginError
from berth.kubectl.main import parser
from berth.loadaware.args import LoadAwareArgs
from tests.unit import test_loadaware as load
from tests.unit.plugins.test_capacityscheduling import cluster, gpu_pod
from tests.unit.scheduler_fixtures import make_env, node, pod
from tests.unit.test_decisions import decision


def as_served(made: Any) -> dict[str, Any]:
    """The record as the client receives it: through JSON."""
    return dict(json.loads(json.dumps(made.to_json())))


def test_why_groups_reasons_with_node_counts() -> None:
    env = make_env(node("small-1", cpu="1"), node("small-2", cpu="1"), node("big", cpu="8"))
    env.add(pod("hog", "8", node_name="big"))
    text = why.report(as_served(decision(env, pod("p", "2"))))
    assert "Pod default/p is pending" in text
    assert "3 node(s)  NodeResourcesFit  Insufficient cpu  (e.g. small-1, small-2, big)" in text
    assert "Preemption: not tried" in text
    assert "What would unblock it:" in text


def test_why_shows_the_quota_line_with_its_numbers() -> None:
    env = cluster(*(gpu_pod(f"a{i}", "a", node_name="n1") for i in range(6)))
    text = why.report(as_served(decision(env, gpu_pod("more", "a"))))
    assert "Refused before any node was looked at, by CapacityScheduling:" in text
    assert "Quota a/quota-a (ElasticQuota):" in text
    assert "nvidia.com/gpu: used 6 + nominated 0 + requested 1  (min 4, max 6)" in text
    assert "all quotas, nvidia.com/gpu: Σused 6 + Σnominated 0  (Σmin 10)" in text
    assert "verdict: OverMax on nvidia.com/gpu" in text


def test_why_shows_load_against_thresholds_only_when_load_rejected_nodes() -> None:
    env = load.env(node("n1"), load.metric("n1", "3"))
    text = why.report(as_served(decision(env, load.cpu_pod("p", "1"))))
    assert (
        "n1: usage cpu 75% > 65% (3 of 4), memory 13% <= 95% (1Gi of 8Gi); "
        "report 10.0s old: node(s) cpu usage exceed threshold"
    ) in text
    fits_load = load.env(node("n1", cpu="1"), load.metric("n1", "0"))
    quiet = why.report(as_served(decision(fits_load, load.cpu_pod("p", "2"))))
    assert "Load (" not in quiet


def test_a_bound_pod_and_a_pod_without_record_are_one_clear_answer() -> None:
    bound = pod("p", "1", node_name="n1")
    assert why.bound_report(bound) == "Pod default/p is not pending: it is scheduled on node n1."
    waiting = pod(
        "q",
        "1",
        conditions=[{"type": "PodScheduled", "status": "False", "message": "0/1 nodes"}],
    )
    assert why.bound_report(waiting) is None
    text = why.no_record_report(waiting)
    assert "holds no decision for it" in text
    assert "PodScheduled: 0/1 nodes" in text


def test_a_pod_without_record_is_told_where_it_waits() -> None:
    waiting = pod("q", "1")
    behind = {"queue": "active", "attempts": 0, "waitingSeconds": 31.4, "ahead": 57}
    text = why.no_record_report(waiting, behind)
    assert text == (
        "Pod default/q is pending with no decision recorded: it waits in the scheduling "
        "queue behind 57 pod(s), for 31 s, 0 attempt(s) so far."
    )
    dropped = {"queue": "unschedulable", "attempts": 4, "waitingSeconds": 80.0}
    assert "waits for a cluster event that could help it" in why.no_record_report(waiting, dropped)
    again = {"queue": "backoff", "attempts": 4, "sentBy": "NodeAdd"}
    assert why.no_record_report(waiting, again).endswith(
        "it waits out its backoff after a failed attempt, 4 attempt(s) so far, sent back by "
        "NodeAdd."
    )


def quota_object(
    namespace: str, minimum: dict[str, str], maximum: dict[str, str], used: Any
) -> Any:
    return {
        "metadata": {"namespace": namespace, "name": "q"},
        "spec": {"min": minimum, "max": maximum},
        "status": {"used": used},
    }


def test_quota_rows_show_used_min_and_max_per_resource() -> None:
    rows = tables.quota_rows(
        [quota_object("a", {"cpu": "2", "memory": "1Gi"}, {"cpu": "4"}, {"cpu": "1500m"})]
    )
    assert rows == [
        {"namespace": "a", "name": "q", "resource": "cpu", "used": "1500m", "min": "2",
         "max": "4"},
        {"namespace": "a", "name": "q", "resource": "memory", "used": "0", "min": "1Gi",
         "max": "unlimited"},
    ]  # fmt: skip
    text = tables.columns(rows, tables.QUOTA_HEADERS)
    assert text.splitlines()[0].split() == ["NAMESPACE", "NAME", "RESOURCE", "USED", "MIN", "MAX"]
    assert text.splitlines()[1].split() == ["a", "q", "cpu", "1500m", "2", "4"]


def test_reservation_rows_show_what_is_held_where_and_by_whom() -> None:
    objects = [
        {
            "metadata": {"name": "r1"},
            "spec": {"owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}]},
            "status": {
                "phase": "Available",
                "nodeName": "n1",
                "allocatable": {"cpu": "2"},
                "allocated": {"cpu": "1"},
                "currentOwners": [{"namespace": "ns", "name": "web-1"}],
            },
        },
        {"metadata": {"name": "r2"}, "spec": {"owners": []}, "status": {"nodeName": "n2"}},
    ]
    rows = tables.reservation_rows(objects, node="n1")
    assert rows == [
        {"name": "r1", "node": "n1", "phase": "Available", "allocatable": "cpu=2",
         "allocated": "cpu=1", "owners": "pods app=web", "current": "ns/web-1"},
    ]  # fmt: skip
    assert [r["name"] for r in tables.reservation_rows(objects)] == ["r1", "r2"]


def test_top_rows_compare_reported_usage_with_the_node_thresholds() -> None:
    metric = load.metric("n1", "3", "2Gi")
    annotated = node("n2")
    annotated["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 90}}'
    }
    rows = tables.top_rows(
        [metric, load.metric("n2", "3")],
        [node("n1"), annotated],
        LoadAwareArgs.parse({}),
        now=load.EPOCH.timestamp() + load.NOW,
    )
    first, second = rows
    assert (first["cpu%"], first["cpu_threshold"], first["state"]) == (
        "75%",
        "65%",
        "over threshold",
    )
    assert (first["memory%"], first["memory_threshold"], first["age"]) == ("25%", "95%", "10s")
    assert (second["cpu_threshold"], second["state"]) == ("90%", "ok")


def test_scheduler_service_is_parsed_and_a_bad_one_is_refused() -> None:
    assert ServiceRef.parse("berth-system/berth-scheduler:http").proxy_name == (
        "berth-scheduler:http"
    )
    assert ServiceRef.parse("ns/svc").proxy_name == "svc"
    with pytest.raises(PluginError, match="expected NAMESPACE/NAME"):
        ServiceRef.parse("svc")


def error(status: int, body: dict[str, Any]) -> ApiException:
    err = ApiException(status=status, reason="reason")
    err.body = json.dumps(body).encode()
    return err


def test_errors_are_one_line_and_say_which_kind_of_failure() -> None:
    service = ServiceRef("berth-system", "berth-scheduler", "http")
    assert api_error("pod ns/p", error(404, {"message": 'pods "p" not found'})) == (
        "pod ns/p not found"
    )
    assert api_error("pod ns/p", error(403, {"message": "forbidden"})).startswith(
        "no access to pod ns/p"
    )
    denied = scheduler_error(
        service, error(403, {"message": "forbidden"}), {"message": "forbidden"}
    )
    assert denied.startswith("no access to the scheduler")
    assert "services/proxy" in denied
    down = {"kind": "Status", "message": 'no endpoints available for service "berth-scheduler"'}
    assert scheduler_error(service, error(503, down), down).startswith("scheduler unreachable")
    for message in (denied, scheduler_error(service, error(503, down), down)):
        assert "\n" not in message


def test_the_kubectl_flags_come_after_the_subcommand() -> None:
    options = parser().parse_args(
        ["why", "pod/p", "-n", "ns", "--kubeconfig", "k", "--context", "c", "-o", "json"]
    )
    assert (options.pod, options.namespace, options.kubeconfig, options.context) == (
        "pod/p", "ns", "k", "c",
    )  # fmt: skip
    assert options.output == "json"
    assert parser().parse_args(["top", "nodes"]).what == "nodes"
    assert parser().parse_args(["reservations", "n1"]).node == "n1"
