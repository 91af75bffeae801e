"""Gang preemption without a cluster: the choices as plain functions."""

from __future__ import annotations

from berth.gang.preemption import (
    Option,
    Victim,
    choose,
    evicted_for,
    not_enough,
    preempting,
    rank,
    whole_gangs,
)

# -- the decisions ------------------------------------------------------------------------


def victim(name: str, priority: int = 0, node_name: str = "n1", gang: str | None = None) -> Victim:
    return Victim(f"uid-{name}", f"default/{name}", node_name, priority, 0.0, gang)


def test_rank_is_kube_schedulers_order() -> None:
    low, mid = (0, 0.0), (5, 0.0)
    assert rank([low, low], 0) < rank([mid], 0)  # a lower highest priority first
    assert rank([low], 0) < rank([low, low], 0)  # then a lower sum
    assert rank([mid], 0) < rank([low], 1)  # budgets violated before all else
    assert rank([(-10, 0.0)], 0) < rank([low], 0)  # negative priorities order right


def test_a_victims_gang_is_taken_whole_or_not_at_all() -> None:
    a, b = victim("a", gang="default/lo"), victim("b", node_name="n2", gang="default/lo")
    plain = victim("p")
    running = {"default/lo": [a, b]}
    whole = whole_gangs([a, plain], running, lambda v: True)
    assert {v.key for v in whole} == {"default/a", "default/b", "default/p"}
    refused = whole_gangs([a], running, lambda v: v.uid != b.uid)
    assert refused == "gang default/lo would be broken: its member default/b may not be evicted"
    assert whole_gangs([plain], running, lambda v: False) == (plain,)


def test_the_option_chosen_ranks_lowest_with_the_victims_already_chosen() -> None:
    chosen = [victim("c", priority=5)]
    one_high = Option("n1", (victim("x", priority=5),))
    two_low = Option("n2", (victim("y"), victim("z")))
    # Alone the two low ones rank better (a lower highest priority); with a priority-5
    # victim chosen already the highest priority is 5 either way, and the sum (each pod
    # offset, so it counts pods first) is lower with one victim more than with two.
    assert choose([one_high, two_low], [], lambda v: 0) is two_low
    assert choose([one_high, two_low], chosen, lambda v: 0) is one_high
    # A victim chosen already costs nothing again.
    again = Option("n3", (chosen[0],))
    assert choose([two_low, again], chosen, lambda v: 0) is again
    assert choose([], chosen, lambda v: 0) is None


def test_the_messages_name_the_gang_and_the_victims() -> None:
    victims = [victim("a"), victim("b", node_name="n2", gang="default/lo")]
    said = preempting("PodGroup default/hi", victims, {"default/m0": "n1"})
    assert said == (
        "preemption: PodGroup default/hi preempts 2 lower-priority pods (default/a on n1, "
        "default/b on n2); nominated: default/m0 to n1"
    )
    assert not_enough("PodGroup default/hi", 2, 3, "default/m2: no room") == (
        "preemption: PodGroup default/hi does not preempt: with every pod it may evict gone, "
        "2 of the 3 members it needs fit; default/m2: no room; nothing is evicted"
    )
    assert evicted_for("PodGroup default/hi", "default/m0", "n1", victims[0]) == (
        "Preempted by PodGroup default/hi (pod default/m0) on node n1"
    )
    assert evicted_for("PodGroup default/hi", "default/m0", "n1", victims[1]) == (
        "Preempted by PodGroup default/hi (pod default/m0): its gang default/lo is evicted whole"
    )
