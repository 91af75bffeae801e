"""One scheduling attempt (filter order, failure messages, how many nodes are scored),
checked against kube-scheduler: messages are its FitError.Error and each plugin's ErrReason.
"""

from __future__ import annotations

import pytest

from berth.scheduler.cycle import Cycle
from berth.scheduler.framework.messages import NO_NODES, fit_message
from tests.unit.scheduler_fixtures import (
    host_port,
    make_env,
    node,
    pod,
    taint,
)

Mi = 1024**2
Gi = 1024**3


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


# -- a preemptor's nominated node ------------------------------------------------------------


def test_a_nominated_node_that_passes_every_filter_is_taken_unscored() -> None:
    """kube-scheduler evaluates the nominated node first: the pod goes where its victims
    made room, even where another node would score higher."""
    env = make_env(
        node("busy", cpu="4"),
        node("idle", cpu="4"),
        pod("there", "3", node_name="busy"),
    )
    assert env.node_for(pod("p", "1")) == "idle"
    placement = env.schedule(pod("p", "1", nominated="busy"))
    assert (placement.node, placement.feasible, placement.scored) == ("busy", 1, 1)


def test_a_nominated_node_that_no_longer_fits_is_passed_over() -> None:
    env = make_env(
        node("busy", cpu="4"),
        node("idle", cpu="4"),
        pod("there", "4", node_name="busy"),
    )
    assert env.node_for(pod("p", "1", nominated="busy")) == "idle"
