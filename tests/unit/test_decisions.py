"""The decision record: which plugin rejected which nodes, each plugin's own explanation
(quota arithmetic, reservation verdicts, load figures, NUMA zones), what would unblock the
pod, and a ledger that holds pending pods only, bounded."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from berth.health import HealthServer
from berth.kubectl import why
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.decisions.http import (
    NODE_PATH,
    PATH,
    Handler,
    node_view_handler,
    pod_decision_handler,
)
from berth.scheduler.decisions.ledger import DecisionLedger
from berth.scheduler.decisions.record import Decision, of_attempt
from berth.scheduler.framework.interface import PostFilterResult
from berth.scheduler.framework.messages import fit_message
from tests.unit import test_loadaware as load
from tests.unit import test_numa as numa
from tests.unit.plugins import test_reservation as rsv
from tests.unit.plugins.test_capacityscheduling import GPU, cluster, gpu_pod
from tests.unit.scheduler_fixtures import Env, Json, make_env, node, pod

AFFINITY = "scheduling.koordinator.sh/reservation-affinity"


def decision(env: Env, raw: Json, result: PostFilterResult | None = None) -> Decision:
    state, pod_info, diagnosis = env.diagnose(raw)
    result = result or PostFilterResult()
    message = fit_message(diagnosis, result.message)
    names = env.view.nodes.names
    return of_attempt(env.plugins, state, pod_info, diagnosis, result, message, names)


def test_each_reason_is_charged_to_the_filter_that_gave_it_with_example_nodes() -> None:
    env = make_env(
        node("small-1", cpu="1"),
        node("small-2", cpu="1"),
        node("tainted", cpu="8", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
    )
    made = decision(env, pod("p", "2"))
    assert made.prefilter is None
    grouped = {(r.plugin, r.reason): (r.nodes, r.examples) for r in made.rejections}
    assert grouped == {
        ("NodeResourcesFit", "Insufficient cpu"): (2, ("small-1", "small-2")),
        ("TaintToleration", "node(s) had untolerated taint {gpu: }"): (1, ("tainted",)),
    }
    assert made.rejections[0].plugin == "NodeResourcesFit"  # most nodes first
    assert made.plugins == {"NodeResourcesFit", "TaintToleration"}
    assert any("Insufficient cpu on 2 node(s)" in hint for hint in made.unblock)
    assert made.message.startswith("0/3 nodes are available:")


def test_quota_max_carries_the_arithmetic_of_the_governing_quota() -> None:
    env = cluster(*(gpu_pod(f"a{i}", "a", node_name="n1") for i in range(6)))
    made = decision(env, gpu_pod("more", "a"))
    assert made.prefilter is not None
    assert made.prefilter.plugin == "CapacityScheduling"
    assert "ElasticQuota a is more than Max" in made.prefilter.reason
    quota = made.details["CapacityScheduling"]
    assert quota["quota"] == "a/quota-a"
    assert quota["resources"][GPU] == {
        "used": "6", "nominated": "0", "requested": "1", "min": "4", "max": "6",
    }  # fmt: skip
    assert quota["total"][GPU] == {"used": "6", "nominated": "0", "min": "10"}
    assert quota["rejection"]["reason"] == "OverMax"
    assert made.plugins == {"CapacityScheduling"}
    assert any("max is 6" in hint for hint in made.unblock)


def test_sum_of_mins_is_shown_over_all_quotas() -> None:
    # a uses 4 (its min), b 6 (its min): all 10 GPUs of Σmin are in use.
    bound = [gpu_pod(f"a{i}", "a", node_name="n1") for i in range(4)]
    bound += [gpu_pod(f"b{i}", "b", node_name="n2") for i in range(5)]
    bound.append(gpu_pod("b5", "b", node_name="n1"))
    made = decision(cluster(*bound), gpu_pod("more", "a"))
    quota = made.details["CapacityScheduling"]
    assert quota["rejection"]["reason"] == "OverMinTotal"
    assert quota["total"][GPU] == {"used": "10", "nominated": "0", "min": "10"}
    assert any("Σused 10, Σmin 10" in hint for hint in made.unblock)


def test_a_pod_without_quota_says_so() -> None:
    made = decision(cluster(), pod("huge", "100"))
    assert made.details["CapacityScheduling"] == {"quota": None}


def test_reservation_verdicts_say_why_each_one_is_not_usable() -> None:
    env = rsv.env(
        rsv.reservation("gold", "2", labels={"tier": "gold"}, phase="Pending"),
        rsv.reservation("silver", "2", node_name="n2", labels={"tier": "silver"}),
    )
    wanted = json.dumps({"reservationSelector": {"tier": "gold"}})
    raw = rsv.web("w", "1")
    raw["metadata"]["annotations"] = {AFFINITY: wanted}
    made = decision(env, raw)
    assert made.prefilter is not None
    assert made.prefilter.reason == (
        "no Reservation matches the pod's reservation-affinity "
        "(silver: does not match the pod's reservation-affinity)"
    )
    detail = made.details["Reservation"]
    assert detail["affinity"] == {"name": None, "selector": {"tier": "gold"}}
    verdicts = {v["name"]: v["reason"] for v in detail["reservations"]}
    assert verdicts == {
        "gold": "phase Pending: not holding capacity on a node",
        "silver": "does not match the pod's reservation-affinity",
    }


def test_a_usable_reservation_is_listed_as_usable() -> None:
    env = rsv.env(rsv.reservation("r", "2"))
    state, pod_info, _ = env.diagnose(rsv.web("w", "9"))  # too big for any node
    detail = env.plugin("Reservation").explain(state, pod_info)
    assert detail["reservations"] == [
        {"name": "r", "node": "n1", "usable": True, "reason": "usable", "remaining": {"cpu": "2"}}
    ]


def test_load_figures_show_the_percentage_and_the_threshold_compared() -> None:
    env = load.env(node("n1"), load.metric("n1", "3"))
    made = decision(env, load.cpu_pod("p", "1"))
    (rejection,) = made.rejections
    assert (rejection.plugin, rejection.reason) == (
        "LoadAwareScheduling",
        "node(s) cpu usage exceed threshold",
    )
    figures = made.details["LoadAwareScheduling"]["nodes"]["n1"]
    # The latest report's 3 cpu of 4: 75% against the default 65%.
    assert figures["resources"]["cpu"] == {
        "usage": "3", "allocatable": "4", "percent": 75, "threshold": 65,
    }  # fmt: skip
    assert figures["verdict"] == "node(s) cpu usage exceed threshold"
    assert figures["compared"] == "usage"
    assert figures["reportAgeSeconds"] == 10.0
    assert figures["expired"] is False


def test_numa_zones_show_what_is_free_after_pending() -> None:
    env = numa.env(node("n1", cpu="12", memory="64Gi"), numa.nrt("n1", ["2", "2"]), pending=True)
    made = decision(env, numa.numa_pod("p", "3"))
    (rejection,) = made.rejections
    assert rejection.plugin == "NodeResourceTopologyMatch"
    assert rejection.reason == "cannot align container: c0"
    figures = made.details["NodeResourceTopologyMatch"]["nodes"]["n1"]
    assert figures["fits"] is False
    assert figures["zones"]["node-0"]["cpu"] == "2"
    assert figures["zones"]["node-1"]["cpu"] == "2"


def test_preemption_is_recorded_and_suggested() -> None:
    env = make_env(node("n1", cpu="1"))
    tried = PostFilterResult(nominated_node="n1", attempted=True, victims=2)
    made = decision(env, pod("p", "2"), tried)
    assert made.preemption.nominated_node == "n1"
    assert made.preemption.victims == 2
    assert "evicting 2 pod(s) on n1" in made.unblock[0]


def test_a_plugin_that_fails_to_explain_does_not_lose_the_record() -> None:
    env = load.env(node("n1"), load.metric("n1", "3"))
    plugin = env.plugin("LoadAwareScheduling")

    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    plugin.explain = broken
    made = decision(env, load.cpu_pod("p", "1"))
    assert made.details["LoadAwareScheduling"] == {"error": "RuntimeError('boom')"}
    assert made.rejections


def _record(name: str, namespace: str = "ns", plugin: str = "NodeResourcesFit") -> Decision:
    env = make_env(node("n1", cpu="1"))
    raw = pod(name, "2", namespace=namespace)
    return decision(env, raw)


def test_the_ledger_is_bounded_least_recently_recorded_first() -> None:
    ledger = DecisionLedger(capacity=2)
    for name in ("a", "b", "a", "c"):
        ledger.record(_record(name))
    assert len(ledger) == 2
    assert ledger.get("ns", "b") is None
    assert ledger.get("ns", "a") is not None
    assert ledger.get("ns", "c") is not None


def test_binding_or_deleting_a_pod_drops_its_record_and_a_namesake_does_not() -> None:
    ledger = DecisionLedger()
    for name in ("bound", "deleted", "renamed"):
        ledger.record(_record(name))
    ledger.on_pod("MODIFIED", pod("bound", "2", namespace="ns", node_name="n1"))
    ledger.on_pod("DELETED", pod("deleted", "2", namespace="ns"))
    namesake = pod("renamed", "2", namespace="ns", node_name="n1")
    namesake["metadata"]["uid"] = "another"
    ledger.on_pod("MODIFIED", namesake)
    assert ledger.get("ns", "bound") is None
    assert ledger.get("ns", "deleted") is None
    assert ledger.get("ns", "renamed") is not None
    assert ledger.by_plugin() == {("NodeResourcesFit", "berth-scheduler"): 1}


@contextlib.asynccontextmanager
async def serving(path: str, handler: Handler) -> AsyncIterator[str]:
    """One debug route on a health server of its own; yields the server's base URL."""
    server = HealthServer("127.0.0.1", 0)
    server.add_get(path, handler)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, DecisionLedger, list[bool]]]:
    ledger = DecisionLedger()
    leading = [False]
    async with serving(PATH, pod_decision_handler(ledger, lambda: leading[0])) as base:
        yield base, ledger, leading


async def test_the_route_serves_records_as_json_and_a_standby_answers_503(
    served: tuple[str, DecisionLedger, list[bool]],
) -> None:
    base, ledger, leading = served
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/debug/pods/ns/a") as response:
            assert response.status == 503
        leading[0] = True
        async with http.get(f"{base}/debug/pods/ns/a") as response:
            assert response.status == 404
            assert (await response.json()) == {"error": "no decision recorded for pod ns/a"}
        ledger.record(_record("a"))
        async with http.get(f"{base}/debug/pods/ns/a") as response:
            assert response.status == 200
            body = await response.json()
    assert body["name"] == "a"
    assert body["rejections"][0]["reason"] == "Insufficient cpu"
    assert body["rejections"][0]["examples"] == ["n1"]


async def test_a_pod_with_no_record_is_answered_with_where_it_waits() -> None:
    """Never tried and its record gone read differently: the queue says where it is."""
    places = {("ns", "a"): {"queue": "active", "attempts": 0, "waitingSeconds": 31.0}}
    handler = pod_decision_handler(
        DecisionLedger(), lambda: True, lambda ns, name: places.get((ns, name))
    )
    async with serving(PATH, handler) as base, aiohttp.ClientSession() as http:
        async with http.get(f"{base}/debug/pods/ns/a") as response:
            assert response.status == 404
            assert (await response.json()) == {
                "error": "no decision recorded for pod ns/a",
                "queued": places[("ns", "a")],
            }
        async with http.get(f"{base}/debug/pods/ns/b") as response:
            assert (await response.json()) == {"error": "no decision recorded for pod ns/b"}


async def test_the_node_route_shows_what_the_view_counts_there() -> None:
    """A node that looks free from outside while the scheduler refuses it: the route
    lists every pod the view counts on it (an assumed one, whose binding the watch has not
    shown yet, marked) and the pods nominated to it, beside allocatable and requested."""
    env = make_env(
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod("bound", "1", node_name="n1"),
        pod("leaving", "1", node_name="n1", deleting=True),
        pod("preemptor", "2", priority=100, nominated="n1"),
    )
    env.view.assume(PodInfo.from_pod(pod("assumed", "1")), "n1")
    leading = [False]
    async with (
        serving(NODE_PATH, node_view_handler(env.view, lambda: leading[0])) as base,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"{base}/debug/nodes/n1") as response:
            assert response.status == 503
        leading[0] = True
        async with http.get(f"{base}/debug/nodes/gone") as response:
            assert response.status == 404
        async with http.get(f"{base}/debug/nodes/n1") as response:
            assert response.status == 200
            body = await response.json()
    assert body["requested"]["cpu"] == 3000
    assert body["allocatable"]["cpu"] == 4000
    assert body["pods"] == [
        {"pod": "default/assumed", "requests": {"cpu": 1000}, "assumed": True},
        {"pod": "default/bound", "requests": {"cpu": 1000}},
        {"pod": "default/leaving", "requests": {"cpu": 1000}, "deleting": True},
    ]
    assert body["nominated"] == [
        {"pod": "default/preemptor", "priority": 100, "requests": {"cpu": 2000}}
    ]


def test_why_names_the_reservations_holding_what_the_pod_lacks() -> None:
    """An otherwise empty 2-cpu node where a Reservation holds 1500m for other owners; a
    1-cpu pod pinned there lacks cpu: the report names the reservation, its owners and
    the node's free capacity after it, and the hint says so."""
    env = make_env(node("n1", cpu="2"), rsv.reservation("held", "1500m"), profile=rsv.PROFILE)
    made = decision(env, pod("p", "1"))
    assert made.details["Reservation"]["holding"] == [
        {
            "node": "n1",
            "free": {"cpu": "500m"},
            "reservations": [
                {"name": "held", "holds": {"cpu": "1500m"}, "owners": "pods labelled app=web"}
            ],
        }
    ]
    assert any(
        "Insufficient cpu on 1 node(s)" in hint and "Reservation held on n1" in hint
        for hint in made.unblock
    )
    text = why.report(json.loads(json.dumps(made.to_json())))
    assert (
        "  n1 (free after them: cpu=500m): held holds cpu=1500m for pods labelled app=web" in text
    )
