"""The quota tree's admission rules: each refusal says why, a valid tree passes, and
Berth's own runtime/request writes are never refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from berth.quota.tree import (
    ANNOTATION_NAMESPACES,
    ANNOTATION_RUNTIME,
    LABEL_IS_PARENT,
    LABEL_NAME,
    LABEL_PARENT,
)
from berth.quota.treevalidation import (
    CREATE,
    DELETE,
    UPDATE,
    LivePod,
    needs_pods,
    review_pod,
    review_quota,
)


def eq(
    name: str,
    parent: str | None = None,
    *,
    is_parent: bool = False,
    minimum: str = "2",
    maximum: str = "8",
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {LABEL_IS_PARENT: "true" if is_parent else "false"}
    if parent is not None:
        labels[LABEL_PARENT] = parent
    return {
        "metadata": {
            "name": name,
            "namespace": namespace or name,
            "labels": labels,
            "annotations": annotations or {},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"min": {"cpu": minimum}, "max": {"cpu": maximum}},
    }


DEPT = eq("dept", is_parent=True, minimum="4")
TEAM_A = eq("team-a", "dept", minimum="2")
TEAM_B = eq("team-b", "dept", minimum="2")


def test_a_valid_tree_is_admitted_quota_by_quota() -> None:
    assert review_quota(CREATE, None, DEPT, []) is None
    assert review_quota(CREATE, None, TEAM_A, [DEPT]) is None
    assert review_quota(CREATE, None, TEAM_B, [DEPT, TEAM_A]) is None


def test_children_min_over_parent_min_is_refused_naming_the_resource() -> None:
    big = eq("team-b", "dept", minimum="3")
    why = review_quota(CREATE, None, big, [DEPT, TEAM_A])
    assert why is not None
    assert "children's min of ElasticQuota dept" in why
    assert "cpu 5 > 4" in why


def test_lowering_a_parent_min_below_its_children_is_refused() -> None:
    smaller = eq("dept", is_parent=True, minimum="3")
    why = review_quota(UPDATE, DEPT, smaller, [TEAM_A, TEAM_B])
    assert why is not None
    assert "its children's min would add up to more than its min (cpu 4 > 3)" in why


def test_the_parent_must_exist_and_be_a_parent() -> None:
    why = review_quota(CREATE, None, TEAM_A, [])
    assert why is not None
    assert "parent ElasticQuota dept" in why
    assert "does not exist" in why
    leaf = eq("dept", minimum="4")
    why = review_quota(CREATE, None, TEAM_A, [leaf])
    assert why is not None
    assert f"is not labelled {LABEL_IS_PARENT}" in why


def test_a_cycle_is_refused() -> None:
    top = eq("top", is_parent=True, minimum="8")
    middle = eq("middle", "top", is_parent=True, minimum="4")
    looped = eq("top", "middle", is_parent=True, minimum="8")
    why = review_quota(UPDATE, top, looped, [middle])
    assert why is not None
    assert "would make a cycle" in why


def test_a_quota_with_children_stays_a_parent_and_in_the_tree() -> None:
    leaf = eq("dept", minimum="4")
    why = review_quota(UPDATE, DEPT, leaf, [TEAM_A, TEAM_B])
    assert why is not None
    assert "has children (team-a, team-b)" in why
    flat = {"metadata": {"name": "dept", "namespace": "dept"}, "spec": DEPT["spec"]}
    why = review_quota(UPDATE, DEPT, flat, [TEAM_A, TEAM_B])
    assert why is not None
    assert "cannot leave the quota tree" in why


def test_deleting_a_quota_with_children_is_refused() -> None:
    why = review_quota(DELETE, DEPT, None, [TEAM_A, TEAM_B])
    assert why == "ElasticQuota dept has children (team-a, team-b); delete or move them first"
    assert review_quota(DELETE, TEAM_A, None, [DEPT, TEAM_B]) is None
    assert review_quota(DELETE, DEPT, None, []) is None


def test_names_and_namespaces_are_unique_in_the_tree() -> None:
    twin = eq("team-a", "dept", namespace="elsewhere")
    why = review_quota(CREATE, None, twin, [DEPT, TEAM_A])
    assert why is not None
    assert "already has the name team-a" in why
    spans = {ANNOTATION_NAMESPACES: '["shared"]'}
    first = eq("team-a", "dept", minimum="1", annotations=spans)
    second = eq("team-b", "dept", minimum="1", annotations=spans)
    why = review_quota(CREATE, None, second, [DEPT, first])
    assert why is not None
    assert "namespace shared already belongs to ElasticQuota team-a" in why


def test_malformed_labels_are_refused_with_the_parsers_reason() -> None:
    bad = copy.deepcopy(TEAM_A)
    bad["metadata"]["labels"][LABEL_IS_PARENT] = "yes"
    why = review_quota(CREATE, None, bad, [DEPT])
    assert why is not None
    assert why.startswith("ElasticQuota team-a: ")
    assert '"true" or "false"' in why


POD_A = LivePod("team-a", "trainer-0", {})


def test_becoming_a_parent_while_running_pods_is_refused() -> None:
    made_parent = eq("team-a", "dept", is_parent=True, minimum="2")
    assert needs_pods(UPDATE, TEAM_A, made_parent)
    why = review_quota(UPDATE, TEAM_A, made_parent, [DEPT, TEAM_B], [POD_A])
    assert why is not None
    assert "cannot become a parent" in why
    assert "1 pod(s): team-a/trainer-0" in why
    assert review_quota(UPDATE, TEAM_A, made_parent, [DEPT, TEAM_B], []) is None


def test_moving_to_another_parent_while_pods_use_the_quota_is_refused() -> None:
    other = eq("other", is_parent=True, minimum="4")
    moved = eq("team-a", "other", minimum="2")
    assert needs_pods(UPDATE, TEAM_A, moved)
    why = review_quota(UPDATE, TEAM_A, moved, [DEPT, TEAM_B, other], [POD_A])
    assert why is not None
    assert "cannot move from dept to other while pods use it" in why
    # A pod of another quota does not hold it back.
    elsewhere = LivePod("team-b", "x", {})
    assert review_quota(UPDATE, TEAM_A, moved, [DEPT, TEAM_B, other], [elsewhere]) is None


def test_a_parent_moves_only_while_its_subtree_is_empty() -> None:
    top = eq("top", is_parent=True, minimum="8")
    moved = eq("dept", "top", is_parent=True, minimum="4")
    why = review_quota(UPDATE, DEPT, moved, [TEAM_A, TEAM_B, top], [POD_A])
    assert why is not None
    assert "cannot move from koordinator-root-quota to top" in why


def test_berths_own_annotation_writes_are_admitted_even_on_a_broken_tree() -> None:
    written = copy.deepcopy(TEAM_A)
    written["metadata"]["annotations"][ANNOTATION_RUNTIME] = '{"cpu": "2"}'
    assert not needs_pods(UPDATE, TEAM_A, written)
    assert review_quota(UPDATE, TEAM_A, written, []) is None  # the parent is gone


def test_quotas_outside_the_tree_are_not_checked() -> None:
    flat = {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"max": {"cpu": "1"}}}
    assert review_quota(CREATE, None, flat, [DEPT]) is None
    assert review_quota(DELETE, flat, None, [DEPT]) is None


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({LABEL_NAME: "dept"}, "a parent runs no pods"),
        ({LABEL_NAME: "team-a"}, None),
        ({LABEL_NAME: "unknown"}, None),  # may be created before its quota
        ({}, None),
    ],
)
def test_a_pod_may_not_name_a_parent_quota(labels: dict[str, str], expected: str | None) -> None:
    why = review_pod(labels, [DEPT, TEAM_A])
    if expected is None:
        assert why is None
    else:
        assert why is not None
        assert expected in why


def test_a_parent_is_not_made_while_pods_name_it() -> None:
    waiting = LivePod("anywhere", "early", {LABEL_NAME: "dept"})
    assert needs_pods(CREATE, None, DEPT)
    assert not needs_pods(CREATE, None, TEAM_A)
    why = review_quota(CREATE, None, DEPT, [], [waiting, POD_A])
    assert why is not None
    assert "cannot be a parent" in why
    assert "1 pod(s): anywhere/early" in why
    assert review_quota(CREATE, None, DEPT, [], [POD_A]) is None


def test_a_pod_update_that_keeps_its_quota_labels_passes() -> None:
    labels = {LABEL_NAME: "dept", "app": "x"}
    # Someone else's patch (an annotation, another label) to a pod already naming a parent.
    assert review_pod({**labels, "app": "y"}, [DEPT], old_labels=labels) is None
    why = review_pod(labels, [DEPT], old_labels={LABEL_NAME: "team-a"})
    assert why is not None
    assert "a parent runs no pods" in why


def test_a_child_max_naming_a_resource_its_parent_max_lacks_is_refused() -> None:
    """Koordinator refuses a child whose max limits a resource its parent's max does not
    (and a parent's max dropping a resource its children limit)."""
    gpus = copy.deepcopy(TEAM_A)
    gpus["spec"]["max"]["nvidia.com/gpu"] = "2"
    why = review_quota(CREATE, None, gpus, [DEPT])
    assert why == (
        "ElasticQuota team-a: its max names nvidia.com/gpu, which the max of its parent "
        "ElasticQuota dept does not; add it to the parent's max, or remove it here"
    )
    parent = copy.deepcopy(DEPT)
    parent["spec"]["max"]["nvidia.com/gpu"] = "4"
    assert review_quota(CREATE, None, gpus, [parent]) is None
    why = review_quota(UPDATE, parent, DEPT, [gpus])
    assert why == (
        "ElasticQuota dept: its max would drop nvidia.com/gpu, which the max of its child "
        "ElasticQuota team-a names; remove it from the child first"
    )
