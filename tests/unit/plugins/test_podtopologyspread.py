"""PodTopologySpread: the DoNotSchedule filter, the ScheduleAnyway score, the defaults."""

from __future__ import annotations

import pytest

from berth.scheduler.config import ConfigError
from berth.scheduler.framework.interface import CycleState
from tests.unit.plugins.spread_fixtures import ZONE, scores, spread, zoned
from tests.unit.scheduler_fixtures import info, make_env, pod, taint

WEB = {"app": "web"}


def web(name: str, node_name: str | None = None, **kwargs: object) -> dict[str, object]:
    return pod(name, "100m", labels=WEB, node_name=node_name, **kwargs)  # type: ignore[arg-type]


def spread_pod(*constraints: dict[str, object], **kwargs: object) -> dict[str, object]:
    raw = web("new", **kwargs)
    raw["spec"]["topologySpreadConstraints"] = list(constraints)  # type: ignore[index]
    return raw


def three_zones() -> list[dict[str, object]]:
    return [zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")]


def test_zone_spread_max_skew_1_sends_the_pod_to_the_emptiest_zone() -> None:
    env = make_env(*three_zones(), web("w1", "a1"), web("w2", "b1"))
    wanted = spread_pod(spread(ZONE))
    assert env.feasible(wanted) == ["c1"]


def test_skew_message_is_kube_schedulers() -> None:
    env = make_env(
        zoned("a1", "a"), zoned("b1", "b", taints=[taint("gpu", "yes")]), web("w1", "a1")
    )
    assert env.message(spread_pod(spread(ZONE))) == (
        "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) had untolerated taint {gpu: yes}."
    )


def test_pods_of_other_namespaces_deleting_or_unselected_do_not_count() -> None:
    env = make_env(
        *three_zones(),
        web("w1", "a1"),
        web("other-ns", "b1", namespace="elsewhere"),
        web("leaving", "b1", deleting=True),
        pod("unlabelled", "100m", node_name="c1"),
    )
    assert env.feasible(spread_pod(spread(ZONE))) == ["b1", "c1"]


def test_a_bound_pod_counts_by_the_labels_it_has_now() -> None:
    # kube-scheduler's cache holds each pod's latest version: relabelled into the
    # selector, a pod counts for its zone; relabelled out of it, no longer.
    env = make_env(
        zoned("a1", "a"), zoned("b1", "b"), web("w1", "a1"), pod("other", "100m", node_name="b1")
    )
    wanted = spread_pod(spread(ZONE))
    assert env.feasible(wanted) == ["b1"]
    env.events.on_pod("MODIFIED", web("other", "b1"))
    assert env.feasible(wanted) == ["a1", "b1"]
    env.events.on_pod("MODIFIED", pod("w1", "100m", node_name="a1"))
    assert env.feasible(wanted) == ["a1"]


def test_a_bound_pod_that_starts_terminating_no_longer_counts() -> None:
    env = make_env(zoned("a1", "a"), zoned("b1", "b"), web("w1", "a1"))
    wanted = spread_pod(spread(ZONE))
    assert env.feasible(wanted) == ["b1"]
    env.events.on_pod("MODIFIED", web("w1", "a1", deleting=True))
    assert env.feasible(wanted) == ["a1", "b1"]


def test_missing_topology_label_is_unresolvable() -> None:
    env = make_env(zoned("bare", None))
    _, _, diagnosis = env.diagnose(spread_pod(spread(ZONE)))
    missing = "node(s) didn't match pod topology spread constraints (missing required label)"
    assert diagnosis.histogram == {missing: 1}
    assert not diagnosis.resolvable_rows.any()


def test_min_domains_makes_the_global_minimum_zero() -> None:
    env = make_env(zoned("a1", "a"), zoned("b1", "b"), web("w1", "a1"), web("w2", "b1"))
    # Two domains, one pod each: skew 1 everywhere, fine with maxSkew 1.
    assert env.feasible(spread_pod(spread(ZONE))) == ["a1", "b1"]
    # minDomains 3 with 2 domains: the minimum counts as 0, so 1 + 1 - 0 > 1.
    assert env.feasible(spread_pod(spread(ZONE, minDomains=3))) == []


def test_node_affinity_policy_honor_ignores_nodes_the_pod_cannot_use() -> None:
    env = make_env(
        zoned("a1", "a", labels={"pool": "x"}),
        zoned("b1", "b", labels={"pool": "x"}),
        zoned("c1", "c"),
        web("w1", "a1"),
    )
    selector = {"pool": "x"}
    # Honor (default): zone c is not a domain for this pod, so b1 (0) is the minimum.
    assert env.feasible(spread_pod(spread(ZONE), node_selector=selector)) == ["b1"]
    ignore = spread(ZONE, nodeAffinityPolicy="Ignore")
    env.add(web("w2", "b1"))
    # Ignore: zone c (0 pods) counts, so a1 and b1 (1 each) plus the pod exceed maxSkew.
    assert env.feasible(spread_pod(ignore, node_selector=selector)) == []
    assert env.feasible(spread_pod(spread(ZONE), node_selector=selector)) == ["a1", "b1"]


def test_node_taints_policy_honor_drops_untolerated_nodes() -> None:
    env = make_env(
        zoned("a1", "a"),
        zoned("b1", "b"),
        zoned("c1", "c", taints=[taint("gpu", "yes")]),
        web("w1", "a1"),
        web("w2", "b1"),
    )
    # Ignore (default): tainted zone c has 0 pods: a1 and b1 are too full.
    honored = spread(ZONE, nodeTaintsPolicy="Honor")
    assert env.feasible(spread_pod(spread(ZONE))) == []
    assert env.feasible(spread_pod(honored)) == ["a1", "b1"]


def test_match_label_keys_narrow_the_selector_to_the_pods_revision() -> None:
    env = make_env(
        *three_zones(),
        pod("old1", "100m", labels={**WEB, "rev": "1"}, node_name="a1"),
        pod("old2", "100m", labels={**WEB, "rev": "1"}, node_name="b1"),
        pod("new1", "100m", labels={**WEB, "rev": "2"}, node_name="a1"),
    )
    constraint = spread(ZONE, matchLabelKeys=["rev"])
    wanted = spread_pod(constraint)
    wanted["metadata"]["labels"] = {**WEB, "rev": "2"}  # type: ignore[index]
    assert env.feasible(wanted) == ["b1", "c1"]


def test_add_and_remove_pod_move_the_counts() -> None:
    env = make_env(*three_zones(), web("w1", "a1"), web("w2", "b1"))
    plugin = env.plugin("PodTopologySpread")
    state = CycleState()
    wanted = info(spread_pod(spread(ZONE)))
    nodes = env.view.nodes
    plugin.pre_filter(state, wanted, nodes)
    assert not plugin.filter(state, wanted, nodes).passed[nodes.index["a1"]]
    victim = env.view.pods["uid-default-w1"]
    plugin.remove_pod(state, wanted, victim, nodes.index["a1"])
    assert plugin.filter(state, wanted, nodes).passed[nodes.index["a1"]]
    plugin.add_pod(state, wanted, victim, nodes.index["a1"])
    assert not plugin.filter(state, wanted, nodes).passed[nodes.index["a1"]]


def test_score_prefers_the_emptier_domain() -> None:
    env = make_env(*three_zones(), web("w1", "a1"), web("w2", "a1"), web("w3", "b1"))
    wanted = spread_pod(spread(ZONE, hard=False))
    # Raw: count * ln(3 + 2) + 0 = 3.22 -> 3, 1.61 -> 2, 0; normalized 100*(3+0-s)/3.
    assert scores(env, "PodTopologySpread", wanted, "a1", "b1", "c1") == [0, 33, 100]


def test_score_ignores_nodes_without_the_key() -> None:
    env = make_env(zoned("a1", "a"), zoned("bare", None), web("w1", "a1"))
    wanted = spread_pod(spread(ZONE, hard=False))
    assert scores(env, "PodTopologySpread", wanted, "a1", "bare") == [100, 0]


def test_system_defaults_spread_pods_of_a_service() -> None:
    env = make_env(zoned("a1", "a"), zoned("b1", "b"), web("w1", "a1"), web("w2", "a1"))
    env.view.owners.handler("Service")(
        "ADDED",
        {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": WEB}},
    )
    # hostname (maxSkew 3, 2 nodes): 2 * ln(4) + 2 = 4.77 on a1, 2 on b1; zone (maxSkew 5,
    # 2 zones): 2 * ln(4) + 4 = 6.77, 4. Sums 11.55 -> 12 and 6: 100 * (12 + 6 - s) / 12.
    assert scores(env, "PodTopologySpread", web("new"), "a1", "b1") == [50, 100]
    # Without a selecting object there is nothing to spread by.
    plain = pod("plain", "100m", labels={"app": "other"})
    assert scores(env, "PodTopologySpread", plain, "a1", "b1") == [0, 0]


def test_system_defaults_keep_hostname_spreading_on_nodes_without_a_zone() -> None:
    env = make_env(zoned("a1", "a"), zoned("bare", None), web("w1", "a1"))
    env.view.owners.handler("ReplicaSet")(
        "ADDED",
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": WEB}},
        },
    )
    # a1: hostname ln(4) + 2, zone (domains "a" and "") ln(4) + 4: 8.77 -> 9; "bare" scores
    # on hostname only: 2. 100 * (9 + 2 - s) / 9.
    assert scores(env, "PodTopologySpread", web("new"), "a1", "bare") == [22, 100]


def test_list_defaulting_and_validation() -> None:
    profile = {
        "pluginConfig": [
            {
                "name": "PodTopologySpread",
                "args": {
                    "defaultingType": "List",
                    "defaultConstraints": [
                        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                    ],
                },
            }
        ]
    }
    env = make_env(*three_zones(), web("w1", "a1"), profile=profile)
    env.view.owners.handler("Service")(
        "ADDED",
        {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": WEB}},
    )
    assert env.feasible(web("new")) == ["b1", "c1"]
    bad = {
        "pluginConfig": [
            {
                "name": "PodTopologySpread",
                "args": {"defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE}]},
            }
        ]
    }
    with pytest.raises(ConfigError, match="defaultingType is System"):
        make_env(profile=bad)


def test_queueing_hints() -> None:
    env = make_env(*three_zones())
    plugin = env.plugin("PodTopologySpread")
    wanted = info(spread_pod(spread(ZONE)))
    came = info(web("w1", "a1"))
    unrelated = info(pod("x", "100m", node_name="a1"))
    assert plugin.after_pod_change(wanted, None, came)
    assert plugin.after_pod_change(wanted, came, None)
    assert not plugin.after_pod_change(wanted, None, unrelated)
    assert not plugin.after_pod_change(wanted, None, info(web("pending")))
    node_a = zoned("a2", "a")
    assert plugin.after_node_change(wanted, None, node_a)
    assert not plugin.after_node_change(wanted, None, zoned("bare", None))


def test_preemption_lifts_the_victims_spread_count() -> None:
    env = make_env(
        zoned("a1", "a"),
        zoned("b1", "b", cpu="100m"),
        web("w1", "a1", priority=1),
        pod("filler", "100m", node_name="b1", priority=100),
    )
    wanted = spread_pod(spread(ZONE), priority=10)
    # a1: 1 + 1 - 0 > 1 (zone b is empty of web pods); b1: no cpu left, filler outranks.
    state, pod_info, diagnosis = env.diagnose(wanted)
    plugin = env.plugin("DefaultPreemption")
    rows = plugin.evaluator.helpful_rows(diagnosis)
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, plugin)
    assert {c.node: [v.name for v in c.victims] for c in found} == {"a1": ["w1"]}


def test_unknown_argument_is_refused_by_name() -> None:
    bad = {"pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingtype": "List"}}]}
    with pytest.raises(ConfigError, match="defaultingtype"):
        make_env(profile=bad)


def test_counts_follow_pods_and_nodes_between_cycles() -> None:
    env = make_env(zoned("a1", "a"), zoned("b1", "b"), web("w1", "a1"))
    wanted = spread_pod(spread(ZONE))
    assert env.feasible(wanted) == ["b1"]
    env.add(web("w2", "b1"))
    assert env.feasible(wanted) == ["a1", "b1"]
    env.view.on_pod("DELETED", web("w1", "a1"))
    assert env.feasible(wanted) == ["a1"]
    # A node gone and another in its row: its pods and zone are the new node's.
    env.view.on_node("DELETED", zoned("b1", "b"))
    env.add(zoned("c1", "c"))
    assert env.feasible(wanted) == ["a1", "c1"]


async def test_requeued_when_a_node_brings_a_new_domain() -> None:
    from tests.unit.test_schedule_one import Loop, berth_pod

    wanted = berth_pod("new", "100m", labels=WEB)
    # One zone of the two minDomains asks for: only PodTopologySpread rejects the pod.
    wanted["spec"]["topologySpreadConstraints"] = [spread(ZONE, minDomains=2)]
    loop = Loop(zoned("a1", "a"), web("w1", "a1"), wanted)
    await loop.attempt()
    assert loop.queue.counts()["unschedulable"] == 1
    # A node without the zone label is no help; one in a new zone is.
    loop.parts.events.on_node("ADDED", zoned("bare", None))
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_node("ADDED", zoned("c1", "c"))
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("new", "c1")) in loop.writer.calls


def test_a_pod_nominated_to_a_node_counts_for_spread() -> None:
    env = make_env(zoned("a1", "a"), zoned("b1", "b"), web("w1", "b1"))
    env.add(web("pre", priority=10, nominated="a1"))
    # Without the nominated pod zone a is empty and a1 fits; with it, a1 (1 + 1 - 1) is
    # still fine, and b1 (1 + 1 - 0) was already too full.
    assert env.feasible(spread_pod(spread(ZONE))) == ["a1"]
    env.add(web("pre2", priority=10, nominated="a1"))
    # Two pods on their way to a1: 2 + 1 - 1 > 1 there too.
    assert env.feasible(spread_pod(spread(ZONE))) == []
