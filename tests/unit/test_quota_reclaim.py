"""Fair order between tree quotas, who tree reclaim may evict and in which order, and the
periodic over-runtime check: pure functions over a parsed tree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.quota.fairshare import INFINITE, dominant_share, quota_share
from berth.quota.reclaim import (
    ReclaimPod,
    eviction_order,
    nearness,
    protected,
    reclaimable,
    starving,
)
from berth.quota.tree import (
    ANNOTATION_MIN_RUNTIME,
    ANNOTATION_WEIGHT,
    LABEL_IS_PARENT,
    LABEL_PARENT,
    QuotaTree,
    TreeError,
    build_tree,
    is_tree_quota,
    parse_quota,
)
from berth.quota.treeadmission import TreePod, TreeState, check_tree, tree_state, without

NOW = 10_000.0
CPU = {"cpu": 1000}


def quota(
    name: str,
    minimum: int,
    maximum: int,
    parent: str | None = None,
    *,
    is_parent: bool = False,
    **annotations: str,
) -> dict[str, Any]:
    labels = {LABEL_IS_PARENT: "true" if is_parent else "false"}
    if parent is not None:
        labels[LABEL_PARENT] = parent
    return {
        "metadata": {"name": name, "namespace": name, "labels": labels,
                     "annotations": annotations},
        "spec": {"min": {"cpu": str(minimum)}, "max": {"cpu": str(maximum)}},
    }  # fmt: skip


def two_level() -> QuotaTree:
    """dept-a (teams a1, a2) and dept-b (team b1), each team min 2 max 8."""
    return build_tree(
        [
            quota("dept-a", 4, 8, is_parent=True),
            quota("a1", 2, 8, "dept-a"),
            quota("a2", 2, 8, "dept-a", **{ANNOTATION_MIN_RUNTIME: "60s"}),
            quota("dept-b", 4, 8, is_parent=True),
            quota("b1", 2, 8, "dept-b"),
        ]
    )


def pod(key: str, quota: str, **fields: Any) -> ReclaimPod:
    return ReclaimPod(key, quota, dict(CPU), **{"started": NOW - 3600, **fields})


def state_of(tree: QuotaTree, pods: list[ReclaimPod], cpus: int) -> TreeState:
    tree_pods = [TreePod(p.quota, p.request, p.bound, p.preemptible) for p in pods]
    return tree_state(tree, tree_pods, {"cpu": cpus * 1000})


# -- annotations ---------------------------------------------------------------------------


def test_weight_and_min_runtime_are_read_and_join_the_tree() -> None:
    obj = {"metadata": {"name": "t", "annotations": {ANNOTATION_WEIGHT: "2.5",
                                                      ANNOTATION_MIN_RUNTIME: "1m30s"}},
           "spec": {"max": {"cpu": "4"}}}  # fmt: skip
    assert is_tree_quota(obj)
    parsed = parse_quota(obj)
    assert (parsed.fair_weight, parsed.min_runtime) == (2.5, 90.0)
    plain = parse_quota(quota("u", 1, 2))
    assert (plain.fair_weight, plain.min_runtime) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (ANNOTATION_WEIGHT, "-1", "non-negative number"),
        (ANNOTATION_WEIGHT, "heavy", "non-negative number"),
        (ANNOTATION_WEIGHT, "nan", "non-negative number"),
        (ANNOTATION_MIN_RUNTIME, "5 minutes", "malformed"),
        (ANNOTATION_MIN_RUNTIME, "-5s", "malformed"),
    ],
)
def test_malformed_values_are_refused_by_name(key: str, value: str, says: str) -> None:
    with pytest.raises(TreeError, match=f"{key}.*{says}|{says}.*") as error:
        parse_quota(quota("t", 1, 2, **{key: value}))
    assert key in str(error.value)
    tree = build_tree([quota("t", 1, 2, **{key: value})])
    assert "t" not in tree.quotas
    assert key in tree.refused[("t", "t")]


# -- fair order ----------------------------------------------------------------------------


def test_dominant_share_is_the_largest_fraction_divided_by_weight() -> None:
    runtime = {"cpu": 4000, "memory": 100}
    assert dominant_share({}, runtime, runtime, 1.0) == 0.0
    assert dominant_share({"cpu": 1000, "memory": 50}, runtime, runtime, 1.0) == 0.5
    assert dominant_share({"cpu": 3000, "memory": 50}, runtime, runtime, 1.0) == 0.75
    assert dominant_share({"cpu": 3000, "memory": 50}, runtime, runtime, 3.0) == 0.25
    # A resource the quota does not name does not count.
    assert dominant_share({"gpu": 9}, runtime, runtime, 1.0) == 0.0
    # Using something with no runtime for it, or with weight 0: last.
    assert dominant_share({"cpu": 1}, {"cpu": 0}, ["cpu"], 1.0) == INFINITE
    assert dominant_share({"cpu": 1}, runtime, runtime, 0.0) == INFINITE
    assert dominant_share({}, runtime, runtime, 0.0) == 0.0


def test_the_heavier_quota_goes_first_at_equal_use() -> None:
    tree = build_tree(
        [
            quota("dept", 8, 8, is_parent=True),
            quota("light", 4, 8, "dept"),
            quota("heavy", 4, 8, "dept", **{ANNOTATION_WEIGHT: "2"}),
        ]
    )
    pods = [pod(f"{q}-{i}", q) for q in ("light", "heavy") for i in range(2)]
    pods += [pod(f"{q}-pending", q, bound=False) for q in ("light", "heavy")]
    state = state_of(tree, pods, 8)
    assert state.runtime["light"] == state.runtime["heavy"] == {"cpu": 3000}
    assert quota_share(tree, state, "light") == pytest.approx(2 / 3)
    assert quota_share(tree, state, "heavy") == pytest.approx(1 / 3)
    assert quota_share(tree, state, "no-such-quota") == 0.0


# -- victims -------------------------------------------------------------------------------


def test_non_preemptible_and_young_pods_are_protected() -> None:
    tree = two_level()
    assert protected(tree, pod("p", "a1"), NOW) is None
    assert protected(tree, pod("p", "a1", preemptible=False), NOW) == "non-preemptible"
    young = protected(tree, pod("p", "a2", started=NOW - 30), NOW)
    assert young is not None
    assert "min-runtime of 60s" in young
    assert protected(tree, pod("p", "a2", started=NOW - 61), NOW) is None
    assert protected(tree, pod("p", "a2", started=None), NOW) is not None  # not started yet
    assert protected(tree, pod("p", "nowhere"), NOW) == "not in the tree"


def test_nearness_is_the_depth_of_the_lowest_common_ancestor() -> None:
    tree = two_level()
    assert nearness(tree, "a1", "a2") == 1  # siblings under dept-a
    assert nearness(tree, "a1", "b1") == 0  # only the root in common
    assert nearness(tree, "a1", "a1") == 2


def test_eviction_order_nearest_then_terminating_then_priority_then_youngest() -> None:
    tree = two_level()
    pods = [
        pod("cousin-low", "b1", priority=-10),
        pod("sibling-high-old", "a2", priority=10, started=NOW - 500),
        pod("sibling-high-young", "a2", priority=10, started=NOW - 100),
        pod("sibling-low", "a2", priority=0),
        pod("sibling-terminating-high", "a2", priority=100, terminating=True),
    ]
    order = [p.key for p in eviction_order(tree, "a1", pods, NOW)]
    assert order == [
        "sibling-terminating-high",
        "sibling-low",
        "sibling-high-young",
        "sibling-high-old",
        "cousin-low",
    ]


def test_reclaimable_takes_only_pods_of_quotas_over_runtime() -> None:
    """a1 wants 2 (its min) while a2 and b1 hold 6 and 2: a2 is over its runtime, b1 is not;
    a2's non-preemptible pod and its pod within min-runtime stay."""
    tree = two_level()
    a2 = [pod(f"a2-{i}", "a2") for i in range(4)]
    a2 += [pod("a2-np", "a2", preemptible=False), pod("a2-young", "a2", started=NOW - 5)]
    b1 = [pod(f"b1-{i}", "b1") for i in range(2)]
    waiting = [pod(f"a1-{i}", "a1", bound=False) for i in range(2)]
    pods = a2 + b1 + waiting
    state = state_of(tree, pods, 8)
    assert state.runtime["a2"]["cpu"] < state.used["a2"]["cpu"]
    assert state.used["b1"]["cpu"] <= state.runtime["b1"]["cpu"]
    chosen = reclaimable(tree, state, "a1", dict(CPU), pods, NOW)
    assert {p.key for p in chosen} == {f"a2-{i}" for i in range(4)}


# -- the periodic check --------------------------------------------------------------------


def test_starving_finds_a_pending_pod_that_may_reclaim() -> None:
    tree = two_level()
    a2 = [pod(f"a2-{i}", "a2") for i in range(6)]
    waiting = pod("a1-0", "a1", bound=False)
    found = starving(tree, state_of(tree, [*a2, waiting], 6), [*a2, waiting], NOW)
    assert [(s.pod.key, s.over) for s in found] == [("a1-0", "a2")]


def test_starving_waits_while_every_victim_is_protected() -> None:
    """The victims are within min-runtime: no retry now, one once it has passed."""
    tree = two_level()
    a2 = [pod(f"a2-{i}", "a2", started=NOW - 10) for i in range(6)]
    waiting = pod("a1-0", "a1", bound=False)
    pods = [*a2, waiting]
    state = state_of(tree, pods, 6)
    assert starving(tree, state, pods, NOW) == []
    assert [s.pod.key for s in starving(tree, state, pods, NOW + 60)] == ["a1-0"]


def test_starving_finds_nothing_when_no_quota_is_over_runtime() -> None:
    tree = two_level()
    pods = [pod("a2-0", "a2"), pod("a1-0", "a1", bound=False)]
    assert starving(tree, state_of(tree, pods, 8), pods, NOW) == []


# -- no preemption cycle -------------------------------------------------------------------


def preempt(
    tree: QuotaTree, pods: list[ReclaimPod], cpus: int, preemptor: ReclaimPod
) -> list[ReclaimPod] | None:
    """Tree reclaim as PostFilter does it, on one node of ``cpus``: victims in eviction order
    until the preemptor fits the node and its quota chain, None when it never does."""
    state = state_of(tree, pods, cpus)
    free = cpus * 1000 - sum(p.request["cpu"] for p in pods if p.bound)
    candidates = reclaimable(tree, state, preemptor.quota, preemptor.request, pods, NOW)
    victims: list[ReclaimPod] = []
    for victim in [None, *candidates]:
        if victim is not None:
            victims.append(victim)
        freed = [TreePod(v.quota, v.request, True, v.preemptible) for v in victims]
        fits_node = free + sum(v.request["cpu"] for v in victims) >= preemptor.request["cpu"]
        if fits_node and check_tree(tree, without(tree, state, freed), preemptor.quota,
                                    preemptor.request, preemptor.preemptible) is None:  # fmt: skip
            return victims
    return None


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 30),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8), st.integers(0, 8),
                       st.integers(0, 3), st.booleans()),
             min_size=2, max_size=5),
    st.data(),
)  # fmt: skip
def test_no_preemption_cycle(
    cpus: int, teams: list[tuple[int, int, int, int, bool]], data: st.DataObject
) -> None:
    """Any two-level tree, any use: after a pod of X reclaims from Y (its victims coming
    back pending, or gone for good), no pod of Y or of any quota may take X's pods back."""
    departments = data.draw(st.integers(1, 2))
    objects = []
    for d in range(departments):
        members = [t for i, t in enumerate(teams) if i % departments == d]
        minimum = sum(m for m, *_ in members)
        objects.append(quota(f"d{d}", minimum, minimum + data.draw(st.integers(0, 10)),
                             is_parent=True))  # fmt: skip
    pods: list[ReclaimPod] = []
    for i, (minimum, extra, bound, waiting, young) in enumerate(teams):
        name = f"t{i}"
        objects.append(quota(name, minimum, minimum + extra, f"d{i % departments}"))
        started = NOW - 5 if young else NOW - 3600
        pods += [pod(f"{name}-b{j}", name, started=started) for j in range(bound)]
        pods += [pod(f"{name}-w{j}", name, bound=False) for j in range(waiting)]
    tree = build_tree(objects)
    assert len(tree.quotas) == len(objects)
    gone_for_good = data.draw(st.booleans())
    for preemptor in [p for p in pods if not p.bound]:
        victims = preempt(tree, pods, cpus, preemptor)
        if not victims:
            continue  # it fits without evicting anyone, or cannot reclaim
        after = [p for p in pods if p not in victims and p is not preemptor]
        after.append(ReclaimPod(preemptor.key, preemptor.quota, preemptor.request,
                                started=NOW, bound=True))  # fmt: skip
        if not gone_for_good:
            after += [ReclaimPod(f"{v.key}-again", v.quota, v.request, bound=False)
                      for v in victims]  # fmt: skip
        state = state_of(tree, after, cpus)
        for other in [p for p in after if not p.bound]:
            taken = reclaimable(tree, state, other.quota, other.request, after, NOW)
            assert not any(t.quota == preemptor.quota for t in taken), (
                f"{preemptor.key} reclaimed {[v.key for v in victims]}, then "
                f"{other.key} could take back {[t.key for t in taken]}"
            )
        break  # one reclaim per example keeps the search wide and quick


def test_a_reclaim_that_would_flip_the_roles_is_found() -> None:
    """The property above is not vacuous: a quota at its runtime that takes one pod more
    (which check_tree forbids) would be reclaimable from at once."""
    tree = build_tree([quota("x", 2, 4), quota("y", 1, 4)])
    pods = [pod("x-0", "x"), pod("y-0", "y"), pod("y-1", "y"), pod("x-w", "x", bound=False)]
    victims = preempt(tree, pods, 3, pods[-1])
    assert victims is not None
    assert [v.quota for v in victims] == ["y"]
    overfull = [pod("x-0", "x"), pod("x-1", "x"), pod("x-2", "x"), pod("y-w", "y", bound=False)]
    state = state_of(tree, overfull, 3)
    assert {t.quota for t in reclaimable(tree, state, "y", dict(CPU), overfull, NOW)} == {"x"}
