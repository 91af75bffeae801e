"""Koordinator's tree labels and annotations: defaults, parsing, refusals that name the
key, and how a pod finds its quota."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth.quota.tree import (
    ANNOTATION_NAMESPACES,
    ANNOTATION_SHARED_WEIGHT,
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_IS_PARENT,
    LABEL_NAME,
    LABEL_PARENT,
    LABEL_PREEMPTIBLE,
    ROOT,
    TreeError,
    build_tree,
    is_tree_quota,
    parse_pod,
    parse_quota,
)


def eq(
    name: str,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    minimum: str = "4",
    maximum: str = "8",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace or name,
            "labels": labels or {},
            "annotations": annotations or {},
            "creationTimestamp": created,
        },
        "spec": {"min": {"cpu": minimum}, "max": {"cpu": maximum, "memory": "8Gi"}},
    }


def test_defaults_match_koordinator() -> None:
    quota = parse_quota(eq("team", labels={LABEL_ALLOW_LENT_RESOURCE: "true"}))
    assert quota.parent == ROOT
    assert not quota.is_parent
    assert quota.allow_lent
    assert quota.shared_weight == {"cpu": 8000, "memory": 8 * 1024**3}  # = max
    assert quota.min == {"cpu": 4000}


def test_labels_and_annotations_are_read() -> None:
    quota = parse_quota(
        eq(
            "team",
            labels={LABEL_PARENT: "dept", LABEL_IS_PARENT: "false",
                    LABEL_ALLOW_LENT_RESOURCE: "false"},
            annotations={ANNOTATION_SHARED_WEIGHT: json.dumps({"cpu": "2"}),
                         ANNOTATION_NAMESPACES: json.dumps(["a", "b"])},
        )
    )  # fmt: skip
    assert (quota.parent, quota.allow_lent, quota.namespaces) == ("dept", False, ("a", "b"))
    assert quota.shared_weight == {"cpu": 2000}


def test_kueue_limits_are_read_and_join_the_tree() -> None:
    obj = eq("t", annotations={"berth.io/lending-limit": '{"cpu": "1"}',
                               "berth.io/borrowing-limit": '{"cpu": "2"}'})  # fmt: skip
    assert is_tree_quota(obj)
    quota = parse_quota(obj)
    assert (quota.lending_limit, quota.borrowing_limit) == ({"cpu": 1000}, {"cpu": 2000})


def test_all_zero_shared_weight_means_max() -> None:
    quota = parse_quota(eq("t", annotations={ANNOTATION_SHARED_WEIGHT: '{"cpu": "0"}'}))
    assert quota.shared_weight["cpu"] == 8000


@pytest.mark.parametrize(
    ("labels", "annotations", "named"),
    [
        ({LABEL_IS_PARENT: "yes"}, {}, LABEL_IS_PARENT),
        ({LABEL_ALLOW_LENT_RESOURCE: "False"}, {}, LABEL_ALLOW_LENT_RESOURCE),
        ({}, {ANNOTATION_SHARED_WEIGHT: "cpu=2"}, ANNOTATION_SHARED_WEIGHT),
        ({}, {ANNOTATION_SHARED_WEIGHT: '{"cpu": "two"}'}, ANNOTATION_SHARED_WEIGHT),
        ({}, {ANNOTATION_NAMESPACES: "a,b"}, ANNOTATION_NAMESPACES),
        ({"quota.scheduling.koordinator.sh/is-root": "true"}, {}, "is-root"),
        ({}, {"quota.scheduling.koordinator.sh/guaranteed": "{}"}, "guaranteed"),
        ({LABEL_PARENT: "t"}, {}, LABEL_PARENT),
        ({}, {"berth.io/lending-limit": '{"cpu": "5"}'}, "must not exceed min"),
        ({}, {"berth.io/borrowing-limit": "[1]"}, "berth.io/borrowing-limit"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(
    labels: dict[str, str], annotations: dict[str, str], named: str
) -> None:
    with pytest.raises(TreeError, match=named):
        parse_quota(eq("t", labels=labels, annotations=annotations))


def test_pod_labels() -> None:
    assert parse_pod({LABEL_NAME: "team", LABEL_PREEMPTIBLE: "false"}).preemptible is False
    assert parse_pod({}).preemptible is True
    with pytest.raises(TreeError, match=LABEL_PREEMPTIBLE):
        parse_pod({LABEL_PREEMPTIBLE: "no"})


def test_only_quotas_with_tree_keys_join_the_tree() -> None:
    assert not is_tree_quota(eq("flat"))
    assert is_tree_quota(eq("t", labels={LABEL_PARENT: "dept"}))
    tree = build_tree([eq("flat"), eq("t", labels={LABEL_ALLOW_LENT_RESOURCE: "true"})])
    assert set(tree.quotas) == {"t"}


def test_tree_structure_and_refusals() -> None:
    parent = {LABEL_IS_PARENT: "true"}
    tree = build_tree(
        [
            eq("dept", "platform", labels=parent, minimum="10"),
            eq("team-a", labels={LABEL_PARENT: "dept"}),
            eq("team-b", labels={LABEL_PARENT: "dept"}, annotations={
                ANNOTATION_NAMESPACES: '["b1", "b2"]'}),
            eq("orphan", labels={LABEL_PARENT: "missing"}),
            eq("under-leaf", labels={LABEL_PARENT: "team-a"}),
            eq("below-orphan", labels={LABEL_PARENT: "orphan", LABEL_IS_PARENT: "true"}),
            eq("team-a", "elsewhere", labels={LABEL_PARENT: "dept"},
               created="2026-02-01T00:00:00Z"),
            eq("bad", labels={LABEL_IS_PARENT: "maybe"}),
        ]
    )  # fmt: skip
    assert set(tree.quotas) == {"dept", "team-a", "team-b"}
    assert tree.children == {ROOT: ["dept"], "dept": ["team-a", "team-b"]}
    assert [q.name for q in tree.chain("team-a")] == ["team-a", "dept"]
    assert "does not exist" in tree.refused[("orphan", "orphan")]
    assert "not labelled" in tree.refused[("under-leaf", "under-leaf")]
    assert "already has this name" in tree.refused[("elsewhere", "team-a")]
    assert LABEL_IS_PARENT in tree.refused[("bad", "bad")]
    assert tree.min_overcommitted("dept") == []
    # Pods: label first, then the namespaces annotation, then the quota's own namespace.
    assert tree.resolve("b2", {}) == "team-b"
    assert tree.resolve("team-a", {}) == "team-a"
    assert tree.resolve("anywhere", {LABEL_NAME: "team-a"}) == "team-a"
    assert tree.resolve("platform", {}) is None  # a parent's namespace runs no tree pods
    with pytest.raises(TreeError, match="a parent runs no pods"):
        tree.resolve("x", {LABEL_NAME: "dept"})
    with pytest.raises(TreeError, match="does not exist"):
        tree.resolve("x", {LABEL_NAME: "nope"})
    with pytest.raises(TreeError, match="refused"):
        tree.resolve("x", {LABEL_NAME: "orphan"})
    with pytest.raises(TreeError, match="ElasticQuota orphan/orphan is refused: parent"):
        tree.resolve("orphan", {})


def test_a_cycle_is_refused() -> None:
    tree = build_tree(
        [
            eq("a", labels={LABEL_PARENT: "b", LABEL_IS_PARENT: "true"}),
            eq("b", labels={LABEL_PARENT: "a", LABEL_IS_PARENT: "true"}),
        ]
    )
    assert not tree.quotas
    assert "cycle" in tree.refused[("a", "a")]


def test_children_min_over_parent_min_is_found() -> None:
    tree = build_tree(
        [
            eq("dept", labels={LABEL_IS_PARENT: "true"}, minimum="6"),
            eq("a", labels={LABEL_PARENT: "dept"}, minimum="4"),
            eq("b", labels={LABEL_PARENT: "dept"}, minimum="4"),
        ]
    )
    assert tree.min_overcommitted("dept") == ["cpu"]
