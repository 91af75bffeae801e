"""Runtime quota: Koordinator's worked examples number for number, and the invariants of
the water-filling as properties over random siblings and trees."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from berth.quota.runtime import Share, largest_remainder, runtime_quotas, scaled_mins, split
from berth.quota.tree import LABEL_IS_PARENT, LABEL_PARENT, build_tree
from berth.quota.treeadmission import TreePod, may_reclaim, tree_state


def test_koordinator_iteration_example() -> None:
    """Four siblings over 100 cpu (weight, request, min): the first lends what it does not
    request, the second is capped at its request, the rest share what is handed back."""
    shares = [
        Share("node1", min=10, demand=5, weight=40),
        Share("node2", min=15, demand=20, weight=60),
        Share("node3", min=20, demand=40, weight=50),
        Share("node4", min=15, demand=70, weight=80),
    ]
    assert split(100, shares) == {"node1": 5, "node2": 20, "node3": 35, "node4": 40}


def test_koordinator_runtime_follows_requests() -> None:
    """Total 100, both weight 1: test1 (min 60) idle lends all to test2 (min 50, wants 90);
    test1 asking 30 gets 30 and test2 the other 70."""
    test2 = Share("test2", min=50, demand=90, weight=1)
    assert split(100, [Share("test1", 60, 0, 1), test2]) == {"test1": 0, "test2": 90}
    assert split(100, [Share("test1", 60, 30, 1), test2]) == {"test1": 30, "test2": 70}


def test_mins_over_the_total_are_scaled_not_overcommitted() -> None:
    """Koordinator's third step gives test1 60 and test2 50 out of 100 (mins 60 + 50 do not
    fit, and it scales mins only where asked to); Berth always scales them to what is handed
    down: 54 and 45, and the unit left over goes to the first name."""
    test2 = Share("test2", min=50, demand=90, weight=1)
    assert split(100, [Share("test1", 60, 60, 1), test2]) == {"test1": 55, "test2": 45}


def test_koordinator_two_hungry_quotas_share_equally() -> None:
    """Total 120, mins 50 and 50, demands capped at max (80, 100): 60 each."""
    assert split(120, [Share("test1", 50, 80, 1), Share("test2", 50, 100, 1)]) == {
        "test1": 60,
        "test2": 60,
    }


def test_a_quota_that_does_not_lend_keeps_its_min() -> None:
    shares = [Share("a", 40, 0, 1, allow_lent=False), Share("b", 10, 100, 1)]
    assert split(100, shares) == {"a": 40, "b": 60}


def test_a_lending_limit_keeps_the_rest_of_min() -> None:
    """team-b (min 4) idle lends at most 1: team-a may have 100 - 3, not all 100."""
    shares = [Share("a", 10, 100, 1), Share("b", 4, 0, 1, lending_limit=1)]
    assert split(100, shares) == {"a": 97, "b": 3}


def test_a_borrowing_limit_caps_demand_at_min_plus_limit() -> None:
    tree = build_tree(
        [
            {
                "metadata": {
                    "name": "a",
                    "namespace": "a",
                    "annotations": {"berth.io/borrowing-limit": '{"cpu": "2"}'},
                },
                "spec": {"min": {"cpu": "3"}, "max": {"cpu": "10"}},
            }
        ]
    )
    assert runtime_quotas(tree, {"a": {"cpu": 9000}}, {"cpu": 20000}) == {"a": {"cpu": 5000}}


def test_mins_scale_down_when_the_cluster_shrinks() -> None:
    assert scaled_mins(60, {"a": 60, "b": 40}) == {"a": 36, "b": 24}
    assert split(60, [Share("a", 60, 100, 1), Share("b", 40, 100, 1)]) == {"a": 36, "b": 24}


def test_largest_remainder_adds_up_and_breaks_ties_by_name() -> None:
    assert largest_remainder(10, [("b", 1), ("a", 1), ("c", 1)]) == {"a": 4, "b": 3, "c": 3}
    assert largest_remainder(10, [("a", 0), ("b", 0)]) == {"a": 0, "b": 0}


sibling = st.builds(
    lambda m, d, w, lent, limit: Share("", m, d, w, lent, limit),
    st.integers(0, 1000),
    st.integers(0, 2000),
    st.integers(1, 100),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 1000)),
)


@st.composite
def siblings(draw: st.DrawFn) -> list[Share]:
    drawn = draw(st.lists(sibling, min_size=1, max_size=6))
    return [
        Share(f"q{i}", s.min, s.demand, s.weight, s.allow_lent, s.lending_limit)
        for i, s in enumerate(drawn)
    ]


@given(st.integers(0, 5000), siblings())
def test_split_hands_down_exactly_what_is_wanted(amount: int, shares: list[Share]) -> None:
    runtime = split(amount, shares)
    mins = scaled_mins(amount, {s.name: s.min for s in shares})
    wanted = sum(max(s.demand, s.kept(mins[s.name])) for s in shares)
    assert sum(runtime.values()) == min(amount, wanted)
    for share in shares:
        floor = mins[share.name]
        # Never more than asked (or than the min it keeps), min honoured when demanded.
        assert runtime[share.name] <= max(share.demand, share.kept(floor))
        assert runtime[share.name] >= max(min(share.demand, floor), share.kept(floor))


def quota(name: str, minimum: int, maximum: int, parent: str | None = None, **labels: str) -> Any:
    meta_labels = dict(labels)
    if parent is not None:
        meta_labels[LABEL_PARENT] = parent
    return {
        "metadata": {"name": name, "namespace": name, "labels": meta_labels},
        "spec": {"min": {"cpu": str(minimum)}, "max": {"cpu": str(maximum)}},
    }


@given(
    st.integers(0, 200),
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 60), st.integers(0, 80)), min_size=2,
             max_size=4),
    st.integers(0, 60),
)  # fmt: skip
def test_tree_runtime_invariants(
    cluster: int, teams: list[tuple[int, int, int]], department_max: int
) -> None:
    """A department (min = Σ team mins, its own max) over teams with random min, max and
    requests: children share exactly their parent's runtime when they want at least that,
    nobody exceeds max, and a team wanting its min gets it when the mins fit the cluster."""
    department_min = sum(m for m, _, _ in teams)
    objects = [
        quota("dept", department_min, max(department_max, department_min),
              **{LABEL_IS_PARENT: "true"}),
    ]  # fmt: skip
    requests: dict[str, dict[str, int]] = {}
    for i, (minimum, extra, request) in enumerate(teams):
        objects.append(quota(f"t{i}", minimum, minimum + extra, parent="dept"))
        requests[f"t{i}"] = {"cpu": request * 1000}
    tree = build_tree(objects)
    runtime = runtime_quotas(tree, requests, {"cpu": cluster * 1000})
    dept = runtime["dept"]["cpu"]
    assert dept <= tree.quotas["dept"].max["cpu"]
    demand = sum(min(requests[f"t{i}"]["cpu"], tree.quotas[f"t{i}"].max["cpu"]) for i in
                 range(len(teams)))  # fmt: skip
    assert dept == min(cluster * 1000, min(demand, tree.quotas["dept"].max["cpu"]))
    assert sum(runtime[f"t{i}"]["cpu"] for i in range(len(teams))) == min(dept, demand)
    for i in range(len(teams)):
        team = tree.quotas[f"t{i}"]
        assert runtime[team.name]["cpu"] <= team.max["cpu"]
        if department_min * 1000 <= cluster * 1000:
            assert runtime[team.name]["cpu"] >= min(requests[team.name]["cpu"], team.min["cpu"])


@given(
    st.integers(0, 40),
    st.lists(st.tuples(st.integers(0, 10), st.integers(0, 20), st.integers(0, 20)), min_size=2,
             max_size=5),
    st.data(),
)  # fmt: skip
def test_reclaim_never_goes_both_ways(
    cluster: int, teams: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    """Whatever the tree's use, if a pod of X may evict pods of Y then no pod of Y may evict
    pods of X: reclaim between quotas never cycles."""
    objects = [quota(f"t{i}", m, m + extra) for i, (m, extra, _) in enumerate(teams)]
    tree = build_tree([{**o, "metadata": {**o["metadata"], "labels": {LABEL_IS_PARENT: "false"}}}
                       for o in objects])  # fmt: skip
    pods = []
    for i, (_, _, request) in enumerate(teams):
        bound = data.draw(st.integers(0, request))
        pods += [TreePod(f"t{i}", {"cpu": 1000, "pods": 1}, j < bound) for j in range(request)]
    state = tree_state(tree, pods, {"cpu": cluster * 1000})
    ask = {"cpu": 1000, "pods": 1}
    for x in tree.quotas:
        for y in tree.quotas:
            if may_reclaim(tree, state, x, ask, y):
                assert not may_reclaim(tree, state, y, ask, x)
