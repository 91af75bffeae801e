"""The tree quotas' status and Koordinator annotations: used, request, runtime, borrowed
and lent, written only when they differ; refused quotas say why."""

from __future__ import annotations

import json
from typing import Any

from berth.quota.status import QuotaSeen, desired, quota_seen
from berth.quota.tree import ANNOTATION_REQUEST, ANNOTATION_RUNTIME, LABEL_IS_PARENT, LABEL_PARENT
from berth.quota.treestatus import PodSeen, desired_tree

GPU = "nvidia.com/gpu"


def eq(name: str, minimum: int, maximum: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": name, "labels": labels,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"min": {GPU: str(minimum)}, "max": {GPU: str(maximum)}},
    }  # fmt: skip


def objects() -> list[dict[str, Any]]:
    return [
        eq("dept", 4, 10, **{LABEL_IS_PARENT: "true"}),
        eq("team-a", 2, 8, **{LABEL_PARENT: "dept"}),
        eq("team-b", 2, 8, **{LABEL_PARENT: "dept"}),
        eq("orphan", 1, 2, **{LABEL_PARENT: "missing"}),
    ]


def pods() -> list[PodSeen]:
    placed = [PodSeen("team-a", {}, {GPU: 1}, True) for _ in range(5)]
    waiting = [PodSeen("team-a", {}, {GPU: 1}, False) for _ in range(3)]
    other = [PodSeen("team-b", {}, {GPU: 1}, True)]
    return placed + waiting + other


def test_status_and_annotations_of_a_two_level_tree() -> None:
    patches = {p.name: p for p in desired_tree(objects(), pods(), {GPU: 10})}
    a = patches["team-a"]
    assert a.status["used"] == {GPU: "5"}
    assert a.status["request"] == {GPU: "8"}
    # team-b wants 1 (under its min, which it lends): team-a gets the other 9, capped at 8.
    assert a.status["runtime"] == {GPU: "8"}
    assert a.status["borrowed"] == {GPU: "3"}
    assert a.status["lent"] == {GPU: "0"}
    assert patches["team-b"].status["lent"] == {GPU: "1"}
    assert patches["dept"].status["used"] == {GPU: "6"}
    assert patches["dept"].status["runtime"] == {GPU: "9"}
    assert json.loads(a.annotations[ANNOTATION_RUNTIME]) == {GPU: "8"}
    assert json.loads(a.annotations[ANNOTATION_REQUEST]) == {GPU: "8"}
    assert a.status["conditions"][0]["reason"] == "InQuotaTree"
    orphan = patches["orphan"]
    assert orphan.status["conditions"][0]["status"] == "False"
    assert "parent ElasticQuota missing does not exist" in orphan.status["conditions"][0]["message"]


def test_nothing_is_written_when_up_to_date() -> None:
    current = objects()
    for patch in desired_tree(current, pods(), {GPU: 10}):
        obj = next(o for o in current if o["metadata"]["name"] == patch.name)
        obj.setdefault("status", {}).update(patch.status)
        obj["metadata"].setdefault("annotations", {}).update(patch.annotations)
    assert desired_tree(current, pods(), {GPU: 10}) == []


def test_children_min_over_parent_min_is_reported_on_the_parent() -> None:
    tree = [eq("dept", 3, 10, **{LABEL_IS_PARENT: "true"}), *objects()[1:3]]
    condition = {p.name: p for p in desired_tree(tree, [], {GPU: 10})}["dept"].status["conditions"][
        0
    ]
    assert condition["reason"] == "ChildrenMinExceedsMin"
    assert GPU in condition["message"]


def test_the_namespace_rules_leave_tree_quotas_alone() -> None:
    seen = [quota_seen("team-a", eq("team-a", 2, 8, **{LABEL_PARENT: "dept"}))]
    assert seen[0].tree
    assert desired("team-a", seen, []) == {}
    flat = QuotaSeen("flat", "2026", frozenset({GPU}), {}, None)
    assert set(desired("team-a", [*seen, flat], [])) == {"flat"}
