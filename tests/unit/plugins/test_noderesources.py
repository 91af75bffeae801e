"""NodeResourcesFit and NodeResourcesBalancedAllocation scores, with kube-scheduler's
formulas (least/most allocated, balanced allocation, non-zero requests).
"""

from __future__ import annotations

import pytest

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import CycleState
from tests.unit.scheduler_fixtures import (
    Env,
    Json,
    info,
    make_env,
    node,
    pod,
    scores,
)

Mi = 1024**2
Gi = 1024**3


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


# -- queueing hint ---------------------------------------------------------------------------


def left(env: Env, raw: Json) -> PodInfo:
    """The pod as it was, after the watch has shown it deleted (the view first, as the
    event table runs)."""
    before = info(raw)
    env.events.on_pod("DELETED", raw)
    return before


def test_a_pod_leaving_a_node_helps_only_pods_that_node_could_then_take() -> None:
    """n1 (4 CPU) keeps 2 CPU of priority 10 and 1 of priority 0 once `gone` leaves. A pod
    of priority 5 could have the 1 CPU of priority 0 by preemption: 2 CPU fit there, 3 do
    not, whatever preemption does; the deletion is no news for the 3-CPU pod."""
    gone = pod("gone", "1", node_name="n1", priority=10)
    env = make_env(
        node("n1"),
        pod("high", "2", node_name="n1", priority=10),
        pod("low", "1", node_name="n1", priority=0),
        gone,
    )
    fit = env.plugin("NodeResourcesFit")
    before = left(env, gone)
    assert fit.after_pod_change(info(pod("two", "2", priority=5)), before, None)
    assert not fit.after_pod_change(info(pod("three", "3", priority=5)), before, None)
    # Of higher priority than everything there: all of it could go.
    assert fit.after_pod_change(info(pod("urgent", "3", priority=20)), before, None)
    # Its own nominated node: the victims leaving are what it waits for.
    nominated = pod("three", "3", priority=5)
    nominated["status"] = {"nominatedNodeName": "n1"}
    assert fit.after_pod_change(info(nominated), before, None)
    # A pod that was never on a node freed nothing this hint can weigh: retried.
    assert fit.after_pod_change(info(pod("three", "3", priority=5)), info(pod("p", "1")), None)


def test_a_preemptor_waiting_for_its_victims_is_sent_back_when_they_are_all_gone() -> None:
    """A preemptor of 3.5 CPU nominated to n1 (4 CPU) waits for its three victims of 1.3
    CPU there, which the scheduler has had deleted; it preempts nothing meanwhile. The
    first two leaving n1, or a pod leaving n2 that only evictions would make room beside,
    are no news for it; the last victim leaving n1 is."""
    victims = [pod(f"v{i}", "1300m", node_name="n1") for i in range(3)]
    n2_pods = [pod("n2-low", "2", node_name="n2"), pod("n2-gone", "1", node_name="n2")]
    env = make_env(node("n1"), node("n2"), *victims, *n2_pods)
    fit = env.plugin("NodeResourcesFit")
    preemptor = pod("preemptor", "3500m", priority=5)
    preemptor["status"] = {"nominatedNodeName": "n1"}
    waiting = info(preemptor)
    env.view.leaving.update(info(v).uid for v in victims)
    assert not fit.after_pod_change(waiting, left(env, victims[0]), None)
    assert not fit.after_pod_change(waiting, left(env, victims[1]), None)
    # n2 keeps 2 CPU of priority 0: 2 free, not 3.5, unless it preempted there.
    assert not fit.after_pod_change(waiting, left(env, n2_pods[1]), None)
    assert fit.after_pod_change(waiting, left(env, victims[2]), None)
    assert env.view.leaving == set()
    # With no victim of its own leaving, it may preempt again: n2's evictions count.
    assert fit.after_pod_change(waiting, left(env, n2_pods[0]), None)


def test_room_held_for_a_nominated_preemptor_is_no_news_for_others() -> None:
    """n1's last pod leaves while another preemptor of the same priority is nominated
    there, holding 3 of its 4 CPU: a 2-CPU pod of that priority could not take n1; one of
    1 CPU could, and one of higher priority could take the nominee's room."""
    gone = pod("gone", "3", node_name="n1")
    nominee = pod("nominee", "3", priority=5, nominated="n1")
    env = make_env(node("n1"), gone, nominee)
    env.view.nominate(info(nominee), "n1")
    fit = env.plugin("NodeResourcesFit")
    before = left(env, gone)
    assert not fit.after_pod_change(info(pod("two", "2", priority=5)), before, None)
    assert fit.after_pod_change(info(pod("one", "1", priority=5)), before, None)
    assert fit.after_pod_change(info(pod("urgent", "2", priority=9)), before, None)


def test_with_quotas_another_namespace_s_pods_count_as_reclaimable() -> None:
    """A quota within its min reclaims from other quotas whatever the priority: for a pod
    of a quota namespace, pods of other namespaces might all go."""
    gone = pod("gone", "1", node_name="n1", priority=10)
    quota = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "team"},
        "spec": {"min": {"cpu": "4"}, "max": {"cpu": "8"}},
    }
    env = make_env(node("n1"), pod("high", "2", node_name="n1", priority=10), gone)
    fit = env.plugin("NodeResourcesFit")
    before = left(env, gone)
    wanted = info(pod("three", "3", namespace="team", priority=5))
    assert not fit.after_pod_change(wanted, before, None)
    env.add(quota)
    assert fit.after_pod_change(wanted, before, None)


def test_a_node_added_helps_only_pods_its_allocatable_could_hold() -> None:
    env = make_env(node("small", cpu="2"))
    fit = env.plugin("NodeResourcesFit")
    big = node("big", cpu="8")
    env.add(big)
    assert fit.after_node_change(info(pod("six", "6")), None, big)
    assert not fit.after_node_change(info(pod("ten", "10")), None, big)
    # A resource the node has none of: it can never hold the pod.
    gpu = pod("gpu", "1")
    gpu["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    assert not fit.after_node_change(info(gpu), None, big)
    grown = node("small", cpu="16")
    env.events.on_node("MODIFIED", grown)
    assert fit.after_node_change(info(pod("ten", "10")), node("small", cpu="2"), grown)


def held_reservation(name: str, node_name: str | None, phase: str, owner: str) -> Json:
    body: Json = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": owner}}}],
        },
        "status": {"phase": phase},
    }
    if node_name is not None:
        body["status"].update(nodeName=node_name, allocatable={"cpu": "2"})
    return body


def test_a_reservation_helps_its_owners_and_pods_that_fit_in_the_room_it_gives_back() -> None:
    """n1 (4 CPU) has 1 CPU of a pod and 2 CPU held by a reservation for `batch` pods. A
    reservation created or placed takes room: no help to a pod that may not own it."""
    env = make_env(node("n1"), pod("there", "1", node_name="n1", priority=10))
    fit = env.plugin("NodeResourcesFit")
    pending = held_reservation("r", None, "Pending", "batch")
    placed = held_reservation("r", "n1", "Available", "batch")
    web = info(pod("web", "2", priority=0))
    assert not fit.after_reservation_change(web, None, pending)
    env.add(placed)
    assert not fit.after_reservation_change(web, pending, placed)
    # An owner is told of every change: what the reservation holds may become its own.
    owner = pod("job", "2")
    owner["metadata"]["labels"] = {"app": "batch"}
    assert fit.after_reservation_change(info(owner), pending, placed)
    # It expires: its 2 CPU go back to n1, where 3 CPU are then free.
    failed = held_reservation("r", "n1", "Failed", "batch")
    env.events.on_custom("Reservation")("MODIFIED", failed)
    assert fit.after_reservation_change(web, placed, failed)
    assert not fit.after_reservation_change(info(pod("four", "4")), placed, failed)
    # Deleted while it held the room: the same.
    env.add(held_reservation("s", "n1", "Available", "batch"))
    env.events.on_custom("Reservation")(
        "DELETED", held_reservation("s", "n1", "Available", "batch")
    )
    gone = held_reservation("s", "n1", "Available", "batch")
    assert fit.after_reservation_change(web, gone, gone)


# -- NodeResourcesFitArgs.ignoredResources / ignoredResourceGroups ---------------------------


def fit_args(**args: object) -> Json:
    return {"pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}


@pytest.mark.parametrize(
    ("args", "feasible"),
    [
        ({}, []),
        ({"ignoredResources": ["example.com/foo"]}, ["n1"]),
        ({"ignoredResourceGroups": ["example.com"]}, ["n1"]),
        ({"ignoredResources": ["example.com/bar"]}, []),
        ({"ignoredResourceGroups": ["example.org"]}, []),
    ],
)
def test_ignored_extended_resources_are_not_checked_by_the_filter(
    args: dict[str, object], feasible: list[str]
) -> None:
    """kube-scheduler's: a node without the extended resource (or without enough of it)
    still fits when the resource, or its domain, is ignored."""
    env = make_env(node("n1"), profile=fit_args(**args))
    assert env.feasible(pod("p", requests={"cpu": "1", "example.com/foo": "2"})) == feasible


def test_only_extended_resources_can_be_ignored() -> None:
    """cpu is Kubernetes' own: naming it in ignoredResources does not stop the check."""
    env = make_env(node("n1", cpu="1"), profile=fit_args(ignoredResources=["cpu"]))
    assert env.feasible(pod("p", "2")) == []


def test_one_rows_answer_is_the_whole_tables_at_that_row() -> None:
    """Preemption's dry runs ask NodeResourcesFit about one node at a time; that answer is
    the full filter's at the row, with nominated preemptors holding room, pods taken off
    the row, and more than one resource short."""
    env = make_env(
        node("n1", cpu="4", memory="4Gi", pods=3),
        node("n2", cpu="2", memory="8Gi"),
        node("n3", cpu="8", memory="1Gi"),
        pod("a", "3", memory="1Gi", node_name="n1"),
        pod("b", "1", node_name="n1"),
        pod("c", "1", memory="7Gi", node_name="n2"),
        pod("held", "5", priority=100, nominated="n3"),
    )
    fit = env.plugin("NodeResourcesFit")
    nodes = env.view.nodes
    for raw in (pod("p", "2", memory="2Gi"), pod("q", "100m", priority=200), pod("r", "9")):
        state, wanted = CycleState(), info(raw)
        env.cycle.feasible(state, wanted)  # PreFilter fills what the filter reads
        for changed in (False, True):
            if changed:  # a dry run takes a and c off their rows
                for raw_victim in (
                    pod("a", "3", memory="1Gi", node_name="n1"),
                    pod("c", "1", memory="7Gi", node_name="n2"),
                ):
                    victim = info(raw_victim)
                    row = nodes.index[victim.node_name]
                    env.handle.runner.run_remove_pod(state, wanted, victim, row)
            whole = fit.filter(state, wanted, nodes)
            for name in ("n1", "n2", "n3"):
                row = nodes.index[name]
                expected = tuple(r.message for r in whole.reasons if r.rows[row])
                assert fit.filter_at(state, wanted, nodes, row) == expected, (raw, name)


def test_a_dry_runs_node_only_verdicts_follow_a_node_change() -> None:
    """Preemption's dry runs reuse the verdicts of filters that read no pods (here
    NodeAffinity) within an attempt, and judge again once a node changed."""
    env = make_env(node("n1", cpu="4"), pod("low", "4", node_name="n1"))
    wanted = info(pod("p", "1", node_selector={"disk": "ssd"}))
    state = CycleState()
    env.cycle.feasible(state, wanted)
    runner = env.handle.runner
    row = env.view.nodes.index["n1"]
    assert runner.run_filter_at(state, wanted, row) == (
        "node(s) didn't match Pod's node affinity/selector",
    )
    env.events.on_node("MODIFIED", node("n1", cpu="4", labels={"disk": "ssd"}))
    assert runner.run_filter_at(state, wanted, row) == ("Insufficient cpu",)
