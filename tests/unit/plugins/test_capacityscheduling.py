"""CapacityScheduling in one profile over an in-memory view: PreFilter, Reserve/Unreserve
and the quota preemption rules, with the design's 10-GPU cluster (QuotaA min 4 / max 6,
QuotaB min 6 / max 8) on two nodes of 5 GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from berth.scheduler.config import ConfigError
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.framework.messages import FitError
from berth.scheduler.framework.preemption import Candidate
from berth.scheduler.plugins.capacityscheduling import (
    CapacityScheduling,
    QuotaVictims,
    TreeVictims,
)
from tests.unit.scheduler_fixtures import EPOCH, Env, Json, info, make_env, node, pod

GPU = "nvidia.com/gpu"
PROFILE = {
    "plugins": {
        "multiPoint": {
            "enabled": [{"name": "CapacityScheduling"}],
            "disabled": [{"name": "DefaultPreemption"}],
        }
    }
}


def quota(namespace: str, minimum: int, maximum: int) -> Json:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": f"quota-{namespace}",
            "namespace": namespace,
            "uid": f"eq-{namespace}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"min": {GPU: str(minimum)}, "max": {GPU: str(maximum)}},
    }


def gpu_pod(name: str, namespace: str, *, node_name: str | None = None, **kwargs: Any) -> Json:
    return pod(
        name, "100m", "128Mi", namespace=namespace, node_name=node_name,
        requests={GPU: "1"}, **kwargs,
    )  # fmt: skip


def cluster(*objects: Json) -> Env:
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", extra={GPU: "5"}) for i in (1, 2)]
    return make_env(*nodes, quota("a", 4, 6), quota("b", 6, 8), *objects, profile=PROFILE)


def capacity(env: Env) -> CapacityScheduling:
    plugin: CapacityScheduling = env.plugin("CapacityScheduling")
    return plugin


Waiting = Callable[[str], bool]


def everyone(_uid: str) -> bool:
    """Every pod waits, its backoff over."""
    return True


def alike(waiting: Waiting) -> tuple[Waiting, Waiting]:
    """The pods ``waiting`` names wait, each with its backoff over."""
    return waiting, waiting


def bind(env: Env, raw: Json) -> str:
    """Schedule the pod as the service does (Reserve), then let the watch show it bound."""
    state = CycleState()
    pod_info = info(raw)
    placement = env.cycle.schedule(state, pod_info)
    env.view.assume(pod_info, placement.node)
    assert capacity(env).reserve(state, pod_info, placement.node).ok
    raw["spec"]["nodeName"] = placement.node
    raw["status"]["phase"] = "Running"
    env.events.on_pod("MODIFIED", raw)
    return placement.node


def used(env: Env, namespace: str) -> int:
    return capacity(env).ledger.used_of(namespace).get(GPU, 0)


def victims(env: Env, preemptor: Json) -> list[str]:
    """The victims the chosen candidate would evict (names), [] when no node would do."""
    state, pod_info, diagnosis = env.diagnose(preemptor)
    plugin = capacity(env)
    demand = state.data[plugin.name]
    policy = QuotaVictims(plugin, demand)
    nodes = env.view.nodes
    rows = np.flatnonzero(nodes.present[: nodes.size])
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, policy)
    if not found:
        return []
    return sorted(v.name for v in min(found, key=Candidate.rank).victims)


def test_the_design_walkthrough_up_to_borrowing() -> None:
    env = cluster()
    for i in range(4):
        bind(env, gpu_pod(f"a{i}", "a"))
    for i in range(3):
        bind(env, gpu_pod(f"b{i}", "b"))
    assert (used(env, "a"), used(env, "b")) == (4, 3)
    # A borrows from B's unused min up to its own max.
    bind(env, gpu_pod("a4", "a"))
    bind(env, gpu_pod("a5", "a"))
    assert used(env, "a") == 6
    assert env.message(gpu_pod("a6", "a")) == (
        "0/2 nodes are available: Pod a/a6 is rejected because ElasticQuota a is more than Max "
        "(nvidia.com/gpu: 6 used + 1 requested > 6)."
    )
    # One GPU is left and B is under its min: B gets it.
    bind(env, gpu_pod("b3", "b"))
    assert env.message(gpu_pod("b4", "b")) == (
        "0/2 nodes are available: Pod b/b4 is rejected because total ElasticQuota used is "
        "more than Min (nvidia.com/gpu: 10 used + 1 requested > 10)."
    )


def test_reserve_counts_at_once_and_unreserve_gives_back() -> None:
    env = cluster()
    plugin = capacity(env)
    state = CycleState()
    for i in range(6):
        raw = gpu_pod(f"a{i}", "a")
        placement = env.cycle.schedule(state, info(raw))
        assert plugin.reserve(state, info(raw), placement.node).ok  # not bound yet
    assert used(env, "a") == 6
    assert "more than Max" in env.message(gpu_pod("a6", "a"))
    plugin.unreserve(state, info(gpu_pod("a0", "a")), "n1")
    assert used(env, "a") == 5
    assert env.node_for(gpu_pod("a6", "a"))


def test_finished_and_deleted_pods_stop_counting() -> None:
    running = gpu_pod("a0", "a", node_name="n1")
    done = gpu_pod("a1", "a", node_name="n1")
    env = cluster(running, done)
    assert used(env, "a") == 2
    done["status"]["phase"] = "Succeeded"
    env.events.on_pod("MODIFIED", done)
    assert used(env, "a") == 1
    env.events.on_pod("DELETED", running)
    assert used(env, "a") == 0


def test_only_what_the_accounting_reads_changes_it() -> None:
    """A status written (a condition, the kubelet's Running) leaves what every quota pod
    could give back as it was: rebuilt on each pod event, it was a tenth of the scheduler
    under churn. A pod finishing changes it."""
    running = gpu_pod("a0", "a", node_name="n1")
    env = cluster(running)
    plugin = env.plugin("CapacityScheduling")
    before = plugin.evictable()
    running["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    env.events.on_pod("MODIFIED", running)
    assert plugin.evictable() is before
    running["status"]["phase"] = "Succeeded"
    env.events.on_pod("MODIFIED", running)
    assert plugin.evictable() is not before
    assert used(env, "a") == 0


def test_a_pending_pod_being_deleted_or_relabelled_changes_the_tree_accounting() -> None:
    """A quota tree counts pending pods in its request, by their labels: a pending pod
    being deleted, or moved to another quota by its labels, is a change to account."""
    waiting = gpu_pod("a0", "a")
    env = cluster(waiting)
    plugin = env.plugin("CapacityScheduling")
    before = plugin.tree_state()
    waiting["metadata"]["labels"] = {"quota.scheduling.koordinator.sh/name": "other"}
    env.events.on_pod("MODIFIED", waiting)
    relabelled = plugin.tree_state()
    assert relabelled is not before
    waiting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    env.events.on_pod("MODIFIED", waiting)
    assert plugin.tree_state() is not relabelled


def test_a_pod_being_preempted_no_longer_counts() -> None:
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    leaving = gpu_pod("a0", "a", node_name="n1", deleting=True, conditions=[preempted])
    deleting = gpu_pod("a1", "a", node_name="n1", deleting=True)  # deleted by its owner
    env = cluster(leaving, deleting)
    # a0's capacity is promised to its preemptor (nominated, counted as such); a1 counts
    # until it is gone.
    assert used(env, "a") == 1


def test_an_evicted_victim_stops_counting_before_the_watch_says_so() -> None:
    victim = gpu_pod("a0", "a", node_name="n1")
    env = cluster(victim, gpu_pod("a1", "a", node_name="n1"))
    capacity(env).evicted(info(victim))
    assert used(env, "a") == 1
    victim["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    env.events.on_pod("MODIFIED", victim)  # the condition arrives before deletionTimestamp
    assert used(env, "a") == 1
    env.events.on_pod("DELETED", victim)
    assert used(env, "a") == 1
    assert capacity(env).leaving == set()


def test_a_victim_whose_eviction_failed_counts_again() -> None:
    """The preemption counts its victims gone at once, before their evictions are
    answered; a victim whose eviction failed is counted again, and still leaves the
    count when it does go."""
    victim = gpu_pod("a0", "a", node_name="n1")
    env = cluster(victim, gpu_pod("a1", "a", node_name="n1"))
    capacity(env).evicted(info(victim))
    assert used(env, "a") == 1
    capacity(env).kept(info(victim))
    assert used(env, "a") == 2
    assert capacity(env).leaving == set()
    env.events.on_pod("DELETED", victim)
    assert used(env, "a") == 1


def borrowed_cluster(b_priority: int = 0) -> Env:
    """A at 6 (borrowing 2), B at 4, all 10 GPUs in use."""
    pods = [
        gpu_pod(f"a{i}", "a", node_name="n1" if i < 3 else "n2", priority=100) for i in range(6)
    ]
    pods += [gpu_pod(f"b{i}", "b", node_name="n1" if i < 2 else "n2") for i in range(4)]
    return cluster(*pods)


def test_under_min_reclaims_from_the_borrower_regardless_of_priority() -> None:
    env = borrowed_cluster()
    # B's pod has priority 0, A's pods 100: B is under its min, so A gives one back.
    chosen = victims(env, gpu_pod("b4", "b"))
    assert len(chosen) == 1
    assert chosen[0].startswith("a")


def test_nothing_to_reclaim_when_no_quota_borrows() -> None:
    pods = [gpu_pod(f"a{i}", "a", node_name="n1") for i in range(4)]
    pods += [gpu_pod(f"b{i}", "b", node_name="n2") for i in range(5)]
    pods += [gpu_pod("x0", "x", node_name="n1", priority=-5)]  # no quota
    env = cluster(*pods)
    # Cluster full; A at its min, B at 5 under its min: nobody is borrowing.
    assert victims(env, gpu_pod("b5", "b")) == []


def test_at_or_over_min_only_own_lower_priority_pods() -> None:
    pods = [gpu_pod(f"b{i}", "b", node_name="n1", priority=10) for i in range(5)]
    pods += [gpu_pod(f"b{i}", "b", node_name="n2", priority=0) for i in range(5, 7)]
    pods += [gpu_pod(f"a{i}", "a", node_name="n2", priority=0) for i in range(3)]
    env = cluster(*pods)
    # B holds 7 > min 6: it may only evict its own pods of lower priority, never A's.
    assert victims(env, gpu_pod("b7", "b", priority=20)) in (["b5"], ["b6"])
    assert victims(env, gpu_pod("b7", "b", priority=0)) == []


def test_pods_with_and_without_quota_never_preempt_each_other() -> None:
    pods = [gpu_pod(f"a{i}", "a", node_name="n1", priority=0) for i in range(5)]
    pods += [gpu_pod(f"x{i}", "x", node_name="n2", priority=0) for i in range(5)]
    env = cluster(*pods)
    # x has no quota: its high-priority pod may evict x's pods, never A's.
    chosen = victims(env, gpu_pod("x5", "x", priority=100))
    assert len(chosen) == 1
    assert chosen[0].startswith("x")
    # A is under max and min: its pod may not evict x's pods to get a node.
    env2 = make_env(
        node("n1", cpu="32", memory="64Gi", extra={GPU: "5"}),
        quota("a", 6, 8),
        *[gpu_pod(f"x{i}", "x", node_name="n1") for i in range(5)],
        profile=PROFILE,
    )
    assert victims(env2, gpu_pod("a0", "a", priority=100)) == []


@pytest.mark.parametrize("namespace", ["x", "a"])
def test_a_namespace_without_quota_is_not_checked(namespace: str) -> None:
    env = cluster(*[gpu_pod(f"a{i}", "a", node_name="n1") for i in range(5)])
    if namespace == "x":
        assert env.node_for(gpu_pod("x0", "x")) == "n2"
    else:
        assert env.node_for(gpu_pod("a5", "a")) == "n2"


# -- Koordinator's quota tree -------------------------------------------------------------

TREE = "quota.scheduling.koordinator.sh/"


def tree_quota(
    name: str,
    minimum: int,
    maximum: int,
    *,
    parent: str | None = None,
    is_parent: bool = False,
    weight: int | None = None,
) -> Json:
    labels = {f"{TREE}is-parent": "true"} if is_parent else {f"{TREE}is-parent": "false"}
    if parent is not None:
        labels[f"{TREE}parent"] = parent
    annotations = {} if weight is None else {f"{TREE}shared-weight": f'{{"{GPU}": "{weight}"}}'}
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": name, "namespace": name, "uid": f"eq-{name}", "labels": labels,
            "annotations": annotations, "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"min": {GPU: str(minimum)}, "max": {GPU: str(maximum)}},
    }  # fmt: skip


def tree_cluster(*objects: Json, dept_max: int = 10, b_weight: int | None = None) -> Env:
    """10 GPUs; a department (max ``dept_max``) over team-a and team-b (min 2, max 8 each)."""
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", extra={GPU: "5"}) for i in (1, 2)]
    return make_env(
        *nodes,
        tree_quota("dept", 4, dept_max, is_parent=True),
        tree_quota("team-a", 2, 8, parent="dept"),
        tree_quota("team-b", 2, 8, parent="dept", weight=b_weight),
        *objects,
        profile=PROFILE,
    )


def runtime(env: Env, quota_name: str) -> int:
    return capacity(env).tree_state().runtime[quota_name][GPU]


def test_tree_pods_are_bounded_by_their_parents_max() -> None:
    env = tree_cluster(dept_max=6)
    for i in range(6):
        bind(env, gpu_pod(f"a{i}", "team-a"))
    message = env.message(gpu_pod("a6", "team-a"))
    assert "Insufficient quotas, quotaName: team-a, runtime: map[nvidia.com/gpu:6]" in message
    assert "exceedDimensions: [nvidia.com/gpu]" in message
    # Without the department's ceiling the same team goes on to its own max.
    env = tree_cluster()
    for i in range(8):
        bind(env, gpu_pod(f"a{i}", "team-a"))
    assert "quotaName: team-a" in env.message(gpu_pod("a8", "team-a"))


def test_waiting_siblings_share_by_weight() -> None:
    pending = [gpu_pod(f"a{i}", "team-a") for i in range(8)]
    pending += [gpu_pod(f"b{i}", "team-b") for i in range(8)]
    env = tree_cluster(*pending, b_weight=40)  # b weighs 40 against a's default of max (8)
    # Mins 2 + 2 first, the 6 left split 8:40 -> 1 and 5.
    assert (runtime(env, "team-a"), runtime(env, "team-b")) == (3, 7)
    assert runtime(env, "dept") == 10
    bound = 0
    for raw in pending:
        try:
            bind(env, raw)
            bound += 1
        except FitError:  # refused by the quota, which the counts below show
            pass
    assert bound == 10
    used = capacity(env).tree_state().used
    assert (used["team-a"][GPU], used["team-b"][GPU]) == (3, 7)


def test_a_non_preemptible_pod_uses_only_min() -> None:
    env = tree_cluster()
    label = {f"{TREE}preemptible": "false"}
    for i in range(2):
        bind(env, gpu_pod(f"a{i}", "team-a", labels=label))
    message = env.message(gpu_pod("a2", "team-a", labels=label))
    assert message.startswith("0/2 nodes are available: Insufficient non-preemptible quotas, "
                              "quotaName: team-a, min: map[nvidia.com/gpu:2]")  # fmt: skip
    assert env.node_for(gpu_pod("a2", "team-a"))  # a preemptible one may borrow


def test_tree_labels_that_cannot_be_honoured_refuse_the_pod() -> None:
    env = tree_cluster()
    assert "names ElasticQuota dept, a parent quota" in env.message(
        gpu_pod("x", "team-a", labels={f"{TREE}name": "dept"})
    )
    assert "which does not exist" in env.message(
        gpu_pod("x", "team-a", labels={f"{TREE}name": "nope"})
    )
    assert f"{TREE}preemptible must be" in env.message(
        gpu_pod("x", "team-a", labels={f"{TREE}preemptible": "no"})
    )
    # In a flat quota's namespace the tree's pod labels mean nothing: refused, not ignored.
    flat = cluster()
    assert "apply only to pods of a quota tree" in flat.message(
        gpu_pod("x", "a", labels={f"{TREE}preemptible": "false"})
    )


def test_a_pod_label_puts_a_pod_of_any_namespace_in_a_tree_quota() -> None:
    env = tree_cluster(dept_max=1)
    bind(env, gpu_pod("x0", "elsewhere", labels={f"{TREE}name": "team-b"}))
    assert capacity(env).tree_state().used["team-b"][GPU] == 1
    assert "quotaName: team-b" in env.message(
        gpu_pod("x1", "elsewhere", labels={f"{TREE}name": "team-b"})
    )


def test_flat_quotas_keep_their_rules_beside_a_tree() -> None:
    env = tree_cluster(quota("a", 4, 6))
    for i in range(4):
        bind(env, gpu_pod(f"a{i}", "a"))
    # The sum of mins is the flat quotas' alone: the tree's mins lend nothing to them.
    assert env.message(gpu_pod("a4", "a")) == (
        "0/2 nodes are available: Pod a/a4 is rejected because total ElasticQuota used is more "
        "than Min (nvidia.com/gpu: 4 used + 1 requested > 4)."
    )
    # The tree gets what the flat quota's pods leave: 6 GPUs.
    for i in range(6):
        bind(env, gpu_pod(f"b{i}", "team-b"))
    assert runtime(env, "dept") == 6
    assert "quotaName: team-b" in env.message(gpu_pod("b6", "team-b"))


def tree_victims(env: Env, preemptor: Json) -> list[str]:
    """The victims tree reclaim would evict for the pod (names), [] when none would do."""
    state, pod_info, diagnosis = env.diagnose(preemptor)
    plugin = capacity(env)
    policy = TreeVictims(plugin, pod_info, state.data[plugin.name])
    if not policy.reclaim:
        return []
    nodes = env.view.nodes
    rows = np.flatnonzero(nodes.present[: nodes.size])
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, policy)
    if not found:
        return []
    return sorted(v.name for v in min(found, key=Candidate.rank).victims)


def borrowed_tree(a_labels: dict[str, str] | None = None) -> Env:
    """team-a holds 8 GPUs (its runtime is 6 now that team-b asks for 4), team-b 2."""
    pods = [
        gpu_pod(f"a{i}", "team-a", node_name="n1" if i < 5 else "n2", priority=100,
                labels=a_labels)
        for i in range(8)
    ]  # fmt: skip
    pods += [gpu_pod(f"b{i}", "team-b", node_name="n2") for i in range(2)]
    pods += [gpu_pod(f"b{i}", "team-b") for i in range(2, 4)]  # waiting
    return tree_cluster(*pods)


def test_a_tree_quota_under_runtime_reclaims_from_one_over_it() -> None:
    env = borrowed_tree()
    assert (runtime(env, "team-a"), runtime(env, "team-b")) == (6, 4)
    message = env.message(gpu_pod("b2", "team-b"))
    assert "Insufficient quotas, quotaName: dept" in message
    # team-b is within its runtime: one of team-a's pods goes, whatever its priority.
    chosen = tree_victims(env, gpu_pod("b2", "team-b"))
    assert len(chosen) == 1
    assert chosen[0].startswith("a")


def test_a_tree_quota_at_its_runtime_reclaims_nothing() -> None:
    env = borrowed_tree()
    # team-a, over its runtime, may not take anything back for another pod of its own.
    extra = gpu_pod("a8", "team-a", priority=1000)
    state, pod_info, _ = env.diagnose(extra)
    assert not TreeVictims(capacity(env), pod_info, state.data["CapacityScheduling"]).reclaim


@pytest.mark.parametrize(("gone", "retried"), [("b0", False), ("a0", True)])
def test_a_deletion_retries_a_pod_the_tree_refused_only_if_the_tree_may_place_it(
    gone: str, retried: bool
) -> None:
    """team-a holds its max (8 of the 10 GPUs), team-b one; a's ninth pod is refused at
    team-a's runtime and may reclaim nothing. b's pod going frees a GPU that team-a may not
    take: the pod waits. One of team-a's own going lets it in: it is tried again."""
    pods = [gpu_pod(f"a{i}", "team-a", node_name="n1" if i < 5 else "n2") for i in range(8)]
    pods += [gpu_pod("b0", "team-b", node_name="n2"), gpu_pod("a8", "team-a")]
    env = tree_cluster(*pods)
    waiting = env.view.pods["uid-team-a-a8"]
    assert "quotaName: team-a" in env.message(gpu_pod("a8", "team-a"))
    deleted = next(raw for raw in pods if raw["metadata"]["name"] == gone)
    env.events.on_pod("DELETED", deleted)
    assert capacity(env)._frees_quota(waiting, info(deleted), None) is retried


def test_a_pod_the_tree_refused_for_a_nomination_is_retried_as_if_it_had_gone() -> None:
    """team-a uses 7 of its runtime of 8 and a preemptor of its own is nominated: a8 is
    refused. A nomination goes with no event of its own (the preemptor bound, or its
    nomination dropped), so the next deletion tries a8 again as if it had gone."""
    pods = [gpu_pod(f"a{i}", "team-a", node_name="n1" if i < 5 else "n2") for i in range(7)]
    pods += [gpu_pod("b0", "team-b", node_name="n2")]
    pods += [gpu_pod("nom", "team-a"), gpu_pod("a8", "team-a")]
    env = tree_cluster(*pods)
    env.view.nominate(env.view.pods["uid-team-a-nom"], "n2")
    assert runtime(env, "team-a") == 8
    assert "quotaName: team-a" in env.message(gpu_pod("a8", "team-a"))
    env.events.on_pod("DELETED", pods[7])
    assert capacity(env)._frees_quota(env.view.pods["uid-team-a-a8"], info(pods[7]), None)


def test_a_pod_the_tree_refused_that_may_reclaim_is_retried_on_any_deletion() -> None:
    """team-b's waiting pod is refused at the department's runtime, but team-b is within its
    own while team-a is over its: a reclaim may make its room, so a deletion anywhere (one
    of team-b's own waiting pods here) tries it again."""
    env = borrowed_tree()
    waiting = env.view.pods["uid-team-b-b2"]
    assert "quotaName: dept" in env.message(gpu_pod("b2", "team-b"))
    other = env.view.pods["uid-team-b-b3"].raw
    env.events.on_pod("DELETED", other)
    assert capacity(env)._frees_quota(waiting, info(other), None)


def test_non_preemptible_pods_are_never_reclaimed() -> None:
    env = borrowed_tree({f"{TREE}preemptible": "false"})
    assert "Insufficient quotas, quotaName: dept" in env.message(gpu_pod("b2", "team-b"))
    assert tree_victims(env, gpu_pod("b2", "team-b")) == []


def on_n1(*n1: dict[str, Any]) -> Env:
    """team-a's five pods on n1 with the given fields, its three on n2 at priority 100,
    team-b's two on n2 and two more waiting: team-a is over its runtime."""
    pods = [gpu_pod(f"a{i}", "team-a", node_name="n1", **fields) for i, fields in enumerate(n1)]
    pods += [gpu_pod(f"a{i}", "team-a", node_name="n2", priority=100) for i in range(5, 8)]
    pods += [gpu_pod(f"b{i}", "team-b", node_name="n2") for i in range(2)]
    pods += [gpu_pod(f"b{i}", "team-b") for i in range(2, 4)]
    return tree_cluster(*pods)


def test_tree_reclaim_takes_a_terminating_pod_before_lower_priorities() -> None:
    """On n1 team-a's pods have priorities 5, 1, 1, 10 (terminating) and 7: reclaim takes
    the terminating one first, where kube-scheduler's order would take a priority-1 pod."""
    env = on_n1(*({"priority": p, "deleting": i == 3} for i, p in enumerate([5, 1, 1, 10, 7])))
    assert tree_victims(env, gpu_pod("b2", "team-b")) == ["a3"]


def test_tree_reclaim_takes_the_lowest_priority_then_the_youngest() -> None:
    pairs = [(5, 0), (1, 100), (1, 200), (10, 0), (7, 0)]
    env = on_n1(*({"priority": p, "started": s} for p, s in pairs))
    assert tree_victims(env, gpu_pod("b2", "team-b")) == ["a2"]


def test_pods_within_min_runtime_are_not_reclaimed() -> None:
    """team-a's pods on n1 (priority 0) started just now, under its min-runtime of 1h:
    reclaim takes one of its older, higher-priority pods on n2 instead."""
    just_now = time.time() - EPOCH.timestamp() - 5
    env = on_n1(*({"started": just_now} for _ in range(5)))
    assert tree_victims(env, gpu_pod("b2", "team-b"))[0] in {"a0", "a1", "a2", "a3", "a4"}
    team_a = tree_quota("team-a", 2, 8, parent="dept")
    team_a["metadata"]["annotations"]["berth.io/min-runtime"] = "1h"
    env.events.on_custom("ElasticQuota")("MODIFIED", team_a)
    assert tree_victims(env, gpu_pod("b2", "team-b")) in (["a5"], ["a6"], ["a7"])


def test_the_queue_share_is_the_tree_quotas_dominant_share() -> None:
    env = borrowed_tree()  # team-a uses 8 of its runtime 6, team-b 2 of 4
    plugin = capacity(env)
    assert plugin.queue_share(info(gpu_pod("b2", "team-b"))) == pytest.approx(0.5)
    assert plugin.queue_share(info(gpu_pod("a8", "team-a"))) == pytest.approx(8 / 6)
    assert plugin.queue_share(info(gpu_pod("x", "no-quota"))) == 0.0
    assert capacity(cluster()).queue_share(info(gpu_pod("a0", "a"))) == 0.0  # flat: no order


def test_the_periodic_check_retries_pods_that_may_reclaim() -> None:
    env = borrowed_tree()
    plugin = capacity(env)
    assert plugin.period() == 10.0
    waiting = {"uid-team-b-b2"}
    assert plugin.retry_now(*alike(lambda uid: uid in waiting)) == frozenset(waiting)
    # Nothing to take (team-a's pods are non-preemptible): nobody is retried.
    blocked = capacity(borrowed_tree({f"{TREE}preemptible": "false"}))
    assert blocked.retry_now(everyone, everyone) == frozenset()
    # Flat quotas: the check has nothing to do.
    assert capacity(cluster()).retry_now(everyone, everyone) == frozenset()


def test_the_periodic_check_interval_is_an_argument() -> None:
    nodes = [node("n1", cpu="32", memory="64Gi", extra={GPU: "5"})]
    profile = {
        **PROFILE,
        "pluginConfig": [
            {"name": "CapacityScheduling", "args": {"overRuntimeCheckInterval": "0s"}}
        ],
    }
    assert capacity(make_env(*nodes, profile=profile)).period() == 0.0
    profile["pluginConfig"][0]["args"] = {"overRuntimeCheckInterval": "soon"}
    with pytest.raises(ConfigError, match="overRuntimeCheckInterval"):
        make_env(*nodes, profile=profile)


def test_tree_reclaim_reads_victims_as_the_watch_shows_them_now() -> None:
    """Pods placed by the scheduler are counted on their node as they were at binding,
    before they started; under a min-runtime they are reclaimable once the watch shows
    them started long enough ago."""
    waiting = [gpu_pod(f"a{i}", "team-a") for i in range(8)]
    env = tree_cluster(*waiting, dept_max=8)
    team_a = tree_quota("team-a", 2, 8, parent="dept")
    team_a["metadata"]["annotations"]["berth.io/min-runtime"] = "1h"
    env.events.on_custom("ElasticQuota")("MODIFIED", team_a)
    for raw in waiting:
        bind(env, raw)
    env.events.on_pod("ADDED", gpu_pod("b2", "team-b"))
    assert tree_victims(env, gpu_pod("b2", "team-b")) == []  # not started: too young
    for raw in waiting:
        raw["status"]["startTime"] = "2024-01-01T00:00:00Z"
        env.events.on_pod("MODIFIED", raw)
    assert len(tree_victims(env, gpu_pod("b2", "team-b"))) == 1


def test_an_earlier_reclaims_victim_still_terminating_is_counted_not_evicted_again() -> None:
    """a3 was evicted by an earlier reclaim and still holds its GPU on n1: the dry run may
    count that room (what it frees is held elsewhere), so no second pod goes for it."""
    env = on_n1(*({"priority": p, "deleting": i == 3} for i, p in enumerate([5, 1, 1, 10, 7])))
    plugin = capacity(env)
    plugin.evicted(info(gpu_pod("a3", "team-a", node_name="n1", deleting=True)))
    assert "uid-team-a-a3" not in plugin.ledger.pods
    assert tree_victims(env, gpu_pod("b2", "team-b")) == ["a3"]


# -- Koordinator's default and system quotas ---------------------------------------------

DEFAULT_QUOTA = "koordinator-default-quota"
SYSTEM_QUOTA = "koordinator-system-quota"


def with_args(**args: Any) -> Json:
    return {**PROFILE, "pluginConfig": [{"name": "CapacityScheduling", "args": args}]}


def test_pods_of_no_quota_lower_what_the_root_hands_down() -> None:
    held = [gpu_pod(f"x{i}", "x", node_name="n1") for i in range(3)]
    held.append(gpu_pod("s0", "x", node_name="n2", labels={f"{TREE}name": SYSTEM_QUOTA}))
    waiting = [gpu_pod(f"b{i}", "team-b") for i in range(8)]
    env = tree_cluster(*held, *waiting)
    state = capacity(env).tree_state()
    assert state.outside_used[DEFAULT_QUOTA][GPU] == 3
    assert state.outside_used[SYSTEM_QUOTA][GPU] == 1
    # 10 GPUs less 3 and 1: team-b, wanting 8, gets the 6 left.
    assert state.handed_down[GPU] == 6
    assert (runtime(env, "dept"), runtime(env, "team-b")) == (6, 6)
    # A pod naming the default quota is its pod, not refused as naming a missing quota.
    assert env.node_for(gpu_pod("x3", "x", labels={f"{TREE}name": DEFAULT_QUOTA}))


async def test_the_default_quotas_max_refuses_pods_of_no_quota_without_preemption() -> None:
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", extra={GPU: "5"}) for i in (1, 2)]
    env = make_env(*nodes, quota("a", 4, 6), profile=with_args(defaultQuotaGroupMax={GPU: "2"}))
    for i in range(2):
        bind(env, gpu_pod(f"x{i}", "x"))
    preemptor = gpu_pod("x2", "x", priority=1000)
    assert env.message(preemptor) == (
        f"0/2 nodes are available: Insufficient quotas, quotaName: {DEFAULT_QUOTA}, "
        "runtime: map[nvidia.com/gpu:2], used: map[nvidia.com/gpu:2], pod's request: "
        "map[cpu:100m memory:128Mi nvidia.com/gpu:1 pods:1], exceedDimensions: [nvidia.com/gpu]."
    )
    state, pod_info, diagnosis = env.diagnose(preemptor)
    result = await capacity(env).post_filter(state, pod_info, diagnosis)
    assert result.message == f"preemption: ElasticQuota {DEFAULT_QUOTA} is at its max: " + (
        "its pods preempt nothing for it"
    )
    # A flat quota's pods are not the default quota's; without a max nothing changes.
    assert env.node_for(gpu_pod("a0", "a"))
    assert make_env(*nodes, quota("a", 4, 6), profile=PROFILE).node_for(preemptor)


def test_a_stored_default_quota_sets_the_max_over_the_argument() -> None:
    stored = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": DEFAULT_QUOTA, "namespace": "ops", "uid": "eq-default",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"max": {GPU: "1"}},
    }  # fmt: skip
    nodes = [node("n1", cpu="32", memory="64Gi", extra={GPU: "5"})]
    env = make_env(*nodes, stored, profile=with_args(defaultQuotaGroupMax={GPU: "4"}))
    bind(env, gpu_pod("x0", "x"))
    assert f"quotaName: {DEFAULT_QUOTA}, runtime: map[nvidia.com/gpu:1]" in env.message(
        gpu_pod("x1", "x")
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (
            {"quotaGroupNamespace": "Koordinator_System"},
            "quotaGroupNamespace: 'Koordinator_System' is not a namespace name",
        ),
        ({"revokePodInterval": "1s"}, "revokePodInterval: not supported"),
        ({"hookPlugins": []}, "hookPlugins: not supported"),
        ({"enableRuntimeQuota": False}, "enableRuntimeQuota: False is not supported"),
        ({"defaultQuotaGroupMax": {GPU: "-1"}}, "defaultQuotaGroupMax must not be negative"),
    ],
)
def test_koordinators_elasticquota_arguments_are_honoured_or_refused_by_name(
    args: dict[str, Any], named: str
) -> None:
    nodes = [node("n1", cpu="32", memory="64Gi", extra={GPU: "5"})]
    with pytest.raises(ConfigError, match=named):
        make_env(*nodes, profile=with_args(**args))
    honoured = with_args(
        enableRuntimeQuota=True, systemQuotaGroupMax={"cpu": "2"}, defaultQuotaGroupMax={}
    )
    assert capacity(make_env(*nodes, profile=honoured)).outside_max == {
        DEFAULT_QUOTA: {},
        SYSTEM_QUOTA: {"cpu": 2000},
    }


def reserved_for_web(*objects: Json) -> Env:
    """The 10-GPU cluster with the Reservation plugin on and reservation r on n1, whose
    owners are the pods labelled app=web."""
    r = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r", "uid": "rsv-r", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "allocateOnce": False,
        },
        "status": {"phase": "Available", "nodeName": "n1", "allocatable": {GPU: "8"}},
    }
    profile = {
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": "CapacityScheduling"}, {"name": "Reservation"}],
                "disabled": [{"name": "DefaultPreemption"}],
            }
        }
    }
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", extra={GPU: "5"}) for i in (1, 2)]
    return make_env(*nodes, quota("a", 4, 6), quota("b", 6, 8), r, *objects, profile=profile)


def in_r(raw: Json) -> Json:
    raw["metadata"]["labels"] = {"app": "web"}
    raw["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-allocated": '{"name": "r", "uid": "rsv-r"}'
    }
    return raw


@pytest.mark.parametrize("shielded", [8, 7])
def test_a_deletion_retries_a_pod_within_its_min_only_if_reclaim_could_admit_it(
    shielded: int,
) -> None:
    """a (min 4) uses 2 and b (min 6) borrows 8 of the 10 GPUs; a's new pod asks 2. With
    one b pod gone the quotas still use 9 + 2 > 10, so only reclaim admits it, and b's
    pods running in reservation r (reserved for app=web) are no stranger's victims. With
    all eight of them there, a deletion that frees one GPU cannot help, and the pod waits;
    with one of b's pods outside r, evicting it would, and the pod is tried again."""
    b_pods = [gpu_pod(f"b{i}", "b", node_name="n1" if i < 5 else "n2") for i in range(8)]
    for raw in b_pods[:shielded]:
        in_r(raw)
    a_pods = [gpu_pod(f"a{i}", "a", node_name="n2") for i in range(2)]
    env = reserved_for_web(*b_pods, *a_pods)
    waiting = info(pod("a-new", "100m", "128Mi", namespace="a", requests={GPU: "2"}))
    gone = b_pods[0]
    env.events.on_pod("DELETED", gone)
    assert capacity(env)._frees_quota(waiting, info(gone), None) is (shielded == 7)


@pytest.mark.parametrize(("request_gpus", "retried"), [(3, True), (4, False)])
def test_a_deletion_retries_a_pod_only_if_one_nodes_victims_could_admit_it(
    request_gpus: int, retried: bool
) -> None:
    """a is at its max (6) with three pods on each node; its new pod of higher priority
    asks 3 or 4. Evicting a's three pods on one node gives 3 back: enough for 3, not for
    4, which only the victims of both nodes together would make room for, and a
    preemption evicts on one node. A deletion elsewhere retries the first, not the
    second (every dry run would refuse it)."""
    a_pods = [gpu_pod(f"a{i}", "a", node_name="n1" if i < 3 else "n2") for i in range(6)]
    b_pod = gpu_pod("b0", "b", node_name="n2")
    env = cluster(*a_pods, b_pod)
    waiting = info(
        pod("a-new", "100m", "128Mi", namespace="a", priority=10,
            requests={GPU: str(request_gpus)})
    )  # fmt: skip
    env.events.on_pod("DELETED", b_pod)
    assert capacity(env)._frees_quota(waiting, info(b_pod), None) is retried


def preempting_for_a() -> tuple[Env, Json, Json]:
    """b (min 6) borrows 7 of the 10 GPUs, among them bh (2 GPUs, priority 100) on n1; a
    (min 4) uses 3. a's w1 and w2 (priority 10, in that order) and x (priority 0) wait,
    each refused by the sum of mins. Returns the env, x and bh."""
    b_pods = [gpu_pod(f"b{i}", "b", node_name="n1" if i < 3 else "n2") for i in range(5)]
    bh = pod("bh", "100m", "128Mi", namespace="b", node_name="n1", priority=100,
             requests={GPU: "2"})  # fmt: skip
    a_pods = [gpu_pod(f"a{i}", "a", node_name="n2") for i in range(3)]
    waiting = [gpu_pod(f"w{i}", "a", priority=10, created=i) for i in (1, 2)]
    x = gpu_pod("x", "a", created=3)
    env = cluster(*b_pods, bh, *a_pods, *waiting, x)
    for raw in (*waiting, x):
        assert env.diagnose(raw)[2].prefilter is not None
    return env, x, bh


def test_a_preemptor_is_retried_when_its_victim_goes_before_its_nomination_is_seen() -> None:
    """x reclaims bh (b is over its min) and is nominated to n1; bh's deletion arrives
    before the status saying so. The room bh frees goes first to w1 and w2 (higher
    priorities, which x's nomination does not hold back) and would pass x over; but x's
    nomination holds its share, so x is retried, as for any preemptor when its victim goes
    (the long churn left such a preemptor Pending at rest until the end)."""
    env, _, bh = preempting_for_a()
    plugin = capacity(env)
    preemptor = env.view.pods["uid-a-x"]
    plugin.evicted(info(bh))
    env.view.nominate(preemptor, "n1")
    env.events.on_pod("DELETED", bh)
    assert plugin._frees_quota(preemptor, info(bh), None)


def b4_deleted(env: Env) -> CapacityScheduling:
    """b4's deletion frees one GPU of a's: its room goes to w1 alone (asked of w1, w2 and
    x, as the queue does)."""
    plugin = capacity(env)
    b4 = env.view.pods["uid-b-b4"].raw
    env.events.on_pod("DELETED", b4)
    names = ("w1", "w2", "x")
    retried = [plugin._frees_quota(env.view.pods[f"uid-a-{n}"], info(b4), None) for n in names]
    assert retried == [True, False, False]
    return plugin


def test_a_pod_passed_over_that_preempted_since_is_retried_once_its_quota_admits_it() -> None:
    """b4's deletion frees one GPU: the room goes to w1 and passes w2 and x over. w1 is
    bound, x reclaims bh and its nomination is seen. The room never lists a nominated pod:
    the periodic check tries x once the quotas admit it (bh gone), not before."""
    env, x, bh = preempting_for_a()
    plugin = b4_deleted(env)
    bind_in_place(env, env.view.pods["uid-a-w1"].raw, "n2")
    x["status"]["nominatedNodeName"] = "n1"
    env.events.on_pod("MODIFIED", x)
    assert plugin.retry_now(everyone, everyone) == frozenset()  # 10 used of 10
    plugin.evicted(info(bh))
    env.events.on_pod("DELETED", bh)
    assert plugin.retry_now(everyone, everyone) == {"uid-a-w2", "uid-a-x"}


def test_a_pod_passed_over_is_retried_once_the_winner_admitted_is_placed_nowhere() -> None:
    """b4's deletion frees one GPU: the room goes to w1 and passes w2 over. w1's quota
    admits it and then no node takes it: no pod is counted, bound or gone, and yet the GPU
    is w2's to claim now. The periodic check tries w2, and x after it (the crash churn left
    such a pod Pending half a minute, its quota admitting it and its own Reservation
    holding room)."""
    env, _, _ = preempting_for_a()
    plugin = b4_deleted(env)
    assert plugin.retry_now(*alike(lambda uid: uid != "uid-a-w1")) == frozenset()  # w1 claims it
    w1 = env.view.pods["uid-a-w1"]
    assert plugin.pre_filter(CycleState(), w1, env.view.nodes).ok
    assert plugin.retry_now(*alike(lambda uid: uid != "uid-a-w1")) == {"uid-a-w2"}
    # w2 too is placed nowhere: x next, and then nobody is left to try.
    assert plugin.pre_filter(CycleState(), env.view.pods["uid-a-w2"], env.view.nodes).ok
    assert plugin.retry_now(*alike(lambda uid: uid == "uid-a-x")) == {"uid-a-x"}
    assert plugin.pre_filter(CycleState(), env.view.pods["uid-a-x"], env.view.nodes).ok
    assert plugin.retry_now(everyone, everyone) == frozenset()


def test_a_pod_the_room_admits_is_sent_back_only_once_its_backoff_is_over() -> None:
    """b4's deletion frees one GPU: the room goes to w1, which is then placed nowhere. w2
    is next and its quota admits it, but its backoff still runs: it is not sent back yet.
    Sent back then, it waited out its backoff (up to ten seconds) and found the room taken
    by pods created meanwhile: in the long crash run half of all refusals were such
    retries. w2 keeps its claim meanwhile (x, behind it, is not tried), and once its
    backoff is over it is sent back."""
    env, _, _ = preempting_for_a()
    plugin = b4_deleted(env)
    assert plugin.pre_filter(CycleState(), env.view.pods["uid-a-w1"], env.view.nodes).ok

    def waiting(uid: str) -> bool:
        return uid != "uid-a-w1"

    def backed_off(uid: str) -> bool:
        return waiting(uid) and uid != "uid-a-w2"

    assert plugin.retry_now(waiting, backed_off) == frozenset()
    assert plugin.retry_now(waiting, waiting) == {"uid-a-w2"}


def nominated_ahead_of_w(w_gpus: int) -> tuple[Env, Json, CapacityScheduling]:
    """b (min 6) uses 7 of the 10 GPUs, a (min 4) 1; a's z (2 GPUs, priority 10) is
    nominated to n2 and holds its share; a's w (``w_gpus``) is refused at PreFilter, and
    the periodic check that follows finds nothing to retry. Returns the env, z and the
    plugin."""
    b_pods = [gpu_pod(f"b{i}", "b", node_name="n1" if i < 4 else "n2") for i in range(7)]
    a_pod = gpu_pod("a0", "a", node_name="n2")
    z = pod("z", "100m", "128Mi", namespace="a", priority=10, nominated="n2",
            requests={GPU: "2"})  # fmt: skip
    w = pod("w", "100m", "128Mi", namespace="a", requests={GPU: str(w_gpus)})
    env = cluster(*b_pods, a_pod, z, w)
    plugin = capacity(env)
    assert env.diagnose(w)[2].prefilter is not None
    assert plugin.retry_now(everyone, everyone) == frozenset()
    assert plugin.retry_now(everyone, everyone) == frozenset(), "nothing changed since"
    return env, z, plugin


def test_a_refused_pod_its_quota_admits_once_a_nomination_goes_is_retried() -> None:
    """w asks 2: with z's share held, 8 used + 2 nominated + 2 > 10. z's nomination is
    dropped (it fit nowhere; no pod left a node, no event requeues w): w's quota admits it
    now, and the periodic check tries it (the churn left such a pod Pending at rest)."""
    env, z, plugin = nominated_ahead_of_w(2)
    del env.view.nominated[z["metadata"]["uid"]]
    assert plugin.retry_now(everyone, everyone) == {"uid-a-w"}
    assert plugin.retry_now(*alike(lambda uid: uid != "uid-a-w")) == frozenset(), "not waiting"


def test_a_refused_pod_that_reclaim_now_admits_is_retried_once() -> None:
    """w asks 3: with z's share held, a is over its min (1 + 2 + 3 > 4) and may evict only
    its own lower-priority pods: none, nothing admits it. z's nomination is dropped: a is
    within its min (1 + 3), b borrows one GPU, and evicting one of b's pods admits w. No
    quota started to borrow (b already did): the periodic check tries w once; while
    reclaim still admits it (its dry run failed) it is not tried again."""
    env, z, plugin = nominated_ahead_of_w(3)
    del env.view.nominated[z["metadata"]["uid"]]
    assert plugin.retry_now(everyone, everyone) == {"uid-a-w"}
    assert env.diagnose(env.view.pods["uid-a-w"].raw)[2].prefilter is not None
    env.add(gpu_pod("b7", "b", node_name="n2"))  # b borrows more: reclaim admits w still
    assert plugin.retry_now(everyone, everyone) == frozenset()


def test_of_pods_alike_that_reclaim_now_admits_one_is_retried_a_check() -> None:
    """v is w's twin (quota a, priority, 3 GPUs), created later, and refused alike. z's
    nomination is dropped and reclaim admits both, one node's victims one pod: w, first
    in queue order, is tried, and v at the next check (both at once, each was refused
    after its dry run: twenty pods of a quota crossing its min in the long crash run)."""
    env, z, plugin = nominated_ahead_of_w(3)
    v = pod("v", "100m", "128Mi", namespace="a", created=1, requests={GPU: "3"})
    env.add(v)
    assert env.diagnose(v)[2].prefilter is not None
    assert plugin.retry_now(everyone, everyone) == frozenset()
    del env.view.nominated[z["metadata"]["uid"]]
    assert plugin.retry_now(everyone, everyone) == {"uid-a-w"}
    assert plugin.retry_now(*alike(lambda uid: uid != "uid-a-w")) == {"uid-a-v"}
    assert plugin.retry_now(*alike(lambda uid: uid != "uid-a-w")) == frozenset()


def test_a_refused_pod_over_its_min_is_left_to_events_when_evictions_start_to_admit_it() -> None:
    """b uses its min of 6, a its 4 at priority 10; a's w (priority 10) is refused (over
    a's min, 11 > 10, nothing of lower priority to evict). One of b's pods goes and a pod
    of a's at priority 0 comes: evicting it would admit w now. w is over its min: the
    periodic check leaves it to the events (under the long churn such answers turned round
    each time a quota crossed its min, and their retries starved new pods)."""
    b_pods = [gpu_pod(f"b{i}", "b", node_name="n1") for i in range(5)]
    b_pods.append(gpu_pod("b5", "b", node_name="n2"))
    a_pods = [gpu_pod(f"a{i}", "a", node_name="n2", priority=10) for i in range(4)]
    w = gpu_pod("w", "a", priority=10)
    env = cluster(*b_pods, *a_pods, w)
    plugin = capacity(env)
    assert env.diagnose(w)[2].prefilter is not None
    assert plugin.retry_now(everyone, everyone) == frozenset()
    env.events.on_pod("DELETED", b_pods[5])
    env.add(gpu_pod("low", "a", node_name="n2"))
    assert plugin._admissible(env.view.pods["uid-a-w"]), "evicting low would admit w"
    assert plugin.retry_now(everyone, everyone) == frozenset()


def bind_in_place(env: Env, raw: Json, node_name: str) -> None:
    """Reserve the pod on the node and let the watch show it bound there."""
    pod_info = info(raw)
    env.view.assume(pod_info, node_name)
    assert capacity(env).reserve(CycleState(), pod_info, node_name).ok
    raw["spec"]["nodeName"] = node_name
    raw["status"]["phase"] = "Running"
    env.events.on_pod("MODIFIED", raw)


KOORDINATOR_POINTS = {
    point: {"enabled": [{"name": "ElasticQuota"}]}
    for point in ("preFilter", "postFilter", "reserve")
}


def test_koordinators_elasticquota_plugin_is_the_same_quota_plugin() -> None:
    """koord-scheduler's configuration names the quota plugin ElasticQuota, at preFilter,
    postFilter and reserve, with its ElasticQuotaArgs: the same rules as CapacityScheduling."""
    args = {"kind": "ElasticQuotaArgs", "enableRuntimeQuota": True, "systemQuotaGroupMax": {}}
    profile = {
        "plugins": {**KOORDINATOR_POINTS, "postFilter": {"disabled": [{"name": "*"}],
                                                        "enabled": [{"name": "ElasticQuota"}]}},
        "pluginConfig": [{"name": "ElasticQuota", "args": args}],
    }  # fmt: skip
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", extra={GPU: "5"}) for i in (1, 2)]
    env = make_env(*nodes, quota("a", 4, 6), quota("b", 6, 8), profile=profile)
    assert [p.name for p in env.plugins.pre_filter if p.name == "ElasticQuota"] == ["ElasticQuota"]
    for i in range(6):
        raw = gpu_pod(f"a{i}", "a")
        state, pod_info = CycleState(), info(raw)
        placement = env.cycle.schedule(state, pod_info)
        env.view.assume(pod_info, placement.node)
        assert env.plugin("ElasticQuota").reserve(state, pod_info, placement.node).ok
    assert env.message(gpu_pod("a6", "a")) == (
        "0/2 nodes are available: Pod a/a6 is rejected because ElasticQuota a is more than Max "
        "(nvidia.com/gpu: 6 used + 1 requested > 6)."
    )


def test_both_names_of_the_quota_plugin_in_one_profile_are_refused() -> None:
    both = {"plugins": {"multiPoint": {"enabled": [{"name": "CapacityScheduling"},
                                                   {"name": "ElasticQuota"}]}}}  # fmt: skip
    with pytest.raises(ConfigError, match="CapacityScheduling and ElasticQuota are one quota"):
        make_env(profile=both)
