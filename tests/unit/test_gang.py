"""Gang decisions without a cluster: quorum, the one quota demand, all-or-nothing placement
on one snapshot, backoff per gang and the reasons a person reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from berth.api.podgroup import PodGroup
from berth.gang.backoff import GangBackoff
from berth.gang.group import (
    Gang,
    WaitReason,
    backed_off,
    demand,
    group_name,
    missing_members,
    quota_wait,
    resource_gap,
)
from berth.gang.hold import GangHold, wait_seconds
from berth.gang.koordinator import GangAnnotationError, parse_gang
from berth.gang.placement import Placed, Refused, place_all_or_nothing
from berth.gang.workload import scheduled_condition, with_condition

GANG = Gang("team", "train", 3)


@dataclass(frozen=True)
class Member:
    name: str
    requests: dict[str, int]


def member(name: str, cpu: int = 1000) -> Member:
    return Member(name, {"cpu": cpu, "pods": 1})


def test_a_podgroup_as_a_gang() -> None:
    group = PodGroup.from_dict(
        {
            "metadata": {"name": "train", "namespace": "team"},
            "spec": {"minMember": 3, "minResources": {"cpu": "2500m", "memory": "1Gi"}},
        }
    )
    assert Gang.of(group) == Gang("team", "train", 3, {"cpu": 2500, "memory": 1 << 30})
    # Without minMember each pod stands alone, as upstream with 0.
    assert Gang.of(PodGroup.from_dict({"metadata": {"name": "x"}})).min_member == 1


def test_members_are_named_by_the_scheduler_plugins_label() -> None:
    assert group_name({"scheduling.x-k8s.io/pod-group": "train"}) == "train"
    assert group_name({"pod-group.scheduling.sigs.k8s.io": "train"}) is None


def test_a_gang_without_its_quorum_waits_and_says_how_many_exist() -> None:
    wait = missing_members(GANG, 2)
    assert wait is not None
    assert wait.reason is WaitReason.WAITING_FOR_MEMBERS
    assert "2 of 3" in wait.message
    assert "team/train" in wait.message
    assert missing_members(GANG, 3) is None
    declared = missing_members(replace(GANG, total=5), 2)
    assert declared is not None
    assert declared.message.endswith("2 of 3 (minMember) exist; the job declares 5 (total-number)")


def test_the_quota_demand_is_the_members_needed_to_reach_min_member() -> None:
    pending = [member("a", 1000), member("b", 2000), member("c", 4000), member("d", 8000)]
    # Three are needed: the first three in placement order, the fourth is extra.
    asked = [m.requests for m in pending]
    assert demand(GANG, asked, []) == {"cpu": 7000, "pods": 3}
    # One bound already: two more are needed.
    assert demand(GANG, asked, [member("z").requests]) == {"cpu": 3000, "pods": 2}


def test_min_resources_raise_the_demand_less_what_bound_members_use() -> None:
    gang = Gang("team", "train", 2, {"cpu": 5000, "memory": 100})
    pending = [member("a", 1000), member("b", 1000)]
    asked = [m.requests for m in pending]
    assert demand(gang, asked, []) == {"cpu": 5000, "pods": 2, "memory": 100}
    assert demand(gang, asked[:1], [member("z", 3000).requests]) == {
        "cpu": 2000,
        "pods": 1,
        "memory": 100,
    }


def test_a_resource_gap_names_what_is_short() -> None:
    gang = Gang("team", "train", 2, {"cpu": 5000})
    wait = resource_gap(gang, {"cpu": 3500})
    assert wait is not None
    assert wait.reason is WaitReason.RESOURCE_GAP
    assert "short of cpu 1500m" in wait.message
    assert resource_gap(gang, {"cpu": 5000}) is None


def test_the_quota_reason_names_the_quota_and_the_shortfall() -> None:
    wait = quota_wait(GANG, "ElasticQuota team is more than Max (cpu: 2 used + 3 requested > 4)")
    assert wait.reason is WaitReason.WAITING_FOR_QUOTA
    assert "ElasticQuota team" in wait.message
    assert "3 members" in wait.message


class Snapshot:
    """A toy cluster: nodes with free cpu; placing takes it, undoing gives it back."""

    def __init__(self, **free: int) -> None:
        self.free = dict(free)
        self.undone: list[str] = []

    def place(self, m: Member) -> str | Refused[Member]:
        for node, room in self.free.items():
            if room >= m.requests["cpu"]:
                self.free[node] -= m.requests["cpu"]
                return node
        return Refused(m, "Insufficient cpu")

    def undo(self, placed: Placed[Member]) -> None:
        self.free[placed.node] += placed.member.requests["cpu"]
        self.undone.append(placed.member.name)


def test_a_gang_that_fits_is_committed_whole() -> None:
    snapshot = Snapshot(n1=2000, n2=1000)
    members = [member("a"), member("b"), member("c")]
    outcome = place_all_or_nothing(members, 3, snapshot.place, snapshot.undo)
    assert outcome.committed
    assert [p.node for p in outcome.placed] == ["n1", "n1", "n2"]
    assert snapshot.free == {"n1": 0, "n2": 0}


def test_a_gang_that_does_not_fit_leaves_nothing_behind() -> None:
    snapshot = Snapshot(n1=2000)
    members = [member("a"), member("b"), member("c")]
    outcome = place_all_or_nothing(members, 3, snapshot.place, snapshot.undo)
    assert not outcome.committed
    assert snapshot.free == {"n1": 2000}  # nothing assumed
    assert snapshot.undone == ["b", "a"]  # taken back in reverse
    wait = outcome.wait(GANG, lambda m: m.name)
    assert wait.reason is WaitReason.NO_PLACEMENT
    assert "2 of the 3 members it needs fit; c: Insufficient cpu" in wait.message


def test_placing_stops_once_the_number_cannot_be_reached() -> None:
    snapshot = Snapshot(n1=0)
    tried: list[str] = []

    def place(m: Member) -> str | Refused[Member]:
        tried.append(m.name)
        return snapshot.place(m)

    members = [member(n) for n in "abcd"]
    outcome = place_all_or_nothing(members, 3, place, snapshot.undo)
    assert not outcome.committed
    assert tried == ["a", "b"]  # after two refusals two members cannot make three


def test_members_beyond_min_member_are_placed_when_they_fit() -> None:
    snapshot = Snapshot(n1=3000)
    members = [member(n) for n in "abcd"]
    outcome = place_all_or_nothing(members, 3, snapshot.place, snapshot.undo)
    assert outcome.committed
    assert len(outcome.placed) == 3
    assert [r.member.name for r in outcome.refused] == ["d"]


def test_two_gangs_that_fit_alone_but_not_together_never_both_hold_part() -> None:
    snapshot = Snapshot(n1=3000, n2=3000)
    first = [member(f"a{i}", 1000) for i in range(4)]
    second = [member(f"b{i}", 1000) for i in range(4)]
    one = place_all_or_nothing(first, 4, snapshot.place, snapshot.undo)
    two = place_all_or_nothing(second, 4, snapshot.place, snapshot.undo)
    assert one.committed
    assert not two.committed
    assert snapshot.free == {"n1": 0, "n2": 2000}  # the second holds nothing


def test_backoff_per_gang() -> None:
    backoff = GangBackoff(10)
    backoff.failed("team/big", now=100)
    assert backoff.backed_off("team/big", now=105) == 110
    assert backoff.backed_off("team/small", now=105) is None
    assert backoff.backed_off("team/big", now=110) is None


def test_a_backed_off_gang_s_wait_ends_when_its_backoff_does() -> None:
    wait = backed_off(Gang("team", "big", 4), 1_767_225_610.0)
    assert wait.message == (
        "PodGroup team/big failed recently and is backed off until 2026-01-01T00:00:10Z"
    )
    assert wait.until == 1_767_225_610.0
    waiting = missing_members(Gang("team", "big", 4), 3)
    assert waiting is not None
    assert waiting.until is None  # it ends on an event only


@pytest.mark.parametrize("seconds", [0, -1])
def test_no_backoff_when_switched_off(seconds: float) -> None:
    backoff = GangBackoff(seconds)
    backoff.failed("team/big", now=100)
    assert backoff.backed_off("team/big", now=100) is None


def test_koordinator_annotations_describe_a_gang() -> None:
    annotations = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "3",
        "gang.scheduling.koordinator.sh/total-number": "4",
        "gang.scheduling.koordinator.sh/mode": "NonStrict",
        "gang.scheduling.koordinator.sh/waiting-time": "30s",
        "gang.scheduling.koordinator.sh/match-policy": "waiting-and-running",
    }
    gang = parse_gang("team", {}, annotations)
    assert gang == Gang("team", "train", 3, kind="Gang", wait_seconds=30.0, strict=False, total=4)
    assert gang.title == "Gang team/train"
    # Koordinator's defaults: Strict, the plugin's wait, total-number coerced up to min.
    plain = parse_gang("team", {}, {**annotations, "gang.scheduling.koordinator.sh/mode": ""})
    assert plain.strict
    fewer = {**annotations, "gang.scheduling.koordinator.sh/total-number": "2"}
    assert parse_gang("team", {}, fewer).total == 3
    del annotations["gang.scheduling.koordinator.sh/waiting-time"]
    assert parse_gang("team", {}, annotations).wait_seconds is None
    # The deprecated labels, in Koordinator's order: the label's name comes first.
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "old",
        "pod-group.scheduling.sigs.k8s.io/min-available": "2",
    }
    assert parse_gang("team", labels, {"gang.scheduling.koordinator.sh/name": "x"}).name == "old"
    assert parse_gang("team", labels, {}).min_member == 2


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"gang.scheduling.koordinator.sh/min-available": "three"}, "at least 1, not 'three'"),
        ({"gang.scheduling.koordinator.sh/min-available": "0"}, "at least 1, not '0'"),
        ({}, "at least 1, not ''"),
        (
            {
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/groups": '["team/a","b"]',
            },
            'groups must be a JSON list of "namespace/name"',
        ),
        (
            {
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/match-policy": "only-waiting",
            },
            "'only-waiting' is not supported",
        ),
        (
            {
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/waiting-time": "ten minutes",
            },
            "waiting-time: duration 'ten minutes' is malformed",
        ),
        (
            {
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/mode": "strict",
            },
            "mode must be Strict or NonStrict, not 'strict'",
        ),
        (
            {
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/total-number": "all",
            },
            "total-number must be a whole number of at least 1, not 'all'",
        ),
    ],
)
def test_koordinator_annotations_berth_cannot_honour_are_refused(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(GangAnnotationError, match=message):
        parse_gang("team", {}, {"gang.scheduling.koordinator.sh/name": "train", **annotations})


def test_podgroupscheduled_is_written_only_when_it_says_something_new() -> None:
    waiting = scheduled_condition(False, "Unschedulable", "2 of 3", 4, "2026-01-01T00:00:00Z")
    other = {"type": "DisruptionTarget", "status": "False"}
    first = with_condition([other], waiting)
    assert first == [other, waiting]
    assert with_condition(first, {**waiting, "lastTransitionTime": "later"}) is None
    moved = scheduled_condition(False, "Unschedulable", "1 of 3", 4, "2026-01-01T00:01:00Z")
    [_, kept] = with_condition(first, moved) or []
    assert kept["message"] == "1 of 3"
    assert kept["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # the status did not change
    placed = scheduled_condition(True, "Scheduled", "", 4, "2026-01-01T00:02:00Z")
    [_, now] = with_condition(first, placed) or []
    assert now["lastTransitionTime"] == "2026-01-01T00:02:00Z"
    assert with_condition([other, now], waiting) is None  # the first placement stands


def test_a_koordinator_gang_group_names_the_other_gangs_across_namespaces() -> None:
    annotations = {
        "gang.scheduling.koordinator.sh/name": "a",
        "gang.scheduling.koordinator.sh/min-available": "2",
        "gang.scheduling.koordinator.sh/groups": '["team/a", "other/b", "team/c"]',
    }
    assert parse_gang("team", {}, annotations).group == ("other/b", "team/c")


def test_a_gang_holds_its_room_for_a_failing_member_until_its_wait_is_up() -> None:
    hold = GangHold("team/train", deadline=100.0)
    assert [hold.next_try(90.0, tries) for tries in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert hold.next_try(99.0, 5) == 1.0  # the last try at the deadline
    assert hold.next_try(100.0, 0) is None


def test_one_members_failure_gives_back_a_strict_gangs_room_only() -> None:
    strict, lenient = GangHold("t/a", 100.0), GangHold("t/b", 100.0, strict=False)
    strict.member_failed()
    lenient.member_failed()
    assert strict.next_try(0.0, 0) is None
    assert lenient.next_try(0.0, 0) == 0.5


@pytest.mark.parametrize(
    ("declared", "default", "chosen"),
    [(None, 60.0, 60.0), (0, 60.0, 60.0), (10, 60.0, 10.0), (3600, 60.0, 900.0)],
)
def test_the_wait_is_the_gangs_own_else_the_default_at_most_fifteen_minutes(
    declared: float | None, default: float, chosen: float
) -> None:
    assert wait_seconds(declared, default) == chosen
