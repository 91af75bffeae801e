"""Gang preemption without a cluster: the choices as plain functions, and through the
scheduling loop: a gang evicts only when its whole quorum then fits, victims' gangs go
whole, the room is held (nominations, and a Reservation per member with Story 1's switch)
before any eviction, and the gang is bound whole once its victims are gone."""

from __future__ import annotations

from typing import Any

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
from tests.unit.scheduler_fixtures import Json, node
from tests.unit.test_coscheduling import COSCHEDULING, bound, drain, gang_loop, pod_group, reasons
from tests.unit.test_schedule_one import Loop, berth_pod

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
    assert evicted_for("PodGroup default/hi", "default/m0", "u0", "n1", victims[0]) == (
        "Preempted by pod u0 on node n1: for PodGroup default/hi (pod default/m0)"
    )
    assert evicted_for("PodGroup default/hi", "default/m0", "u0", "n1", victims[1]) == (
        "Preempted by pod u0 on node n1: for PodGroup default/hi (pod default/m0); "
        "its gang default/lo is evicted whole"
    )


# -- through the loop -----------------------------------------------------------------------


def high(name: str, group: str = "hi", cpu: str = "2", priority: int = 100) -> Json:
    raw = berth_pod(name, cpu, priority=priority)
    raw["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return raw


def running(name: str, node_name: str, cpu: str = "2", priority: int = 0, **labels: str) -> Json:
    raw = berth_pod(name, cpu, priority=priority, node_name=node_name)
    if labels:
        raw["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": labels["group"]}
    return raw


def calls(loop: Loop, kind: str) -> list[Any]:
    return [c[1] for c in loop.writer.calls if c[0] == kind]


def nodes(count: int, cpu: str = "2") -> list[Json]:
    return [node(f"n{i}", cpu=cpu) for i in range(1, count + 1)]


async def test_a_gang_that_does_not_fit_evicts_lower_priority_pods_and_is_bound_whole() -> None:
    lows = [running(f"low-{i}", f"n{i}") for i in range(1, 4)]
    members = [high(f"hi-{i}") for i in range(3)]
    loop = gang_loop(*nodes(3), *lows, *members, groups=(pod_group("hi", 3),))
    await drain(loop)
    assert bound(loop) == {}
    assert sorted(calls(loop, "delete")) == ["low-1", "low-2", "low-3"]
    nominated = dict(calls(loop, "nominate"))
    assert sorted(nominated) == ["hi-0", "hi-1", "hi-2"]
    assert sorted(nominated.values()) == ["n1", "n2", "n3"]
    [why, *_] = reasons(loop, "hi-0")
    assert "PodGroup default/hi cannot be placed: 0 of the 3 members" in why
    assert "preemption: PodGroup default/hi preempts 3 lower-priority pods (" in why
    preempted = loop.writer.events("Preempted")
    assert len(preempted) == 3
    uids = {m["metadata"]["uid"]: m["metadata"]["name"] for m in members}
    for message in preempted:  # kube-scheduler's words: the preemptor's uid and node first
        words = message.split()
        assert words[:3] == ["Preempted", "by", "pod"], message
        assert words[3] in uids, message
        assert f": for PodGroup default/hi (pod default/{uids[words[3]]})" in message
    for raw in lows:
        loop.parts.events.on_pod("DELETED", raw)
    await drain(loop)
    assert bound(loop) == nominated  # whole, each where its victim made room


async def test_a_lower_priority_pods_nomination_to_a_members_node_is_dropped() -> None:
    waiting = berth_pod("waiting", "2", priority=50)
    waiting["spec"]["schedulerName"] = "another-scheduler"  # only its nomination counts here
    waiting["status"] = {"nominatedNodeName": "n1"}
    loop = gang_loop(
        *nodes(1), running("low", "n1"), waiting, high("hi-0"), groups=(pod_group("hi", 1),)
    )
    await drain(loop)
    assert calls(loop, "delete") == ["low"]
    assert ("waiting", "") in calls(loop, "nominate")
    assert "uid-default-waiting" not in loop.parts.view.nominated


async def test_a_gang_whose_quorum_would_not_fit_evicts_nothing_and_says_why() -> None:
    lows = [running("low-1", "n1"), running("low-2", "n2")]
    above = running("above", "n3", priority=200)  # of higher priority than the gang: stays
    members = [high(f"hi-{i}") for i in range(3)]
    loop = gang_loop(*nodes(3), *lows, above, *members, groups=(pod_group("hi", 3),))
    await drain(loop)
    assert calls(loop, "delete") == []
    assert calls(loop, "nominate") == []
    assert loop.parts.view.nominated == {}
    for name in ("hi-0", "hi-1", "hi-2"):
        [why, *_] = reasons(loop, name)
        assert (
            "preemption: PodGroup default/hi does not preempt: with every pod it may evict "
            "gone, 2 of the 3 members it needs fit" in why
        )
        assert why.endswith("nothing is evicted")
    assert loop.parts.view.nodes.requested[:3, 0].tolist() == [2000, 2000, 2000]


async def test_a_victim_gang_is_evicted_whole_not_in_part() -> None:
    lo = pod_group("lo", 2)
    objects = [
        running("lo-a", "n1", cpu="1", group="lo"),
        running("lo-b", "n2", cpu="1", group="lo"),
        running("p1", "n1", cpu="1"),
        running("p2", "n2", cpu="1"),
        running("p3", "n3"),
    ]
    members = [high(f"hi-{i}") for i in range(2)]
    loop = gang_loop(*nodes(3), *objects, *members, groups=(lo, pod_group("hi", 2)))
    await drain(loop)
    evicted = calls(loop, "delete")
    assert "p3" in evicted
    assert {"lo-a", "lo-b"} <= set(evicted)  # a member's room on n1 or n2 breaks gang lo
    assert len(evicted) == 4
    assert any("its gang default/lo is evicted whole" in m for m in loop.writer.events("Preempted"))


async def test_a_gang_is_no_victim_when_one_of_its_members_may_not_be() -> None:
    objects = [
        running("lo-a", "n1", cpu="1", group="lo"),
        running("lo-b", "n2", cpu="1", priority=200, group="lo"),  # above the preemptor
        running("p1", "n1", cpu="1"),
    ]
    loop = gang_loop(
        *nodes(2), *objects, high("hi-0"), groups=(pod_group("lo", 2), pod_group("hi", 1))
    )
    await drain(loop)
    assert calls(loop, "delete") == []
    [why, *_] = reasons(loop, "hi-0")
    assert "gang default/lo would be broken: its member default/lo-b may not be evicted" in why


async def test_a_gang_waits_for_its_victims_and_does_not_preempt_again_meanwhile() -> None:
    """Nor is it backed off while they leave: the last one gone, it is placed at once."""
    backoff = [{"name": "Coscheduling", "args": {"podGroupBackoffSeconds": 600}}]
    loop = Loop(profile={**COSCHEDULING, "pluginConfig": backoff})
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("hi", 3))
    lows = [running(f"low-{i}", f"n{i}") for i in range(1, 4)]
    for obj in nodes(3):
        loop.parts.events.on_node("ADDED", obj)
    for raw in (*lows, *(high(f"hi-{i}") for i in range(3))):
        loop.parts.events.on_pod("ADDED", raw)
    await drain(loop)
    assert len(calls(loop, "delete")) == 3
    loop.parts.events.on_pod("DELETED", lows[0])  # one gone, two still leaving
    await drain(loop)
    assert len(calls(loop, "delete")) == 3
    assert bound(loop) == {}
    *_, why = reasons(loop, "hi-0")
    assert "preemption: PodGroup default/hi waits for the pods it preempted to leave" in why
    for raw in lows[1:]:
        loop.parts.events.on_pod("DELETED", raw)
    await drain(loop)
    assert sorted(bound(loop)) == ["hi-0", "hi-1", "hi-2"]


async def test_a_pod_of_the_gangs_own_priority_is_no_victim() -> None:
    loop = gang_loop(
        *nodes(2),
        running("peer", "n1", priority=100),
        running("low", "n2", cpu="1"),
        running("low-2", "n2", cpu="1"),
        high("hi-0"),
        groups=(pod_group("hi", 1),),
    )
    await drain(loop)
    assert sorted(calls(loop, "delete")) == ["low", "low-2"]  # two on n2, not the one peer


async def test_with_story_1_each_member_gets_a_reservation_before_any_eviction() -> None:
    profile = {
        **COSCHEDULING,
        "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "Reservation"}]}},
        "pluginConfig": [{"name": "Reservation", "args": {"reservePreemptedCapacity": True}}],
    }
    loop = Loop(profile=profile)
    made = 0

    async def create_reservation(body: Json) -> Json:
        nonlocal made
        made += 1
        created = {**body, "metadata": {**body["metadata"], "uid": f"rsv-{made}"}}
        loop.writer.calls.append(("create_reservation", created))
        return created

    loop.writer.create_reservation = create_reservation  # type: ignore[method-assign]
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("hi", 2))
    for obj in [*nodes(2), running("low-1", "n1"), running("low-2", "n2")]:
        if obj["kind"] == "Node":
            loop.parts.events.on_node("ADDED", obj)
        else:
            loop.parts.events.on_pod("ADDED", obj)
    for raw in (high("hi-0"), high("hi-1")):
        loop.parts.events.on_pod("ADDED", raw)
    await drain(loop)
    order = [c[0] for c in loop.writer.calls]
    assert order.count("create_reservation") == 2
    last_reservation = max(i for i, c in enumerate(order) if c == "create_reservation")
    assert last_reservation < order.index("delete")
    owners = sorted(
        c["spec"]["owners"][0]["object"]["name"] for c in calls(loop, "create_reservation")
    )
    assert owners == ["hi-0", "hi-1"]


async def test_a_gang_nominated_where_pods_are_still_being_preempted_does_not_preempt() -> None:
    """As after a restart: nothing but the cluster says that the gang preempted already."""
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    leaving = berth_pod("leaving", "2", node_name="n1", deleting=True, conditions=(preempted,))
    members = [high(f"hi-{i}") for i in range(2)]
    members[0]["status"] = {"nominatedNodeName": "n1"}
    loop = gang_loop(
        *nodes(2), leaving, running("low", "n2"), *members, groups=(pod_group("hi", 2),)
    )
    await drain(loop)
    assert calls(loop, "delete") == []
    [why, *_] = reasons(loop, "hi-0")
    assert "waits for the pods it preempted to leave: default/leaving" in why
