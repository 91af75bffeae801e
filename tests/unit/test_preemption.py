"""DefaultPreemption's dry runs and choices, checked against kube-scheduler.

kube-scheduler facts (pkg/scheduler/framework/plugins/defaultpreemption and
framework/preemption): victims are the pods of lower priority; all are removed, then given
back most important first (higher priority, then earlier status.startTime), PDB-violating
ones before the others; the victims come back sorted by importance. Candidates are ranked
by fewest PDB violations, lowest highest-priority victim, smallest priority sum, fewest
victims, latest start of the highest-priority victims. Nodes that failed for
UnschedulableAndUnresolvable reasons are "Preemption is not helpful for scheduling"; a
node with no lower-priority pod is "No preemption victims found for incoming pod"; a node
where the pod still does not fit without them keeps the filter's own reason.

No API calls here: dry runs and ranking are called directly, and post_filter only on
paths that return before evicting anything.
"""

from __future__ import annotations

import pytest

from berth.scheduler.framework.interface import PostFilterResult
from berth.scheduler.framework.messages import fit_message
from berth.scheduler.framework.preemption import Candidate
from berth.scheduler.plugins.defaultpreemption import DefaultPreemption
from tests.unit.scheduler_fixtures import (
    Env,
    Json,
    expr,
    info,
    make_env,
    node,
    pdb,
    pod,
    taint,
)

PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


def preemption(env: Env) -> DefaultPreemption:
    plugin: DefaultPreemption = env.plugin("DefaultPreemption")
    return plugin


def victims_on(env: Env, preemptor: Json, node_name: str) -> list[str] | None:
    """Victims select_victims picks on one node (most important first), None if none do."""
    state, pod_info, _ = env.diagnose(preemptor)
    plugin = preemption(env)
    row = env.view.nodes.index[node_name]
    candidate = plugin.evaluator.select_victims(state, pod_info, row, plugin)
    if not isinstance(candidate, Candidate):
        return None  # the reasons no eviction would do
    return [v.name for v in candidate.victims]


def candidates(env: Env, preemptor: Json) -> list[Candidate]:
    state, pod_info, diagnosis = env.diagnose(preemptor)
    plugin = preemption(env)
    rows = plugin.evaluator.helpful_rows(diagnosis)
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, plugin)
    return found


def chosen(env: Env, preemptor: Json) -> str:
    return min(candidates(env, preemptor), key=Candidate.rank).node


async def post_filter(env: Env, preemptor: Json) -> PostFilterResult:
    """PostFilter on a path that must not reach the API (the handle has no writer)."""
    assert env.handle.writer is None
    state, pod_info, diagnosis = env.diagnose(preemptor)
    return await preemption(env).post_filter(state, pod_info, diagnosis)


def bound(
    name: str,
    cpu: str,
    node_name: str,
    priority: int,
    at: float = 0,
    *,
    started: float | None = None,
    labels: dict[str, str] | None = None,
    deleting: bool = False,
    conditions: tuple[Json, ...] = (),
) -> Json:
    """A running pod, created (and by default started) ``at`` seconds after the epoch."""
    return pod(
        name,
        cpu,
        node_name=node_name,
        priority=priority,
        created=at,
        started=started,
        labels=labels,
        deleting=deleting,
        conditions=conditions,
    )


# -- who can be a victim ---------------------------------------------------------------------


def test_only_lower_priority_pods_are_victims() -> None:
    env = make_env(
        node("n1"),
        bound("low", "2", "n1", priority=1),
        bound("high", "2", "n1", priority=100),
    )
    assert victims_on(env, pod("p", "2", priority=50), "n1") == ["low"]


def test_equal_priority_pods_are_not_victims() -> None:
    env = make_env(node("n1"), bound("peer", "4", "n1", priority=50))
    assert victims_on(env, pod("p", "2", priority=50), "n1") is None


def test_victims_above_the_preemptor_cannot_make_room() -> None:
    env = make_env(
        node("n1"),
        bound("low", "1", "n1", priority=1),
        bound("high", "3", "n1", priority=100),
    )
    assert victims_on(env, pod("p", "2", priority=50), "n1") is None


@pytest.mark.parametrize(
    ("started", "victims"),
    [
        # The 4-cpu pod is the most important (oldest): it is given back first and stays;
        # the two 2-cpu pods go.
        ({"a": 10, "b": 20, "c": 0}, ["a", "b"]),
        # The two 2-cpu pods are older: both are given back, then the 4-cpu pod no longer
        # fits beside the preemptor and is the only victim.
        ({"a": 0, "b": 10, "c": 20}, ["c"]),
        # a (oldest) back, c (4) would not fit beside it and the preemptor, b (2) does.
        ({"a": 0, "b": 20, "c": 10}, ["c"]),
    ],
    ids=["big-oldest", "small-oldest", "mixed"],
)
def test_minimal_victims_after_reprieve(started: dict[str, float], victims: list[str]) -> None:
    env = make_env(
        node("n1", cpu="8"),
        bound("a", "2", "n1", priority=0, at=started["a"]),
        bound("b", "2", "n1", priority=0, at=started["b"]),
        bound("c", "4", "n1", priority=0, at=started["c"]),
    )
    assert victims_on(env, pod("p", "4", priority=10), "n1") == victims


def test_higher_priority_pods_are_reprieved_first() -> None:
    env = make_env(
        node("n1"),
        bound("p1", "2", "n1", priority=1, at=0),
        bound("p5", "2", "n1", priority=5, at=100),
    )
    assert victims_on(env, pod("p", "2", priority=10), "n1") == ["p1"]


def test_equal_priority_reprieve_follows_start_time_not_creation() -> None:
    # MoreImportantPod compares status.startTime: "late" was created first but started
    # last, so "early" is the more important and is given back.
    env = make_env(
        node("n1"),
        bound("late", "2", "n1", priority=1, at=0, started=500),
        bound("early", "2", "n1", priority=1, at=100, started=200),
    )
    assert victims_on(env, pod("p", "2", priority=10), "n1") == ["late"]


def test_terminating_lower_priority_pods_are_victims_too() -> None:
    # kube-scheduler's potential victims are all lower-priority pods on the node; one that
    # is already terminating is kept in the victims (prepareCandidate skips its API call).
    env = make_env(node("n1"), bound("leaving", "4", "n1", priority=1, deleting=True))
    assert victims_on(env, pod("p", "2", priority=10), "n1") == ["leaving"]


def test_nominated_pods_keep_holding_capacity_in_dry_runs() -> None:
    env = make_env(
        node("n1"),
        bound("low", "2", "n1", priority=1),
        bound("other", "2", "n1", priority=1000),
        pod("waiting", "2", priority=100, nominated="n1"),
    )
    assert victims_on(env, pod("p", "2", priority=50), "n1") is None
    # A nominated pod below the preemptor does not hold anything.
    env.events.on_pod("MODIFIED", pod("waiting", "2", priority=10, nominated="n1"))
    assert victims_on(env, pod("p", "2", priority=50), "n1") == ["low"]


# -- PodDisruptionBudgets -----------------------------------------------------------------------


DB = {"matchLabels": {"app": "db"}}


def test_pdb_protected_pods_are_reprieved_before_the_others() -> None:
    env = make_env(
        node("n1"),
        bound("db", "2", "n1", priority=1, labels={"app": "db"}),
        bound("web", "2", "n1", priority=5),
        pdb("db", DB, allowed=0),
    )
    state, pod_info, _ = env.diagnose(pod("p", "2", priority=10))
    plugin = preemption(env)
    candidate = plugin.evaluator.select_victims(state, pod_info, env.view.nodes.index["n1"], plugin)
    assert candidate is not None
    assert [v.name for v in candidate.victims] == ["web"]
    assert candidate.pdb_violations == 0


def test_pdb_violations_are_counted_and_victims_sorted_by_importance() -> None:
    env = make_env(
        node("n1"),
        bound("db", "2", "n1", priority=1, labels={"app": "db"}),
        bound("web", "2", "n1", priority=5),
        pdb("db", DB, allowed=0),
    )
    state, pod_info, _ = env.diagnose(pod("p", "4", priority=10))
    plugin = preemption(env)
    candidate = plugin.evaluator.select_victims(state, pod_info, env.view.nodes.index["n1"], plugin)
    assert candidate is not None
    assert candidate.pdb_violations == 1
    # Sorted again after the reprieve when violating and non-violating victims mix.
    assert [v.name for v in candidate.victims] == ["web", "db"]


def test_pdb_budget_is_spent_pod_by_pod() -> None:
    env = make_env(
        node("n1"),
        bound("db-0", "2", "n1", priority=1, at=0, labels={"app": "db"}),
        bound("db-1", "2", "n1", priority=1, at=10, labels={"app": "db"}),
        pdb("db", DB, allowed=1),
    )
    state, pod_info, _ = env.diagnose(pod("p", "4", priority=10))
    plugin = preemption(env)
    candidate = plugin.evaluator.select_victims(state, pod_info, env.view.nodes.index["n1"], plugin)
    assert candidate is not None
    assert sorted(v.name for v in candidate.victims) == ["db-0", "db-1"]
    assert candidate.pdb_violations == 1


@pytest.mark.parametrize(
    ("budget", "labels"),
    [
        (pdb("db", DB, allowed=0, namespace="elsewhere"), {"app": "db"}),
        (pdb("db", {"matchLabels": {"app": "cache"}}, allowed=0), {"app": "db"}),
        (pdb("db", DB, allowed=5), {"app": "db"}),
        # A PDB with an empty selector matches nothing.
        (pdb("all", {}, allowed=0), {"app": "db"}),
        # A pod already listed in status.disruptedPods was counted by the API server.
        (pdb("db", DB, allowed=0, disruptedPods={"db": "2024-01-01T00:00:00Z"}), {"app": "db"}),
        # A pod without labels matches no PDB, whatever its selector says.
        (pdb("db", {"matchExpressions": [expr("app", "DoesNotExist")]}, allowed=0), {}),
    ],
    ids=[
        "other-namespace",
        "other-labels",
        "budget-left",
        "empty-selector",
        "already-disrupted",
        "pod-without-labels",
    ],
)
def test_budgets_that_are_not_violated(budget: Json, labels: dict[str, str]) -> None:
    env = make_env(node("n1"), bound("db", "4", "n1", priority=1, labels=labels), budget)
    state, pod_info, _ = env.diagnose(pod("p", "2", priority=10))
    plugin = preemption(env)
    candidate = plugin.evaluator.select_victims(state, pod_info, env.view.nodes.index["n1"], plugin)
    assert candidate is not None
    assert candidate.pdb_violations == 0


# -- choosing the node ----------------------------------------------------------------------


def victim(priority: int, started: float, created: float | None = None) -> Json:
    at = started if created is None else created
    return pod(
        f"v{priority}-{started}", "1", node_name="x", priority=priority, created=at, started=started
    )


def candidate(name: str, *victims: Json, violations: int = 0) -> Candidate:
    pods = tuple(info(v) for v in victims)
    return Candidate(name, 0, pods, violations)


@pytest.mark.parametrize(
    ("better", "worse"),
    [
        (
            candidate("better", victim(100, 0)),
            candidate("worse", victim(1, 0), violations=1),
        ),
        (
            candidate("better", victim(5, 0), victim(5, 1), victim(5, 2)),
            candidate("worse", victim(6, 0)),
        ),
        (
            candidate("better", victim(5, 0), victim(1, 0)),
            candidate("worse", victim(5, 0), victim(3, 0)),
        ),
        (
            candidate("better", victim(1, 0), victim(1, 1)),
            candidate("worse", victim(1, 0), victim(1, 1), victim(1, 2)),
        ),
        (
            candidate("better", victim(-5, 0)),
            candidate("worse", victim(-5, 0), victim(-5, 1)),
        ),
        (
            candidate("better", victim(5, 100)),
            candidate("worse", victim(5, 10)),
        ),
        (
            # Only the highest-priority victims' start times matter.
            candidate("better", victim(5, 100), victim(1, 0)),
            candidate("worse", victim(5, 50), victim(1, 200)),
        ),
    ],
    ids=[
        "fewest-pdb-violations",
        "lowest-top-priority",
        "smallest-priority-sum",
        "fewest-victims",
        "negative-priorities",
        "latest-start",
        "latest-start-of-top-victims",
    ],
)
def test_candidate_ranking(better: Candidate, worse: Candidate) -> None:
    assert min([better, worse], key=Candidate.rank) is better
    assert min([worse, better], key=Candidate.rank) is better


def test_latest_start_is_the_start_time_not_the_creation_time() -> None:
    # GetEarliestPodStartTime reads status.startTime.
    better = candidate("better", victim(5, started=500, created=0))
    worse = candidate("worse", victim(5, started=200, created=100))
    assert min([worse, better], key=Candidate.rank) is better


def test_candidates_rank_by_the_victims_start_time_the_watch_shows_now() -> None:
    # "early" was counted on n1 when bound, before the kubelet started it (no startTime:
    # as if started now, the latest); its startTime came with a later update.
    not_started = bound("early", "4", "n1", priority=1)
    del not_started["status"]["startTime"]
    env = make_env(
        node("n1"), node("n2"), not_started, bound("late", "4", "n2", priority=1, started=200)
    )
    env.events.on_pod("MODIFIED", bound("early", "4", "n1", priority=1, started=100))
    # All else equal, the node whose top victim started latest.
    assert chosen(env, pod("p", "2", priority=100)) == "n2"


def test_the_cheapest_node_is_chosen() -> None:
    env = make_env(
        node("costly"),
        node("cheap"),
        node("protected"),
        bound("important", "4", "costly", priority=50),
        bound("batch-1", "2", "cheap", priority=1),
        bound("batch-2", "2", "cheap", priority=1),
        bound("db", "4", "protected", priority=0, labels={"app": "db"}),
        pdb("db", DB, allowed=0),
    )
    assert chosen(env, pod("p", "2", priority=100)) == "cheap"


def test_the_top_victim_is_the_highest_priority_one_even_with_pdbs() -> None:
    # On "x" the PDB-protected victim has priority 1 and the other 5: x's highest victim is
    # 5. On "y" both victims have priority 3. Same violations: y wins on 3 < 5.
    env = make_env(
        node("x"),
        node("y"),
        bound("x-db", "2", "x", priority=1, labels={"app": "db"}),
        bound("x-web", "2", "x", priority=5),
        bound("y-db", "2", "y", priority=3, labels={"app": "db"}),
        bound("y-web", "2", "y", priority=3),
        pdb("db", DB, allowed=0),
    )
    found = {c.node: c for c in candidates(env, pod("p", "4", priority=10))}
    assert found["x"].pdb_violations == found["y"].pdb_violations == 1
    assert chosen(env, pod("p", "4", priority=10)) == "y"


# -- why preemption did not help ------------------------------------------------------------


async def test_not_helpful_no_victims_and_larger_than_allocatable() -> None:
    env = make_env(
        node("tainted", taints=[taint("dedicated", "infra")]),
        node("peers"),
        node("tiny", cpu="1"),
        bound("peer", "4", "peers", priority=100),
        bound("low", "1", "tiny", priority=1),
    )
    result = await post_filter(env, pod("p", "2", priority=100))
    assert result.nominated_node == ""
    assert not result.status.ok
    # "tiny" has 1 cpu allocatable for a 2-cpu pod: no eviction can help, kube-scheduler
    # does not even try it (its Filter says UnschedulableAndUnresolvable).
    assert result.message == (
        "preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )


async def test_no_lower_priority_pods_anywhere() -> None:
    env = make_env(
        node("n1"),
        node("n2"),
        bound("a", "4", "n1", priority=100),
        bound("b", "4", "n2", priority=200),
    )
    result = await post_filter(env, pod("p", "2", priority=100))
    assert result.message == (
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    # No candidate: the result empties the pod's nomination (kube-scheduler's ModeOverride).
    assert result.override
    assert result.nominated_node == ""


async def test_only_unresolvable_nodes() -> None:
    env = make_env(
        node("cordoned", unschedulable=True),
        node("elsewhere", labels={"zone": "b"}),
        bound("low", "1", "elsewhere", priority=1),
    )
    preemptor = pod("p", "1", priority=100, node_selector={"zone": "a"})
    result = await post_filter(env, preemptor)
    assert result.message == (
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    _, _, diagnosis = env.diagnose(preemptor)
    assert fit_message(diagnosis, result.message) == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) were unschedulable. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def test_unresolvable_nodes_are_never_candidates() -> None:
    env = make_env(
        node("tainted", taints=[taint("k", "v")]),
        node("open"),
        bound("low-1", "4", "tainted", priority=1),
        bound("low-2", "4", "open", priority=1),
    )
    assert [c.node for c in candidates(env, pod("p", "2", priority=10))] == ["open"]


async def test_preemption_policy_never() -> None:
    env = make_env(node("n1"), bound("low", "4", "n1", priority=1))
    preemptor = pod("p", "2", priority=100, preemption_policy="Never")
    result = await post_filter(env, preemptor)
    assert result.nominated_node == ""
    assert not result.status.ok
    assert result.message == "preemption: not eligible due to preemptionPolicy=Never."
    _, _, diagnosis = env.diagnose(preemptor)
    assert fit_message(diagnosis, result.message) == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )


async def test_not_eligible_while_its_victims_terminate() -> None:
    env = make_env(
        node("n1"),
        bound("victim", "4", "n1", priority=1, deleting=True, conditions=(PREEMPTED,)),
    )
    result = await post_filter(env, pod("p", "2", priority=100, nominated="n1"))
    assert result.message == (
        "preemption: not eligible due to a terminating pod on the nominated node."
    )
    assert not result.override  # ModeNoop: it keeps its nomination while they leave


async def test_not_eligible_once_a_victim_bound_earlier_starts_terminating() -> None:
    # The victim was counted on its node when bound; the preemption that marks and
    # deletes it arrives as an update, which the node's pods follow (kube-scheduler's
    # NodeInfo holds the latest pod object).
    env = make_env(node("n1"), bound("victim", "4", "n1", priority=1))
    preemptor = pod("p", "2", priority=100, nominated="n1")
    plugin = preemption(env)
    _, pod_info, diagnosis = env.diagnose(preemptor)
    assert plugin.evaluator.not_eligible(pod_info, diagnosis, plugin) == ""
    env.events.on_pod(
        "MODIFIED", bound("victim", "4", "n1", priority=1, deleting=True, conditions=(PREEMPTED,))
    )
    result = await post_filter(env, preemptor)
    assert result.message == (
        "preemption: not eligible due to a terminating pod on the nominated node."
    )


async def test_a_pod_terminating_for_another_reason_does_not_block_preemption() -> None:
    # podTerminatingByPreemption: only a DisruptionTarget condition with reason
    # PreemptionByScheduler marks a pod as terminating because of preemption.
    env = make_env(
        node("n1"),
        bound("leaving", "1", "n1", priority=1, deleting=True),
        bound("important", "3", "n1", priority=1000),
    )
    result = await post_filter(env, pod("p", "2", priority=100, nominated="n1"))
    assert "not eligible" not in result.message
    assert result.message.startswith("preemption: 0/1 nodes are available: ")


async def test_unresolvable_nominated_node_allows_preempting_again() -> None:
    # The nominated node became unschedulable-and-unresolvable: kube-scheduler lets the pod
    # preempt elsewhere even if victims still terminate there.
    env = make_env(
        node("n1", taints=[taint("maintenance", "now")]),
        bound("victim", "4", "n1", priority=1, deleting=True, conditions=(PREEMPTED,)),
    )
    result = await post_filter(env, pod("p", "2", priority=100, nominated="n1"))
    assert result.message == (
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


# -- dry runs that name their victims ----------------------------------------------------------


def _victims_both_ways(env: Env, preemptor: Json, node_name: str) -> tuple[object, object]:
    """select_victims' answer with the victims named gone, then with them taken off the
    table and put back; the first must leave the table as it was."""
    plugin = preemption(env)
    row = env.view.nodes.index[node_name]
    state, pod_info, _ = env.diagnose(preemptor)
    assert env.handle.runner.judges_without(state)
    before = env.view.nodes.row_versions[row]
    named = plugin.evaluator.select_victims(state, pod_info, row, plugin)
    assert env.view.nodes.row_versions[row] == before  # nothing was taken off
    state, pod_info, _ = env.diagnose(preemptor)
    state.judges_without = False
    taken_off = plugin.evaluator.select_victims(state, pod_info, row, plugin)
    assert env.view.nodes.row_versions[row] != before  # the other way did take them off
    return named, taken_off


@pytest.mark.parametrize(
    ("preemptor", "node_name"),
    [
        (pod("p", "4", priority=10), "n1"),  # reprieve: the oldest pods stay
        (pod("p", "6", priority=10), "n1"),
        (pod("p", "9", priority=10), "n1"),  # more than the node has: the filter's reason
        (pod("p", "2", priority=10), "n2"),  # a nominated pod holds the room
        (pod("p", "2", priority=2000), "n2"),
        (pod("p", "1", priority=10), "n3"),  # the pods' limit, not cpu
        (pod("p", "4", priority=10), "n4"),  # a PDB's pods reprieved first
    ],
    ids=["reprieve", "most", "too-big", "nominated", "above-nominated", "pods-limit", "pdb"],
)
def test_naming_victims_chooses_as_taking_them_off(preemptor: Json, node_name: str) -> None:
    env = make_env(
        node("n1", cpu="8"),
        bound("a", "2", "n1", priority=0, at=0),
        bound("b", "2", "n1", priority=1, at=10),
        bound("c", "4", "n1", priority=0, at=20),
        node("n2"),
        bound("low", "2", "n2", priority=1),
        bound("other", "2", "n2", priority=1000),
        pod("waiting", "2", priority=100, nominated="n2"),
        node("n3", pods="2"),
        bound("x", "100m", "n3", priority=0, at=0),
        bound("y", "100m", "n3", priority=0, at=5),
        node("n4"),
        bound("db", "2", "n4", priority=1, labels={"app": "db"}),
        bound("web", "2", "n4", priority=5),
        pdb("db", DB, allowed=0),
    )
    named, taken_off = _victims_both_ways(env, preemptor, node_name)
    assert named == taken_off


def test_a_pod_with_host_ports_or_spread_takes_victims_off() -> None:
    """Filters that count pods their own way (ports, spreading) still see them gone."""
    env = make_env(node("n1"), bound("low", "4", "n1", priority=0))
    port = {"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}
    state, _, _ = env.diagnose(pod("p", "2", priority=10, ports=[port]))
    assert not env.handle.runner.judges_without(state)
    assert victims_on(env, pod("p", "2", priority=10, ports=[port]), "n1") == ["low"]
    state, _, _ = env.diagnose(pod("p", "2", priority=10))
    assert env.handle.runner.judges_without(state)
