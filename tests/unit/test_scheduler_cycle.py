"""One scheduling attempt (filters, scores, messages) checked against kube-scheduler.

Expected messages are kube-scheduler's own (FitError.Error in pkg/scheduler/framework and
each plugin's ErrReason); scores follow its formulas (noderesources least/most allocated,
balanced_allocation, tainttoleration and nodeaffinity normalisation, default weights).
"""

from __future__ import annotations

import numpy as np
import pytest

from berth.scheduler.cycle import Cycle
from berth.scheduler.framework import CycleState
from berth.scheduler.messages import NO_NODES, fit_message
from berth.scheduler.podinfo import PodInfo
from tests.unit.scheduler_fixtures import (
    Env,
    Json,
    container,
    expr,
    host_port,
    info,
    make_env,
    node,
    pod,
    preferred_affinity,
    required_affinity,
    taint,
)

Mi = 1024**2
Gi = 1024**3


def scores(env: Env, plugin: str, raw: Json, *names: str) -> list[int]:
    """One score plugin's normalised scores for the named nodes, in that order."""
    nodes = env.view.nodes
    rows = np.array([nodes.index[n] for n in names], dtype=np.int64)
    result = env.plugin(plugin).score(CycleState(), info(raw), nodes, rows)
    return [int(s) for s in result]


# -- failure messages ----------------------------------------------------------------------


def test_message_counts_each_node_once_per_reason() -> None:
    env = make_env(
        node("small", cpu="1"),
        node("gpu-1", taints=[taint("dedicated", "gpu")]),
        node("gpu-2", taints=[taint("dedicated", "gpu")]),
    )
    assert env.message(pod("p", "2")) == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_taint_without_value() -> None:
    env = make_env(node("cp", taints=[taint("node-role.kubernetes.io/control-plane")]))
    assert env.message(pod("p", "1")) == (
        "0/1 nodes are available: 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }."
    )


def test_reasons_are_sorted_as_text_not_by_count() -> None:
    nodes = [node(f"full-{i}", pods="0") for i in range(10)]
    nodes += [node(f"tiny-{i}", memory="1Gi") for i in range(2)]
    env = make_env(*nodes)
    assert env.message(pod("p", "1", "2Gi")) == (
        "0/12 nodes are available: 10 Too many pods, 2 Insufficient memory."
    )


def test_too_many_pods() -> None:
    env = make_env(
        node("n1", pods="2"),
        pod("a", "100m", node_name="n1"),
        pod("b", "100m", node_name="n1"),
    )
    assert env.message(pod("p", "100m")) == "0/1 nodes are available: 1 Too many pods."


def test_a_pod_requesting_nothing_still_needs_a_pod_slot() -> None:
    env = make_env(node("n1", pods="1"), pod("a", node_name="n1"))
    assert env.message(pod("p")) == "0/1 nodes are available: 1 Too many pods."


def test_cpu_and_memory_both_counted_for_one_node() -> None:
    env = make_env(node("both", cpu="1", memory="1Gi"), node("memory", cpu="8", memory="1Gi"))
    assert env.message(pod("p", "2", "2Gi")) == (
        "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."
    )


def test_too_many_pods_and_insufficient_cpu_on_one_node() -> None:
    env = make_env(node("n1", cpu="1", pods="1"), pod("a", "500m", node_name="n1"))
    assert env.message(pod("p", "1")) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Too many pods."
    )


def test_insufficient_extended_resource() -> None:
    env = make_env(
        node("gpu", extra={"nvidia.com/gpu": "1"}),
        node("plain"),
        pod("user", "1", requests={"nvidia.com/gpu": "1"}, node_name="gpu"),
    )
    assert env.message(pod("p", "1", requests={"nvidia.com/gpu": "1"})) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )


def test_empty_cluster() -> None:
    env = make_env()
    assert env.message(pod("p", "1")) == NO_NODES == "no nodes available to schedule pods"


def test_post_filter_message_is_appended() -> None:
    env = make_env(node("n1", cpu="1"))
    diagnosis = env.failure(pod("p", "2")).diagnosis
    assert fit_message(diagnosis, "preemption: not eligible due to preemptionPolicy=Never.") == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )


# -- first failing filter ------------------------------------------------------------------


FILTER_FAILURES = ("unschedulable", "taint", "affinity", "ports", "cpu")


@pytest.mark.parametrize(
    ("first", "reason", "resolvable"),
    [
        ("unschedulable", "node(s) were unschedulable", False),
        ("taint", "node(s) had untolerated taint {k: v}", False),
        ("affinity", "node(s) didn't match Pod's node affinity/selector", False),
        ("ports", "node(s) didn't have free ports for the requested pod ports", True),
        ("cpu", "Insufficient cpu", True),
    ],
)
def test_a_node_is_charged_to_the_first_failing_filter_only(
    first: str, reason: str, resolvable: bool
) -> None:
    # The node fails `first` and every filter after it in kube-scheduler's order.
    failing = set(FILTER_FAILURES[FILTER_FAILURES.index(first) :])
    env = make_env(
        node(
            "n1",
            cpu="2",
            labels={"zone": "b" if "affinity" in failing else "a"},
            taints=[taint("k", "v")] if "taint" in failing else (),
            unschedulable="unschedulable" in failing,
        ),
        pod("holder", "1", ports=[host_port(80)], node_name="n1"),
    )
    wanted = pod(
        "p",
        "2" if "cpu" in failing else "1",
        ports=[host_port(80 if "ports" in failing else 81)],
        node_selector={"zone": "a"},
    )
    failure = env.failure(wanted)
    assert str(failure) == f"0/1 nodes are available: 1 {reason}."
    assert bool(failure.diagnosis.resolvable_rows[0]) is resolvable


# -- NodeUnschedulable, NodeName --------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "fits"),
    [
        (None, False),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
            True,
        ),
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoExecute",
            },
            False,
        ),
        ({"key": "node.kubernetes.io/unschedulable", "value": "x", "effect": "NoSchedule"}, False),
    ],
    ids=["none", "exact", "any-effect", "everything", "wrong-effect", "wrong-value"],
)
def test_cordoned_node(toleration: Json | None, fits: bool) -> None:
    env = make_env(node("cordoned", unschedulable=True))
    wanted = pod("p", "1", tolerations=[toleration] if toleration else ())
    if fits:
        assert env.node_for(wanted) == "cordoned"
    else:
        assert env.message(wanted) == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_node_name() -> None:
    env = make_env(node("n1"), node("n2"))
    assert env.feasible(pod("p", "1", node_name="n2", phase="Pending")) == ["n2"]
    assert env.message(pod("p", "1", node_name="ghost", phase="Pending")) == (
        "0/2 nodes are available: 2 node(s) didn't match the requested node name."
    )


# -- TaintToleration filter ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taints", "tolerations", "fits"),
    [
        ([taint("k", "v")], [{"key": "k", "value": "v", "effect": "NoSchedule"}], True),
        ([taint("k", "v")], [{"key": "k", "operator": "Equal", "value": "v"}], True),
        ([taint("k", "v")], [{"key": "k", "operator": "Exists"}], True),
        ([taint("k", "v")], [{"key": "k", "value": "w"}], False),
        ([taint("k", "v")], [{"key": "k", "value": "v", "effect": "NoExecute"}], False),
        ([taint("k", "v", "NoExecute")], [], False),
        ([taint("k", "v", "PreferNoSchedule")], [], True),
        ([taint("a", "1"), taint("b", "2")], [{"key": "a", "operator": "Exists"}], False),
    ],
    ids=[
        "equal",
        "explicit-equal",
        "exists",
        "other-value",
        "other-effect",
        "no-execute",
        "prefer-only",
        "second-taint",
    ],
)
def test_taint_toleration_filter(taints: list[Json], tolerations: list[Json], fits: bool) -> None:
    env = make_env(node("n1", taints=taints))
    assert env.feasible(pod("p", "1", tolerations=tolerations)) == (["n1"] if fits else [])


def test_first_untolerated_taint_is_named() -> None:
    env = make_env(node("n1", taints=[taint("a", "1"), taint("b", "2")]))
    wanted = pod("p", "1", tolerations=[{"key": "a", "operator": "Exists"}])
    assert env.message(wanted) == "0/1 nodes are available: 1 node(s) had untolerated taint {b: 2}."


# -- NodeAffinity filter -------------------------------------------------------------------


AFFINITY_NODES = (
    node("a", labels={"zone": "a", "gen": "3"}),
    node("b", labels={"zone": "b", "gen": "5"}),
    node("c"),
)


@pytest.mark.parametrize(
    ("selector", "terms", "feasible"),
    [
        ({"zone": "a"}, None, ["a"]),
        ({"zone": "a", "gen": "5"}, None, []),
        (None, [{"matchExpressions": [expr("zone", "In", "a", "b")]}], ["a", "b"]),
        (None, [{"matchExpressions": [expr("zone", "NotIn", "a")]}], ["b", "c"]),
        (None, [{"matchExpressions": [expr("zone", "Exists")]}], ["a", "b"]),
        (None, [{"matchExpressions": [expr("zone", "DoesNotExist")]}], ["c"]),
        (None, [{"matchExpressions": [expr("gen", "Gt", "4")]}], ["b"]),
        (None, [{"matchExpressions": [expr("gen", "Lt", "4")]}], ["a"]),
        (None, [{"matchExpressions": [expr("gen", "Gt", "5")]}], []),
        (
            None,
            [
                {"matchExpressions": [expr("zone", "In", "a")]},
                {"matchExpressions": [expr("gen", "Gt", "4")]},
            ],
            ["a", "b"],
        ),
        (
            None,
            [{"matchExpressions": [expr("zone", "In", "a", "b"), expr("gen", "Lt", "4")]}],
            ["a"],
        ),
        (None, [{"matchFields": [expr("metadata.name", "NotIn", "a")]}], ["b", "c"]),
        (None, [{"matchFields": [expr("metadata.name", "In", "b")]}], ["b"]),
        (
            None,
            [
                {
                    "matchFields": [expr("metadata.name", "In", "a", "b")],
                    "matchExpressions": [expr("gen", "Gt", "4")],
                }
            ],
            ["b"],
        ),
        ({"zone": "a"}, [{"matchExpressions": [expr("gen", "Gt", "4")]}], []),
        (None, [{}], []),
    ],
    ids=[
        "selector",
        "selector-all-keys",
        "in",
        "not-in-matches-absent",
        "exists",
        "does-not-exist",
        "gt",
        "lt",
        "gt-is-strict",
        "terms-ored",
        "expressions-anded",
        "field-not-in",
        "field-in",
        "field-and-expression",
        "selector-and-affinity",
        "empty-term-matches-nothing",
    ],
)
def test_node_affinity_filter(
    selector: dict[str, str] | None, terms: list[Json] | None, feasible: list[str]
) -> None:
    env = make_env(*AFFINITY_NODES)
    affinity = required_affinity(*terms) if terms is not None else None
    assert env.feasible(pod("p", "1", node_selector=selector, affinity=affinity)) == feasible


def test_node_affinity_message() -> None:
    env = make_env(*AFFINITY_NODES)
    affinity = required_affinity({"matchExpressions": [expr("zone", "In", "z")]})
    assert env.message(pod("p", "1", affinity=affinity)) == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    assert env.message(pod("p", "1", node_selector={"zone": "z"})) == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )


@pytest.mark.parametrize(("label", "matches"), [("7", True), ("007", True), ("1_0", False)])
def test_gt_parses_labels_as_go_integers(label: str, matches: bool) -> None:
    # kube parses with strconv.ParseInt(value, 10, 64): no underscores in base 10.
    env = make_env(node("n1", labels={"gen": label}))
    affinity = required_affinity({"matchExpressions": [expr("gen", "Gt", "5")]})
    assert env.feasible(pod("p", "1", affinity=affinity)) == (["n1"] if matches else [])


def test_metadata_name_pin_reports_the_other_nodes_as_prefiltered() -> None:
    # NodeAffinity's PreFilter turns matchFields metadata.name In into a node set; nodes
    # outside it are "node(s) didn't satisfy plugin(s) [NodeAffinity]" (what DaemonSet pods
    # pinned to a full node show).
    env = make_env(node("n1"), node("n2", cpu="1"), node("n3"))
    affinity = required_affinity({"matchFields": [expr("metadata.name", "In", "n2")]})
    assert env.message(pod("p", "2", affinity=affinity)) == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


# -- NodePorts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "wanted", "conflict"),
    [
        (host_port(8080), host_port(8080), True),
        (host_port(8080), host_port(8080, protocol="UDP"), False),
        (host_port(8080), host_port(8081), False),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="10.0.0.2"), False),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="10.0.0.1"), True),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="0.0.0.0"), True),
        (host_port(8080, host_ip="0.0.0.0"), host_port(8080, host_ip="10.0.0.1"), True),
        (host_port(8080, host_ip=""), host_port(8080, host_ip="10.0.0.3"), True),
        (
            host_port(8080, host_ip="10.0.0.1", protocol="UDP"),
            host_port(8080, host_ip="10.0.0.1", protocol="TCP"),
            False,
        ),
        (host_port(53, protocol="SCTP"), host_port(53, protocol="SCTP"), True),
    ],
    ids=[
        "same",
        "other-protocol",
        "other-port",
        "other-ip",
        "same-ip",
        "wanted-any-ip",
        "used-any-ip",
        "empty-ip-is-any",
        "same-ip-other-protocol",
        "sctp",
    ],
)
def test_host_ports(used: Json, wanted: Json, conflict: bool) -> None:
    env = make_env(node("n1"), pod("holder", "1", ports=[used], node_name="n1"))
    if conflict:
        assert env.message(pod("p", "1", ports=[wanted])) == (
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        )
    else:
        assert env.node_for(pod("p", "1", ports=[wanted])) == "n1"


def test_container_ports_without_host_port_never_conflict() -> None:
    plain = {"containerPort": 8080}
    env = make_env(node("n1"), pod("holder", "1", ports=[plain], node_name="n1"))
    assert env.node_for(pod("p", "1", ports=[plain])) == "n1"


def test_host_port_is_free_again_after_the_pod_is_deleted() -> None:
    holder = pod("holder", "1", ports=[host_port(80)], node_name="n1")
    env = make_env(node("n1"), holder)
    env.view.on_pod("DELETED", holder)
    assert env.node_for(pod("p", "1", ports=[host_port(80)])) == "n1"


def test_sidecar_host_ports_count() -> None:
    holder = pod(
        "holder",
        node_name="n1",
        containers=[container("100m")],
        init_containers=[
            container(name="proxy", restart_policy="Always", ports=[host_port(15000)])
        ],
    )
    env = make_env(node("n1"), holder)
    assert env.feasible(pod("p", "1", ports=[host_port(15000)])) == []


def test_one_shot_init_container_host_ports_do_not_count() -> None:
    # kube-scheduler takes host ports from containers and restartable init containers
    # only (nodeports plugin, kubernetes#132040): a finished init container holds none.
    holder = pod(
        "holder",
        node_name="n1",
        containers=[container("100m")],
        init_containers=[container(name="setup", ports=[host_port(9000)])],
    )
    env = make_env(node("n1"), holder)
    assert env.feasible(pod("p", "1", ports=[host_port(9000)])) == ["n1"]


# -- scoring --------------------------------------------------------------------------------


def test_least_allocated_prefers_the_emptier_node() -> None:
    env = make_env(node("empty"), node("half"), pod("load", "2", "4Gi", node_name="half"))
    wanted = pod("p", "1", "2Gi")
    # (allocatable - requested) * 100 / allocatable per resource, averaged by weight.
    assert scores(env, "NodeResourcesFit", wanted, "empty", "half") == [75, 25]
    assert env.node_for(wanted) == "empty"


def test_least_allocated_counts_requestless_pods_as_100m_200mi() -> None:
    env = make_env(node("n1"), node("n2"), pod("idle", node_name="n2"))
    # n1: cpu (4000-100)*100/4000 = 97, memory (8192-200)*100/8192 = 97.
    # n2: cpu (4000-200)*100/4000 = 95, memory (8192-400)*100/8192 = 95.
    assert scores(env, "NodeResourcesFit", pod("p"), "n1", "n2") == [97, 95]
    assert env.node_for(pod("p")) == "n1"


def test_most_allocated_prefers_the_fuller_node() -> None:
    profile = {
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ]
    }
    env = make_env(
        node("empty"), node("half"), pod("load", "2", "4Gi", node_name="half"), profile=profile
    )
    wanted = pod("p", "1", "2Gi")
    assert scores(env, "NodeResourcesFit", wanted, "empty", "half") == [25, 75]
    assert env.node_for(wanted) == "half"


def test_resource_weights_in_the_scoring_strategy() -> None:
    strategy = {
        "type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}],
    }
    profile = {
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}]
    }
    env = make_env(node("n1"), profile=profile)
    # cpu (4000-1000)*100/4000 = 75 weighted 3, memory (8192-4096)*100/8192 = 50 weighted 1.
    assert scores(env, "NodeResourcesFit", pod("p", "1", "4Gi"), "n1") == [(75 * 3 + 50) // 4]


def test_scoring_skips_an_extended_resource_the_pod_does_not_request() -> None:
    # calculateResourceAllocatableRequest returns (0, 0) for an extended resource the pod
    # does not request, so it drops out of the weighted average.
    strategy = {
        "type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 1}],
    }
    profile = {
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}]
    }
    env = make_env(
        node("gpu", extra={"nvidia.com/gpu": "4"}),
        pod("trainer", requests={"nvidia.com/gpu": "4"}, node_name="gpu"),
        profile=profile,
    )
    # cpu only: (4000 - 100 - 1000) * 100 / 4000 = 72.
    assert scores(env, "NodeResourcesFit", pod("p", "1"), "gpu") == [72]


def kube_balanced(cpu_fraction: float, memory_fraction: float) -> int:
    """balancedResourceScorer for two resources: (1 - |f1 - f2| / 2) * 100, fractions <= 1."""
    f1, f2 = min(cpu_fraction, 1.0), min(memory_fraction, 1.0)
    return int((1 - abs((f1 - f2) / 2)) * 100)


def kube_balanced_change(with_pod: int, without_pod: int) -> int:
    """v1.36 (kubernetes#135573): the change in balance the pod brings, mapped to 50..100."""
    return 50 + (50 + with_pod - without_pod) // 2


@pytest.mark.parametrize(
    ("cpu", "memory", "expected"),
    [
        # An empty node is perfectly balanced (100) before the pod: the score is
        # 50 + (balance with the pod - 50) / 2.
        ("1", "2Gi", 75),
        ("2", "1Gi", 65),
        ("4", "0", 50),
        ("6", "8Gi", 75),
        ("1200m", "800Mi", 69),
    ],
)
def test_balanced_allocation_score(cpu: str, memory: str, expected: int) -> None:
    env = make_env(node("n1"))
    assert scores(env, "NodeResourcesBalancedAllocation", pod("p", cpu, memory), "n1") == [expected]


def test_balanced_allocation_matches_kube_formula_across_usages() -> None:
    cpu_steps = range(0, 4001, 250)
    memory_steps = range(0, 8 * 1024 + 1, 512)
    objects: list[Json] = []
    expected: list[int] = []
    for i, used_cpu in enumerate(cpu_steps):
        for j, used_memory in enumerate(memory_steps):
            name = f"n-{i}-{j}"
            objects.append(node(name))
            objects.append(pod(f"load-{i}-{j}", f"{used_cpu}m", f"{used_memory}Mi", node_name=name))
            # The incoming pod adds 300m and 700Mi.
            with_pod = kube_balanced((used_cpu + 300) / 4000, (used_memory + 700) / 8192)
            without_pod = kube_balanced(used_cpu / 4000, used_memory / 8192)
            expected.append(kube_balanced_change(with_pod, without_pod))
    env = make_env(*objects)
    names = [n["metadata"]["name"] for n in objects if n["kind"] == "Node"]
    got = scores(env, "NodeResourcesBalancedAllocation", pod("p", "300m", "700Mi"), *names)
    assert got == expected


def test_balanced_allocation_prefers_the_node_the_pod_balances() -> None:
    # "balanced" is even before (100) and lopsided after (82): 66. "lopsided" is uneven
    # before (75) and nearly even after (93): 84. Scoring only the balance with the pod
    # (before v1.36) would have preferred "balanced".
    env = make_env(
        node("balanced"),
        node("lopsided"),
        pod("a", "1", "2Gi", node_name="balanced"),
        pod("b", "2", "100Mi", node_name="lopsided"),
    )
    wanted = pod("p", "100m", "3Gi")
    assert scores(env, "NodeResourcesBalancedAllocation", wanted, "balanced", "lopsided") == [
        66,
        84,
    ]


def test_kube_scheduler_score_case_two_nodes() -> None:
    # Two 4 cpu / 8Gi nodes, one holding 2 cpu / 4Gi, the other 250m / 6Gi; a pod of
    # 500m / 256Mi: NodeResourcesFit 41 / 51, BalancedAllocation 72 / 77, kube-scheduler
    # v1.36 binds to the second node.
    env = make_env(
        node("first"),
        node("second"),
        pod("a", "2", "4Gi", node_name="first"),
        pod("b", "250m", "6Gi", node_name="second"),
    )
    wanted = pod("p", "500m", "256Mi")
    assert scores(env, "NodeResourcesFit", wanted, "first", "second") == [41, 51]
    assert scores(env, "NodeResourcesBalancedAllocation", wanted, "first", "second") == [72, 77]
    assert env.node_for(wanted) == "second"


def test_balanced_allocation_does_not_steer_requestless_pods() -> None:
    # kube-scheduler skips BalancedAllocation for best-effort pods (PreScore returns Skip,
    # kubernetes#129138), so NodeResourcesFit alone decides: "lopsided" scores 73 against
    # "even"'s 71 there, while a balance score would have favoured "even".
    env = make_env(
        node("even", memory="4Gi"),
        node("lopsided", memory="4Gi"),
        pod("a", "1", "1Gi", node_name="even"),
        pod("b", "1800m", "1Mi", node_name="lopsided"),
    )
    best_effort = pod("p")
    assert scores(env, "NodeResourcesFit", best_effort, "even", "lopsided") == [71, 73]
    assert env.node_for(best_effort) == "lopsided"


def test_taint_toleration_score() -> None:
    prefer = "PreferNoSchedule"
    env = make_env(
        node("clean"),
        node("one", taints=[taint("a", "1", prefer)]),
        node("two", taints=[taint("a", "1", prefer), taint("b", "2", prefer)]),
    )
    assert scores(env, "TaintToleration", pod("p", "1"), "clean", "one", "two") == [100, 50, 0]
    tolerant = pod("p", "1", tolerations=[{"key": "a", "operator": "Exists"}])
    assert scores(env, "TaintToleration", tolerant, "clean", "one", "two") == [100, 100, 0]
    # A toleration limited to NoSchedule does not tolerate PreferNoSchedule taints.
    hard_only = pod(
        "p", "1", tolerations=[{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert scores(env, "TaintToleration", hard_only, "clean", "one", "two") == [100, 50, 0]


def test_taint_toleration_prefers_fewer_intolerable_taints() -> None:
    env = make_env(
        node("tainted", taints=[taint("spot", "true", "PreferNoSchedule")]),
        node("clean"),
    )
    assert env.node_for(pod("p", "1")) == "clean"


def test_node_affinity_preferred_terms_weighted() -> None:
    env = make_env(
        node("both", labels={"zone": "a", "disk": "ssd"}),
        node("zone", labels={"zone": "a"}),
        node("disk", labels={"disk": "ssd"}),
        node("none"),
    )
    affinity = preferred_affinity(
        (80, {"matchExpressions": [expr("zone", "In", "a")]}),
        (20, {"matchExpressions": [expr("disk", "In", "ssd")]}),
    )
    wanted = pod("p", "1", affinity=affinity)
    assert scores(env, "NodeAffinity", wanted, "both", "zone", "disk", "none") == [100, 80, 20, 0]
    # Normalised to the best of the nodes scored: 80 -> 100, 20 -> 25.
    assert scores(env, "NodeAffinity", wanted, "zone", "disk", "none") == [100, 25, 0]
    assert env.node_for(wanted) == "both"


def weighted_cluster(profile: Json | None = None) -> Env:
    return make_env(
        node("preferred", labels={"zone": "a"}, taints=[taint("spot", "true", "PreferNoSchedule")]),
        node("clean"),
        profile=profile,
    )


def zone_a_lover() -> Json:
    return pod(
        "p",
        "1",
        "2Gi",
        affinity=preferred_affinity((50, {"matchExpressions": [expr("zone", "In", "a")]})),
    )


def test_default_weights_taint_toleration_outweighs_node_affinity() -> None:
    # TaintToleration (weight 3): preferred 0, clean 100. NodeAffinity (weight 2):
    # preferred 100, clean 0. Resources are equal: clean wins 300 to 200.
    assert weighted_cluster().node_for(zone_a_lover()) == "clean"


def test_configured_weight_changes_the_choice() -> None:
    profile = {"plugins": {"multiPoint": {"enabled": [{"name": "NodeAffinity", "weight": 5}]}}}
    assert weighted_cluster(profile).node_for(zone_a_lover()) == "preferred"


# -- percentageOfNodesToScore ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("all_nodes", "percentage", "expected"),
    [
        (50, None, 50),
        (50, 10, 50),
        (99, None, 99),
        (100, None, 100),
        (100, 30, 100),
        (1000, None, 420),
        (1000, 0, 420),
        (1000, 30, 300),
        (1000, 5, 100),
        (1000, 100, 1000),
        (5000, None, 500),
        (5000, 30, 1500),
        (5000, 1, 100),
        (6000, None, 300),
        (10000, None, 500),
    ],
)
def test_nodes_to_find(all_nodes: int, percentage: int | None, expected: int) -> None:
    env = make_env(percentage=percentage)
    assert env.cycle.nodes_to_find(all_nodes) == expected


def test_profile_percentage_overrides_the_global_one() -> None:
    env = make_env(profile={"percentageOfNodesToScore": 30}, percentage=80)
    assert env.cycle.nodes_to_find(1000) == 300
    assert Cycle(env.plugins, env.view, 80).percentage == 30


def test_only_enough_nodes_are_scored_and_the_search_rotates() -> None:
    env = make_env(*(node(f"n{i:03}") for i in range(200)), percentage=50)
    first = env.schedule(pod("p", "1"))
    assert first.scored == 100
    assert first.row < 100
    second = env.schedule(pod("q", "1"))
    assert second.row >= 100


# -- what counts on a node ---------------------------------------------------------------------


def nominated_cluster(priority: int) -> Env:
    return make_env(
        node("n1"),
        pod("preemptor", "3", priority=priority, nominated="n1", created=1),
    )


@pytest.mark.parametrize(("nominated_priority", "fits"), [(100, False), (200, False), (50, True)])
def test_nominated_pods_hold_capacity_for_equal_or_higher_priority(
    nominated_priority: int, fits: bool
) -> None:
    env = nominated_cluster(nominated_priority)
    wanted = pod("p", "2", priority=100)
    if fits:
        assert env.node_for(wanted) == "n1"
    else:
        assert env.message(wanted) == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_nominated_pod_does_not_hold_capacity_against_itself() -> None:
    env = nominated_cluster(100)
    assert env.node_for(env.view.pods["uid-default-preemptor"].raw) == "n1"


def test_nominated_pods_take_a_pod_slot() -> None:
    env = make_env(node("n1", pods="1"), pod("preemptor", "1", priority=100, nominated="n1"))
    assert env.message(pod("p", "1", priority=100)) == "0/1 nodes are available: 1 Too many pods."


def test_nominated_pods_hold_their_host_ports() -> None:
    # kube-scheduler adds nominated pods to the node (addNominatedPods) before running every
    # filter, NodePorts included.
    env = make_env(
        node("n1"), pod("preemptor", "1", priority=100, nominated="n1", ports=[host_port(80)])
    )
    assert env.message(pod("p", "1", priority=100, ports=[host_port(80)])) == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    )


def test_nomination_ends_when_the_pod_is_bound() -> None:
    env = nominated_cluster(100)
    env.view.on_pod("MODIFIED", pod("preemptor", "3", priority=100, node_name="n1", created=1))
    # Counted once, as a bound pod: 3 of 4 cpus.
    assert env.node_for(pod("p", "1", priority=100)) == "n1"
    assert (
        env.message(pod("p", "2", priority=100)) == "0/1 nodes are available: 1 Insufficient cpu."
    )


def test_pods_of_other_schedulers_count() -> None:
    env = make_env(node("n1"), pod("other", "3", node_name="n1", scheduler="default-scheduler"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_do_not_count(phase: str) -> None:
    env = make_env(node("n1"), pod("done", "4", node_name="n1", phase=phase))
    assert env.node_for(pod("p", "4")) == "n1"


def test_a_pod_that_finishes_frees_its_node() -> None:
    running = pod("job", "4", node_name="n1")
    env = make_env(node("n1"), running)
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.on_pod("MODIFIED", pod("job", "4", node_name="n1", phase="Succeeded"))
    assert env.node_for(pod("p", "4")) == "n1"


def test_terminating_pods_still_count() -> None:
    env = make_env(node("n1"), pod("leaving", "4", node_name="n1", deleting=True))
    assert env.message(pod("p", "1")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_deleted_pod_frees_its_node() -> None:
    bound = pod("a", "4", node_name="n1")
    env = make_env(node("n1"), bound)
    env.view.on_pod("DELETED", bound)
    assert env.node_for(pod("p", "4")) == "n1"


def test_assume_then_forget() -> None:
    env = make_env(node("n1"))
    chosen = info(pod("first", "3"))
    env.view.assume(chosen, "n1")
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.forget(chosen)
    assert env.node_for(pod("p", "2")) == "n1"


def test_assumed_pod_counted_once_when_the_binding_shows_up() -> None:
    env = make_env(node("n1"))
    raw = pod("first", "3")
    env.view.assume(info(raw), "n1")
    env.view.on_pod("MODIFIED", raw)  # the watch still shows it pending
    env.view.on_pod("MODIFIED", pod("first", "3", node_name="n1"))
    assert env.node_for(pod("p", "1")) == "n1"
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.forget(info(raw))  # too late to forget: it is bound
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_node_deleted_and_added_again_keeps_counting_its_pods() -> None:
    n1 = node("n1")
    env = make_env(n1, pod("a", "3", node_name="n1"))
    env.view.on_node("DELETED", n1)
    assert env.message(pod("p", "2")) == NO_NODES
    env.view.on_node("ADDED", n1)
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    assert env.node_for(pod("p", "1")) == "n1"


def test_pods_seen_before_their_node_count_when_it_appears() -> None:
    env = make_env(pod("early", "3", node_name="n1"))
    env.add(node("n1"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_node_slot_reuse_does_not_inherit_the_old_pods() -> None:
    old = node("old")
    env = make_env(old, pod("a", "4", node_name="old"))
    env.view.on_node("DELETED", old)
    env.add(node("new"))
    assert env.node_for(pod("p", "4")) == "new"


def test_node_update_changes_allocatable_and_keeps_pods() -> None:
    env = make_env(node("n1", cpu="2"), pod("a", "1", node_name="n1"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.on_node("MODIFIED", node("n1", cpu="4"))
    assert env.node_for(pod("p", "2")) == "n1"
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_extended_resource_column_appearing_mid_way() -> None:
    env = make_env(node("cpu-only"), pod("a", "3", node_name="cpu-only"))
    env.add(node("gpu", extra={"nvidia.com/gpu": "2"}))
    gpu_pod = pod("trainer", "1", requests={"nvidia.com/gpu": "1"})
    assert env.node_for(gpu_pod) == "gpu"
    env.view.assume(info(gpu_pod), "gpu")
    assert env.message(pod("p", "1", requests={"nvidia.com/gpu": "2"})) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    # cpu-only keeps its 3 cpus requested across the new column.
    assert env.feasible(pod("p", "2")) == ["gpu"]


def test_bound_pod_with_a_resource_no_node_reports() -> None:
    env = make_env(node("n1"), pod("a", "1", requests={"example.com/foo": "1"}, node_name="n1"))
    assert env.message(pod("p", "1", requests={"example.com/foo": "1"})) == (
        "0/1 nodes are available: 1 Insufficient example.com/foo."
    )
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_resource_never_seen_before_with_nominated_pods_around() -> None:
    env = make_env(node("n1"), pod("preemptor", "1", priority=10, nominated="n1"))
    wanted = pod("p", "1", priority=10, requests={"example.com/dongle": "1"})
    assert env.message(wanted) == "0/1 nodes are available: 1 Insufficient example.com/dongle."


def test_scheduling_gates_hold_the_pod_before_the_queue() -> None:
    env = make_env()
    (gate,) = env.plugins.at("preEnqueue")
    gated: PodInfo = info(pod("p", "1", gates=["example.com/quota"]))
    status = gate.pre_enqueue(gated)
    assert not status.ok
    assert "example.com/quota" in status.message
    assert gate.pre_enqueue(info(pod("p", "1"))).ok
