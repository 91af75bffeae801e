"""InterPodAffinity: required terms both ways, namespaces, the preferred-term score."""

from __future__ import annotations

import pytest

from berth.scheduler.config import ConfigError
from berth.scheduler.framework.interface import CycleState
from tests.unit.plugins.spread_fixtures import HOSTNAME, ZONE, pod_affinity, scores, term, zoned
from tests.unit.scheduler_fixtures import Env, Json, info, make_env, pod

WEB = {"app": "web"}
DB = {"app": "db"}
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"


def nodes3() -> list[dict[str, object]]:
    return [zoned("a1", "a"), zoned("a2", "a"), zoned("b1", "b")]


def test_required_anti_affinity_one_replica_per_node() -> None:
    one_per_node = pod_affinity(anti=[term(HOSTNAME, WEB)])
    env = make_env(
        *nodes3(),
        pod("w1", "100m", labels=WEB, node_name="a1", affinity=one_per_node),
        pod("w2", "100m", labels=WEB, node_name="b1", affinity=one_per_node),
    )
    wanted = pod("w3", "100m", labels=WEB, affinity=one_per_node)
    assert env.node_for(wanted) == "a2"
    env.add(pod("w3", "100m", labels=WEB, node_name="a2", affinity=one_per_node))
    assert env.message(pod("w4", "100m", labels=WEB, affinity=one_per_node)) == (
        f"0/3 nodes are available: 3 {ANTI}."
    )


def test_symmetry_existing_pods_anti_affinity_refuses_the_pod() -> None:
    env = make_env(
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("db", "100m", labels=DB, node_name="a1", affinity=pod_affinity(anti=[term(ZONE, WEB)])),
    )
    # The incoming pod has no affinity of its own; the existing pod's anti-affinity keeps it
    # out of zone a.
    wanted = pod("web", "100m", labels=WEB)
    assert env.feasible(wanted) == ["b1"]
    env.add(
        pod(
            "filler",
            "100m",
            labels=DB,
            node_name="b1",
            affinity=pod_affinity(anti=[term(ZONE, WEB)]),
        )
    )
    assert env.message(wanted) == f"0/2 nodes are available: 2 {EXISTING}."
    _, _, diagnosis = env.diagnose(wanted)
    assert diagnosis.resolvable_rows.all()  # evicting the db pods would help


def test_required_affinity_follows_the_peer_and_is_unresolvable() -> None:
    env = make_env(*nodes3(), pod("db", "100m", labels=DB, node_name="b1"))
    follower = pod("web", "100m", labels=WEB, affinity=pod_affinity(required=[term(ZONE, DB)]))
    assert env.feasible(follower) == ["b1"]
    lonely = pod(
        "web", "100m", labels=WEB, affinity=pod_affinity(required=[term(ZONE, {"app": "x"})])
    )
    assert env.message(lonely) == f"0/3 nodes are available: 3 {AFFINITY}."
    _, _, diagnosis = env.diagnose(lonely)
    assert not diagnosis.resolvable_rows.any()


def test_first_pod_of_a_self_affine_group_may_go_anywhere_with_the_key() -> None:
    env = make_env(zoned("a1", "a"), zoned("bare", None))
    first = pod("web", "100m", labels=WEB, affinity=pod_affinity(required=[term(ZONE, WEB)]))
    assert env.feasible(first) == ["a1"]


def test_terminating_pods_still_count() -> None:
    env = make_env(
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("old", "100m", labels=WEB, node_name="a1", deleting=True),
    )
    wanted = pod("new", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]))
    assert env.feasible(wanted) == ["b1"]


def test_a_bound_pod_is_matched_by_the_labels_it_has_now() -> None:
    """kube-scheduler's cache replaces a pod's info on every update (UpdatePod): a bound
    pod relabelled out of an anti-affinity term stops keeping others off its node, one
    relabelled into it starts."""
    env = make_env(
        *nodes3(),
        pod("w1", "100m", labels=WEB, node_name="a1"),
        pod("d1", "100m", labels=DB, node_name="b1"),
    )
    wanted = pod("new", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]))
    assert env.feasible(wanted) == ["a2", "b1"]
    env.events.on_pod("MODIFIED", pod("w1", "100m", labels=DB, node_name="a1"))
    assert env.feasible(wanted) == ["a1", "a2", "b1"]
    env.events.on_pod("MODIFIED", pod("d1", "100m", labels=WEB, node_name="b1"))
    assert env.feasible(wanted) == ["a1", "a2"]


def test_a_bound_pod_relabelled_moves_the_preferred_score() -> None:
    env = make_env(
        *nodes3(),
        pod("w1", "100m", labels=WEB, node_name="a1"),
        pod("d1", "100m", labels=DB, node_name="b1"),
    )
    wanted = pod("new", "100m", affinity=pod_affinity(preferred=[(5, term(HOSTNAME, WEB))]))
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [100, 0, 0]
    env.events.on_pod("MODIFIED", pod("w1", "100m", labels=DB, node_name="a1"))
    env.events.on_pod("MODIFIED", pod("d1", "100m", labels=WEB, node_name="b1"))
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 0, 100]


def test_namespaces_and_namespace_selector() -> None:
    env = make_env(
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("db", "100m", labels=DB, node_name="a1", namespace="data"),
    )
    # Default: the pod's own namespace only, where no db pod runs.
    own_ns = pod("web", "100m", affinity=pod_affinity(anti=[term(HOSTNAME, DB)]))
    assert env.feasible(own_ns) == ["a1", "b1"]
    listed = pod(
        "web", "100m", affinity=pod_affinity(anti=[term(HOSTNAME, DB, namespaces=["data"])])
    )
    assert env.feasible(listed) == ["b1"]
    by_label = pod(
        "web",
        "100m",
        affinity=pod_affinity(
            anti=[term(HOSTNAME, DB, namespaceSelector={"matchLabels": {"team": "data"}})]
        ),
    )
    assert env.feasible(by_label) == ["a1", "b1"]
    env.view.owners.on_namespace(
        "ADDED", {"metadata": {"name": "data", "labels": {"team": "data"}}}
    )
    assert env.feasible(by_label) == ["b1"]
    every = pod(
        "web", "100m", affinity=pod_affinity(anti=[term(HOSTNAME, DB, namespaceSelector={})])
    )
    assert env.feasible(every) == ["b1"]


def test_remove_pod_lifts_anti_affinity_for_preemption() -> None:
    env = make_env(zoned("a1", "a"), pod("w1", "100m", labels=WEB, node_name="a1"))
    plugin = env.plugin("InterPodAffinity")
    wanted = info(pod("w2", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)])))
    nodes = env.view.nodes
    state = CycleState()
    plugin.pre_filter(state, wanted, nodes)
    assert not plugin.filter(state, wanted, nodes).passed[0]
    victim = env.view.pods["uid-default-w1"]
    plugin.remove_pod(state, wanted, victim, 0)
    assert plugin.filter(state, wanted, nodes).passed[0]
    plugin.add_pod(state, wanted, victim, 0)
    assert not plugin.filter(state, wanted, nodes).passed[0]


def test_preferred_terms_score() -> None:
    env = make_env(*nodes3(), pod("db", "100m", labels=DB, node_name="a1"))
    near = pod("web", "100m", affinity=pod_affinity(preferred=[(10, term(ZONE, DB))]))
    assert scores(env, "InterPodAffinity", near, "a1", "a2", "b1") == [100, 100, 0]
    away = pod("web", "100m", affinity=pod_affinity(preferred_anti=[(10, term(HOSTNAME, DB))]))
    assert scores(env, "InterPodAffinity", away, "a1", "a2", "b1") == [0, 100, 100]


def test_existing_pods_required_affinity_scores_with_hard_weight() -> None:
    follower = pod_affinity(required=[term(HOSTNAME, WEB)])
    env = make_env(*nodes3(), pod("db", "100m", labels=DB, node_name="a2", affinity=follower))
    wanted = pod("web", "100m", labels=WEB)
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 100, 0]
    off = {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 0}}]}
    env = make_env(
        *nodes3(), pod("db", "100m", labels=DB, node_name="a2", affinity=follower), profile=off
    )
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 0, 0]


def test_ignore_preferred_terms_of_existing_pods() -> None:
    likes_web = pod_affinity(preferred=[(5, term(HOSTNAME, WEB))])
    existing = pod("db", "100m", labels=DB, node_name="a2", affinity=likes_web)
    env = make_env(*nodes3(), existing)
    wanted = pod("web", "100m", labels=WEB)
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 100, 0]
    ignoring = {
        "pluginConfig": [
            {"name": "InterPodAffinity", "args": {"ignorePreferredTermsOfExistingPods": True}}
        ]
    }
    env = make_env(*nodes3(), existing, profile=ignoring)
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 0, 0]


def test_hard_weight_range_is_validated() -> None:
    bad = {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 101}}]}
    with pytest.raises(ConfigError, match="hardPodAffinityWeight"):
        make_env(profile=bad)


def test_queueing_hints() -> None:
    env = make_env(*nodes3())
    plugin = env.plugin("InterPodAffinity")
    anti = info(pod("w", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)])))
    blocker = info(pod("w0", "100m", labels=WEB, node_name="a1"))
    assert plugin.after_pod_change(anti, blocker, None)  # the blocking pod went
    assert not plugin.after_pod_change(anti, None, blocker)  # another one came: no help
    follower = info(pod("f", "100m", affinity=pod_affinity(required=[term(ZONE, DB)])))
    assert plugin.after_pod_change(
        follower, None, info(pod("db", "100m", labels=DB, node_name="b1"))
    )
    assert plugin.after_node_change(follower, None, zoned("c1", "c"))
    assert not plugin.after_node_change(follower, None, zoned("bare", None))
    # Symmetry: a deleted pod whose anti-affinity refused this one.
    guard = info(
        pod("g", "100m", labels=DB, node_name="a1", affinity=pod_affinity(anti=[term(ZONE, WEB)]))
    )
    assert plugin.after_pod_change(info(pod("web", "100m", labels=WEB)), guard, None)


def preemption_candidates(env: Env, raw: Json) -> dict[str, list[str]]:
    """Nodes where preemption could place the pod, each with its victims' names."""
    state, pod_info, diagnosis = env.diagnose(raw)
    plugin = env.plugin("DefaultPreemption")
    rows = plugin.evaluator.helpful_rows(diagnosis)
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, plugin)
    return {c.node: sorted(v.name for v in c.victims) for c in found}


def test_preemption_evicts_the_anti_affinity_conflict_only() -> None:
    env = make_env(
        zoned("a1", "a"),
        pod("web-low", "100m", labels=WEB, node_name="a1", priority=1),
        pod("other-low", "100m", labels=DB, node_name="a1", priority=1),
    )
    wanted = pod(
        "web-high",
        "100m",
        labels=WEB,
        priority=10,
        affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]),
    )
    # Without the anti-affinity counts lifted, removing web-low would not make a1 pass; the
    # unrelated pod is reprieved.
    assert preemption_candidates(env, wanted) == {"a1": ["web-low"]}
    # The node table and counts are back as they were after the dry run.
    assert env.message(wanted) == f"0/1 nodes are available: 1 {ANTI}."


def test_preemption_evicts_the_pod_of_an_existing_anti_affinity() -> None:
    guard = pod_affinity(anti=[term(HOSTNAME, WEB)])
    env = make_env(
        zoned("a1", "a"),
        pod("guard", "100m", labels=DB, node_name="a1", priority=1, affinity=guard),
    )
    wanted = pod("web", "100m", labels=WEB, priority=10)
    assert preemption_candidates(env, wanted) == {"a1": ["guard"]}


async def test_pod_affinity_is_not_helped_by_preemption() -> None:
    env = make_env(zoned("a1", "a"), pod("low", "100m", node_name="a1", priority=1))
    wanted = pod(
        "web", "100m", priority=10, affinity=pod_affinity(required=[term(ZONE, {"app": "x"})])
    )
    state, pod_info, diagnosis = env.diagnose(wanted)
    result = await env.plugin("DefaultPreemption").post_filter(state, pod_info, diagnosis)
    assert result.message == (
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_unknown_argument_is_refused_by_name() -> None:
    bad = {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAfinityWeight": 5}}]}
    with pytest.raises(ConfigError, match="hardPodAfinityWeight"):
        make_env(profile=bad)
    typed = {
        "pluginConfig": [
            {
                "name": "InterPodAffinity",
                "args": {"kind": "InterPodAffinityArgs", "hardPodAffinityWeight": 5},
            }
        ]
    }
    assert make_env(profile=typed).plugin("InterPodAffinity").hard_weight == 5


async def test_requeued_when_the_blocking_pod_goes_not_when_another_comes() -> None:
    from tests.unit.test_schedule_one import Loop, berth_pod

    blocker = pod("w0", "100m", labels=WEB, node_name="a1")
    wanted = berth_pod("w1", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]))
    loop = Loop(zoned("a1", "a"), blocker, wanted)
    await loop.attempt()
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_pod("ADDED", pod("other", "100m", labels=DB, node_name="a1"))
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_pod("DELETED", blocker)
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("w1", "a1")) in loop.writer.calls


def test_a_pod_nominated_to_a_node_counts_for_anti_affinity() -> None:
    # web-pre (priority 10) waits on a2 for its victims to leave; a web pod of lower
    # priority with anti-affinity against web pods must not take a2 meanwhile.
    env = make_env(zoned("a1", "a", cpu="50m"), zoned("a2", "a"))
    waiting = pod("web-pre", "100m", labels=WEB, priority=10, nominated="a2")
    env.add(waiting)
    wanted = pod("web", "100m", labels=WEB, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]))
    assert env.message(wanted) == (f"0/2 nodes are available: 1 Insufficient cpu, 1 {ANTI}.")
    # A pod that outranks the nominated one does not see it.
    outranking = pod(
        "web", "100m", labels=WEB, priority=20, affinity=pod_affinity(anti=[term(HOSTNAME, WEB)])
    )
    assert env.feasible(outranking) == ["a2"]


def guard_nominated_to(node: str) -> Json:
    """A preemptor nominated to ``node`` whose anti-affinity keeps web pods off it."""
    return pod(
        "guard-pre",
        "100m",
        labels=DB,
        priority=10,
        nominated=node,
        affinity=pod_affinity(anti=[term(HOSTNAME, WEB)]),
    )


def test_a_nominated_pods_anti_affinity_refuses_a_pod_without_terms() -> None:
    # A pod with no terms of its own is refused only by the nominated pods' required
    # anti-affinity: a2's nominee keeps web pods away, a1's nominee (no terms) does not.
    env = make_env(zoned("a1", "a"), zoned("a2", "a"))
    env.add(pod("plain-pre", "100m", labels=DB, priority=10, nominated="a1"))
    env.add(guard_nominated_to("a2"))
    wanted = pod("web", "100m", labels=WEB)
    assert env.feasible(wanted) == ["a1"]
    assert env.feasible(pod("db", "100m", labels=DB)) == ["a1", "a2"]


def test_existing_pods_terms_follow_the_pods_across_cycles() -> None:
    """The existing pods' terms are kept between cycles and grouped: two pods with the
    same term weigh twice; a deleted pod's term, or a deleted node's pods' terms, stop
    counting in the next cycle."""
    keep_web_out = pod_affinity(anti=[term(ZONE, WEB)])
    likes_web = pod_affinity(preferred=[(5, term(HOSTNAME, WEB))])
    db1 = pod("db1", "100m", labels=DB, node_name="a1", affinity=keep_web_out)
    env = make_env(
        *nodes3(),
        db1,
        pod("fan1", "100m", labels=DB, node_name="a2", affinity=likes_web),
        pod("fan2", "100m", labels=DB, node_name="a2", affinity=likes_web),
        pod("fan3", "100m", labels=DB, node_name="b1", affinity=likes_web),
    )
    wanted = pod("web", "100m", labels=WEB)
    assert env.feasible(wanted) == ["b1"]
    # a2 holds two pods preferring web (10), b1 one (5): 100 and 50 after min-max.
    assert scores(env, "InterPodAffinity", wanted, "a1", "a2", "b1") == [0, 100, 50]
    env.events.on_pod("DELETED", db1)
    assert env.feasible(wanted) == ["a1", "a2", "b1"]
    env.events.on_node("DELETED", zoned("a2", "a"))
    assert scores(env, "InterPodAffinity", wanted, "a1", "b1") == [0, 100]


def test_prefilter_skips_a_pod_nothing_can_refuse() -> None:
    """kube-scheduler's PreFilter answers Skip for a pod without required terms when no
    pod has a required anti-affinity; here a nominated pod's counts too. Skipped, the
    Filter and the dry runs' counting do not run for it."""
    env = make_env(zoned("a1", "a"), zoned("a2", "a"))
    plain = info(pod("web", "100m", labels=WEB))
    state = CycleState()
    env.cycle.feasible(state, plain)
    assert {"InterPodAffinity", "PodTopologySpread"} <= state.skip_filter
    env.add(guard_nominated_to("a2"))
    state = CycleState()
    env.cycle.feasible(state, plain)
    assert "InterPodAffinity" not in state.skip_filter
