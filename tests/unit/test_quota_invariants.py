"""The reliability checker's quota-tree invariants flag what they must, on raw objects."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from tests.reliability.quota_invariants import (
    children_min_over_parent,
    quota_of,
    reclaim_without_reservation,
    tree_look,
    tree_over_max,
    tree_used,
)

Obj = dict[str, Any]
KOORD = "quota.scheduling.koordinator.sh/"


def eq(name: str, maximum: int, parent: str | None = None, *, is_parent: bool = False,
       **annotations: str) -> Obj:  # fmt: skip
    labels = {f"{KOORD}is-parent": "true" if is_parent else "false"}
    if parent:
        labels[f"{KOORD}parent"] = parent
    return {
        "metadata": {"name": name, "namespace": name, "labels": labels,
                     "annotations": annotations, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"min": {"cpu": "0"}, "max": {"cpu": str(maximum)}},
    }  # fmt: skip


def running(name: str, namespace: str, cpu: str = "1", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "labels": labels},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def department() -> list[Obj]:
    return [eq("dept", 4, is_parent=True), eq("team-a", 3, "dept"), eq("team-b", 3, "dept")]


def test_used_is_summed_up_the_tree() -> None:
    pods = [running("a0", "team-a"), running("a1", "team-a"), running("b0", "team-b")]
    pods.append({**running("gone", "team-a"), "status": {"phase": "Succeeded"}})
    used = tree_used(department(), pods)
    assert {name: float(v.get("cpu", 0)) for name, v in used.items()} == {
        "dept": 3.0, "team-a": 2.0, "team-b": 1.0,
    }  # fmt: skip
    assert tree_over_max(department(), pods) == []


def test_a_parent_over_its_max_is_flagged_though_each_child_is_within() -> None:
    pods = [running(f"a{i}", "team-a") for i in range(3)] + [running("b0", "team-b"),
                                                              running("b1", "team-b")]  # fmt: skip
    found = tree_over_max(department(), pods)
    assert len(found) == 1
    assert "ElasticQuota dept/dept" in found[0]
    assert "5 cpu, over its max 4" in found[0]


def test_a_leaf_over_its_max_is_flagged() -> None:
    pods = [running(f"a{i}", "team-a") for i in range(4)]
    found = tree_over_max([eq("dept", 10, is_parent=True), eq("team-a", 3, "dept")], pods)
    assert [line.split(":")[0] for line in found] == ["ElasticQuota team-a/team-a"]


def test_pods_find_their_quota_by_label_namespaces_then_namespace() -> None:
    quotas = {
        "team-a": eq("team-a", 3, **{f"{KOORD}namespaces": json.dumps(["shared"])}),
        "team-b": eq("team-b", 3),
    }
    assert quota_of(running("x", "team-a"), quotas) == "team-a"
    assert quota_of(running("x", "shared"), quotas) == "team-a"
    assert quota_of(running("x", "team-a", **{f"{KOORD}name": "team-b"}), quotas) == "team-b"
    assert quota_of(running("x", "elsewhere"), quotas) is None
    # A flat quota (no tree keys) is not the tree's.
    flat = {"metadata": {"name": "f", "namespace": "f"}, "spec": {"max": {"cpu": "1"}}}
    assert tree_used([flat], [running(f"f{i}", "f") for i in range(3)]) == {}


def victim(name: str, message: str) -> Obj:
    pod = running(name, "team-a")
    pod["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
        }
    ]
    return pod  # fmt: skip


def preempted(victim_pod: Obj, preemptor: str, at: str) -> Obj:
    return {
        "reason": "Preempted",
        "involvedObject": {"kind": "Pod", "uid": victim_pod["metadata"]["uid"]},
        "message": f"Preempted by pod {preemptor} on node n1",
        "eventTime": at,
        "metadata": {"name": "e", "creationTimestamp": at},
    }


def reservation(preemptor: str, at: str) -> Obj:
    return {
        "metadata": {"name": f"preempt-{preemptor}", "creationTimestamp": at,
                     "labels": {"berth.io/preemptor": preemptor}},
        "spec": {"owners": [{"object": {"uid": preemptor}}]},
    }  # fmt: skip


RECLAIMED = "berth-scheduler: preempting to return capacity over its runtime to the quota tree"


def test_a_reclaim_after_its_reservation_passes() -> None:
    pod = victim("a0", RECLAIMED)
    events = [preempted(pod, "uid-b0", "2026-01-01T00:00:10.500000Z")]
    victims = {pod["metadata"]["uid"]: pod}
    assert (
        reclaim_without_reservation(
            events, victims, [reservation("uid-b0", "2026-01-01T00:00:10Z")]
        )
        == []
    )


def test_a_reclaim_without_a_reservation_is_flagged() -> None:
    pod = victim("a0", RECLAIMED)
    events = [preempted(pod, "uid-b0", "2026-01-01T00:00:10Z")]
    victims = {pod["metadata"]["uid"]: pod}
    found = reclaim_without_reservation(events, victims, [])
    assert found == [
        "Pod team-a/a0 was evicted to reclaim quota for pod uid-b0 with no Reservation owned "
        "by it made before"
    ]
    # A reservation for someone else does not count; one made after is flagged too.
    assert reclaim_without_reservation(
        events, victims, [reservation("uid-other", "2026-01-01T00:00:00Z")]
    )
    late = reclaim_without_reservation(
        events, victims, [reservation("uid-b0", "2026-01-01T00:00:15Z")]
    )
    assert len(late) == 1
    assert "one was made 5s after" in late[0]


def test_priority_preemption_is_not_judged_here() -> None:
    pod = victim("a0", "berth-scheduler: preempting to accommodate a higher priority pod")
    events = [preempted(pod, "uid-b0", "2026-01-01T00:00:10Z")]
    assert reclaim_without_reservation(events, {pod["metadata"]["uid"]: pod}, []) == []


def test_a_borrowing_limit_caps_the_subtree_below_its_max() -> None:
    """team-a: min 1, max 10, borrowing limit 2: it may use 3, not 4."""
    limited = eq("team-a", 10, "dept", **{"berth.io/borrowing-limit": json.dumps({"cpu": "2"})})
    limited["spec"]["min"] = {"cpu": "1"}
    quotas = [eq("dept", 10, is_parent=True), limited]
    pods = [running(f"a{i}", "team-a") for i in range(3)]
    assert tree_over_max(quotas, pods) == []
    found = tree_over_max(quotas, [*pods, running("a3", "team-a")])
    assert found == [
        "ElasticQuota team-a/team-a: its subtree's bound pods use 4 cpu, over its min + "
        "borrowing limit 3"
    ]


def with_min(quota: Obj, cpu: str) -> Obj:
    quota["spec"]["min"] = {"cpu": cpu}
    return quota


def test_children_whose_mins_add_up_past_their_parents_are_flagged() -> None:
    quotas = [
        with_min(eq("dept", 10, is_parent=True), "4"),
        with_min(eq("team-a", 10, "dept"), "2"),
        with_min(eq("team-b", 10, "dept"), "2"),
    ]
    assert children_min_over_parent(quotas) == []
    quotas[2] = with_min(quotas[2], "3")
    assert children_min_over_parent(quotas) == [
        "ElasticQuota dept/dept: its children's mins (team-a, team-b) add up to 5 cpu, "
        "over its min 4"
    ]
    # The root's children answer to no stored parent.
    assert children_min_over_parent([with_min(eq("alone", 10), "99")]) == []


def node(name: str, cpu: str = "8") -> Obj:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "pods": "110"}}}


def waiting(name: str, namespace: str, cpu: str = "1", nominated: str = "") -> Obj:
    pod = running(name, namespace, cpu)
    pod["spec"]["nodeName"] = ""
    pod["status"] = {"phase": "Pending", "nominatedNodeName": nominated}
    return pod


def dept_of_two(a_min: str = "2", b_min: str = "2") -> list[Obj]:
    """dept: min and max 4 over team-a and team-b (max 4 each)."""
    return [
        with_min(eq("dept", 4, is_parent=True), "4"),
        with_min(eq("team-a", 4, "dept"), a_min),
        with_min(eq("team-b", 4, "dept"), b_min),
    ]


def test_a_pod_within_its_min_reclaims_from_a_sibling_over_its_runtime() -> None:
    """team-b borrowed all 4 of dept while team-a was idle; team-a's pod comes back within
    its min of 2: dept is at its max, team-b gets at most 4 - 2 and holds 4. On n1 (full)
    evicting team-b's pods there lets it in."""
    nodes = {"n1": node("n1", "4")}
    pods = [running(f"b{i}", "team-b") for i in range(4)] + [waiting("a0", "team-a")]
    look = tree_look(dept_of_two(), pods, nodes, ["n1"])
    assert look.runtime_low["team-a"] == {"cpu": 1}  # its demand, within its min
    assert look.over_runtime("team-b") == {"cpu": 1}
    assert not look.admits("team-a", pods[-1])  # dept is at its max
    found = look.reclaim_node("team-a", pods[-1], ["n1"], lambda n: {"cpu": 0, "pods": 106})
    assert found == (
        "n1 frees cpu 4 of team-b (over their runtime); team-a uses cpu 0, its runtime at "
        "least cpu 1"
    )
    # No node the pod may go to, or team-b within what it may keep: nothing to reclaim.
    assert look.reclaim_node("team-a", pods[-1], [], lambda n: {}) == ""
    fewer = [running(f"b{i}", "team-b") for i in range(3)] + [waiting("a0", "team-a")]
    look = tree_look(dept_of_two(), fewer, nodes, ["n1"])
    assert look.over_runtime("team-b") == {}
    assert look.admits("team-a", fewer[-1])


def test_a_pod_past_its_min_reclaims_nothing() -> None:
    """team-a at its min of 1 already: its second pod would borrow, and borrowing takes
    nothing back from a sibling."""
    nodes = {"n1": node("n1", "4")}
    pods = [running("a0", "team-a"), *(running(f"b{i}", "team-b") for i in range(3))]
    pending = waiting("a1", "team-a")
    look = tree_look(dept_of_two("1", "3"), [*pods, pending], nodes, ["n1"])
    assert look.reclaim_node("team-a", pending, ["n1"], lambda n: {"cpu": 0}) == ""


def test_what_the_root_hands_down_scales_the_mins_and_counts_only_sure_nodes() -> None:
    """Both teams want 4 in all. Pods outside the tree hold 6 of n1's 8: dept gets 2, so
    each team's min of 2 is scaled down to 1 (to the unit below) and team-a's 1-CPU pod is
    not surely within its runtime. With n2 too, dept gets its demand and the mins hold; a
    node the scheduler may not see yet hands down nothing."""
    nodes = {"n1": node("n1", "8"), "n2": node("n2", "8")}
    outside = [running(f"x{i}", "elsewhere") for i in range(6)]
    pending = [waiting("a0", "team-a"), *(waiting(f"b{i}", "team-b") for i in range(3))]
    look = tree_look(dept_of_two(), [*outside, *pending], nodes, ["n1"])
    assert look.runtime_low["dept"] == {"cpu": 2}
    assert look.runtime_low["team-a"] == {"cpu": Decimal("0.999")}
    assert not look.admits("team-a", pending[0])
    look = tree_look(dept_of_two(), [*outside, *pending], nodes, ["n1", "n2"])
    assert look.runtime_low == {"dept": {"cpu": 4}, "team-a": {"cpu": 1}, "team-b": {"cpu": 2}}
    assert look.admits("team-a", pending[0])


def test_a_nominated_pod_does_not_compete_with_itself() -> None:
    nodes = {"n1": node("n1", "4")}
    pods = [running(f"b{i}", "team-b") for i in range(2)]
    nominated = waiting("a0", "team-a", "2", nominated="n1")
    look = tree_look(dept_of_two(), [*pods, nominated], nodes, ["n1"])
    assert look.used_high["dept"] == {"cpu": 4}
    assert look.admits("team-a", nominated)
    assert not look.admits("team-a", waiting("a1", "team-a", "1"))
