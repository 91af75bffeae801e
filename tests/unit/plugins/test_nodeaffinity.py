"""NodeAffinity: nodeSelector and required terms filter; preferred terms score, with the
profile's weights.
"""

from __future__ import annotations

import pytest

from tests.unit.scheduler_fixtures import (
    Env,
    Json,
    expr,
    make_env,
    node,
    pod,
    preferred_affinity,
    required_affinity,
    scores,
    taint,
)

Mi = 1024**2
Gi = 1024**3


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


# -- NodeAffinityArgs.addedAffinity --------------------------------------------------------


def added(affinity: Json) -> Json:
    return {"pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": affinity}}]}


def test_added_affinity_filters_every_pod_and_says_it_is_the_schedulers() -> None:
    """kube-scheduler's addedAffinity: its required terms hold for every pod of the
    profile, beside the pod's own; a node they refuse gets its own reason."""
    gen5 = {"nodeSelectorTerms": [{"matchExpressions": [expr("gen", "In", "5")]}]}
    env = make_env(
        *AFFINITY_NODES, profile=added({"requiredDuringSchedulingIgnoredDuringExecution": gen5})
    )
    assert env.feasible(pod("p")) == ["b"]
    assert env.feasible(pod("p", node_selector={"zone": "a"})) == []
    assert env.message(pod("p", node_selector={"zone": "a"})) == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) didn't match scheduler-enforced node affinity."
    )


def test_added_affinity_preferences_add_to_every_pods_score() -> None:
    prefer_a = [{"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}]
    env = make_env(
        *AFFINITY_NODES,
        profile=added({"preferredDuringSchedulingIgnoredDuringExecution": prefer_a}),
    )
    assert scores(env, "NodeAffinity", pod("p"), "a", "b", "c") == [100, 0, 0]
    own = pod(
        "q", affinity=preferred_affinity((30, {"matchExpressions": [expr("zone", "In", "b")]}))
    )
    assert scores(env, "NodeAffinity", own, "a", "b", "c") == [33, 100, 0]


# -- the selection shared by pods of one selector ------------------------------------------


def test_pods_of_one_selector_share_its_rows_until_a_node_changes_labels() -> None:
    from berth.scheduler.plugins.nodeaffinity import required_rows
    from tests.unit.scheduler_fixtures import info

    env = make_env(*AFFINITY_NODES)
    nodes = env.view.nodes
    terms = required_affinity({"matchExpressions": [expr("gen", "In", "5")]})
    first = required_rows(info(pod("p1", affinity=terms)), nodes)
    again = required_rows(info(pod("p2", affinity=terms)), nodes)
    assert again is first, "the second pod of the selector reads the first one's rows"
    assert not first.flags.writeable
    other = required_rows(info(pod("p3", node_selector={"zone": "a"})), nodes)
    assert other is not first
    assert [nodes.names[r] for r in first.nonzero()[0]] == ["b"]
    env.events.on_node("MODIFIED", node("c", labels={"gen": "5"}))
    relabelled = required_rows(info(pod("p4", affinity=terms)), nodes)
    assert sorted(nodes.names[r] for r in relabelled.nonzero()[0]) == ["b", "c"]
    assert env.node_for(pod("p5", cpu="1", affinity=terms)) in {"b", "c"}
