"""The reliability checker's quota-tree invariants flag what they must, on raw objects."""

from __future__ import annotations

import json
from typing import Any

from tests.reliability.quota_invariants import (
    quota_of,
    reclaim_without_reservation,
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
