"""Koordinator's root, default and system quotas: the reserved names, which pods count in
the default and system quotas, what they hold taken off what the root hands down (a worked
example and a property), their max, their status and their place in `berth quota tree`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.kubectl.treeview import render, tree_rows
from berth.quota.reservedobjects import quota_group_namespace, reserved_quota_objects
from berth.quota.status import quota_seen
from berth.quota.tree import (
    ANNOTATION_NAMESPACES,
    ANNOTATION_RUNTIME,
    ANNOTATION_SHARED_WEIGHT,
    DEFAULT,
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_IS_PARENT,
    LABEL_NAME,
    LABEL_PARENT,
    LABEL_PREEMPTIBLE,
    ROOT,
    SYSTEM,
    TreeError,
    build_tree,
    is_tree_quota,
    outside_max_args,
    parse_reserved,
)
from berth.quota.treeadmission import TreePod, check_outside, handed_down, tree_state
from berth.quota.treestatus import PodSeen, desired_tree
from berth.quota.treevalidation import CREATE, review_pod, review_quota

GPU = "nvidia.com/gpu"


def eq(
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if minimum is not None:
        spec["min"] = {GPU: str(minimum)}
    if maximum is not None:
        spec["max"] = {GPU: str(maximum)}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace or name,
            "labels": labels or {},
            "annotations": annotations or {},
            "creationTimestamp": created,
        },
        "spec": spec,
    }


def department() -> list[dict[str, Any]]:
    """The walk-through's tree: research (max 8) over team-a and team-b (min 2, max 8;
    weights 8 and 16)."""
    return [
        eq("research", 4, 8, labels={LABEL_IS_PARENT: "true"}),
        eq("team-a", 2, 8, labels={LABEL_PARENT: "research"}),
        eq("team-b", 2, 8, labels={LABEL_PARENT: "research"},
           annotations={ANNOTATION_SHARED_WEIGHT: json.dumps({GPU: "16"})}),
    ]  # fmt: skip


# -- the reserved names ------------------------------------------------------------------


def test_the_reserved_names_are_never_flat_quotas() -> None:
    # A plain ElasticQuota (no tree key) with a reserved name is Koordinator's quota of that
    # name: the flat, per-namespace rules leave it alone.
    plain = eq(DEFAULT, maximum=4, namespace="ops")
    assert is_tree_quota(plain)
    assert quota_seen(DEFAULT, plain).tree
    assert not is_tree_quota(eq("team", maximum=4))


def test_a_stored_default_quota_has_its_max_honoured() -> None:
    tree = build_tree([eq(DEFAULT, maximum=4, namespace="ops")])
    assert tree.outside[DEFAULT].max == {GPU: 4}
    assert tree.outside[DEFAULT].namespace == "ops"
    assert tree.outside[SYSTEM].max == {}  # implicit: no max
    assert not tree.quotas
    assert not tree.refused


def test_the_scheduler_arguments_give_the_max_a_stored_quota_overrides() -> None:
    args = outside_max_args({"defaultQuotaGroupMax": {GPU: 3}, "systemQuotaGroupMax": {"cpu": "2"}})
    assert args == {DEFAULT: {GPU: 3}, SYSTEM: {"cpu": 2000}}
    tree = build_tree([], args)
    assert (tree.outside[DEFAULT].max, tree.outside[SYSTEM].max) == ({GPU: 3}, {"cpu": 2000})
    # As in Koordinator, the stored object's max is the one used.
    tree = build_tree([eq(DEFAULT, maximum=5, namespace="ops")], args)
    assert tree.outside[DEFAULT].max == {GPU: 5}
    with pytest.raises(ValueError, match="defaultQuotaGroupMax"):
        outside_max_args({"defaultQuotaGroupMax": {GPU: "-1"}})
    with pytest.raises(ValueError, match="systemQuotaGroupMax"):
        outside_max_args({"systemQuotaGroupMax": "lots"})


def test_koordinators_own_root_object_is_the_root() -> None:
    root = eq(ROOT, namespace="koordinator-system", labels={
        LABEL_IS_PARENT: "true", LABEL_ALLOW_LENT_RESOURCE: "false", LABEL_PARENT: "",
    })  # fmt: skip
    tree = build_tree([root, *department()])
    assert tree.root is not None
    assert tree.root.namespace == "koordinator-system"
    assert not tree.refused
    assert tree.children[ROOT] == ["research"]


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (eq(ROOT, maximum=10), "its min and max are not honoured"),
        (eq(ROOT, labels={LABEL_PARENT: "other"}), "must be empty"),
        (eq(ROOT, labels={LABEL_IS_PARENT: "false"}), 'must be "true"'),
        (eq(DEFAULT, minimum=1, maximum=4), "gets no min"),
        (eq(SYSTEM, labels={LABEL_PARENT: "research"}), f"must be {ROOT} or absent"),
        (eq(DEFAULT, labels={LABEL_IS_PARENT: "true"}), "holds pods, not quotas"),
        (eq(DEFAULT, annotations={ANNOTATION_NAMESPACES: '["a"]'}), "not supported by Berth"),
        (eq(SYSTEM, annotations={"berth.io/weight": "2"}), "it shares nothing"),
    ],
)
def test_what_a_reserved_quota_cannot_honour_refuses_it(obj: dict[str, Any], why: str) -> None:
    with pytest.raises(TreeError, match=why):
        parse_reserved(obj)
    tree = build_tree([obj])
    assert why in tree.refused[(obj["metadata"]["namespace"], obj["metadata"]["name"])]


def test_a_refused_reserved_quota_leaves_its_namespace_alone() -> None:
    # The refused default quota object governs no namespace: pods of "ops" are still the
    # (implicit) default quota's, not refused with it.
    tree = build_tree([eq(DEFAULT, minimum=1, namespace="ops")])
    assert tree.resolve("ops", {}) is None
    assert tree.outside_quota("ops", {}, flat=False) == DEFAULT


def test_two_stored_default_quotas_the_older_wins() -> None:
    older = eq(DEFAULT, maximum=4, namespace="ops", created="2026-01-01T00:00:00Z")
    newer = eq(DEFAULT, maximum=9, namespace="dev", created="2026-02-01T00:00:00Z")
    tree = build_tree([newer, older])
    assert tree.outside[DEFAULT].max == {GPU: 4}
    assert "already has this name" in tree.refused[("dev", DEFAULT)]


def test_no_quota_hangs_from_the_default_or_system_quota() -> None:
    child = eq("team", 1, 2, labels={LABEL_PARENT: SYSTEM})
    tree = build_tree([child])
    assert "holds pods, not quotas" in tree.refused[("team", "team")]
    assert "holds pods, not quotas" in (review_quota(CREATE, None, child, []) or "")


def test_the_webhook_reviews_a_reserved_quota_as_that_quota() -> None:
    ok = eq(DEFAULT, maximum=4, namespace="ops")
    assert review_quota(CREATE, None, ok, []) is None
    assert "gets no min" in (review_quota(CREATE, None, eq(DEFAULT, 1, 4), []) or "")
    assert "known by name" in (
        review_quota(CREATE, None, eq(DEFAULT, maximum=2, namespace="dev"), [ok]) or ""
    )
    team = eq("team", 1, 2, annotations={ANNOTATION_NAMESPACES: '["batch"]'})
    system = eq(SYSTEM, namespace="ops", annotations={ANNOTATION_NAMESPACES: '["batch"]'})
    assert "namespace batch already belongs to ElasticQuota team" in (
        review_quota(CREATE, None, system, [team]) or ""
    )


# -- which pods are the default and system quotas' ---------------------------------------


def test_which_pods_count_in_the_default_and_system_quotas() -> None:
    system = eq(SYSTEM, namespace="ops", annotations={ANNOTATION_NAMESPACES: '["kube-system"]'})
    tree = build_tree([*department(), eq("solo", 1, 2, labels={LABEL_IS_PARENT: "false"}), system])

    def where(namespace: str, labels: dict[str, str] | None = None, flat: bool = False) -> Any:
        labels = labels or {}
        return tree.resolve(namespace, labels) or tree.outside_quota(namespace, labels, flat)

    assert where("team-a") == "team-a"
    assert where("solo") == "solo"
    assert where("elsewhere") == DEFAULT  # no quota at all
    assert where("research") == DEFAULT  # a parent's namespace: a parent runs no pods
    assert where("flat", flat=True) is None  # a flat quota's: outside the tree, not default
    assert where("kube-system") == SYSTEM  # listed by the system quota
    assert where("elsewhere", {LABEL_NAME: SYSTEM}) == SYSTEM
    # The label wins over the namespace's flat quota, as over its tree quota.
    assert where("flat", {LABEL_NAME: DEFAULT}, flat=True) == DEFAULT
    assert where("team-a", {LABEL_NAME: DEFAULT}) == DEFAULT
    with pytest.raises(TreeError, match="the root of the quota tree"):
        tree.resolve("elsewhere", {LABEL_NAME: ROOT})
    with pytest.raises(TreeError, match="no min to keep a non-preemptible pod"):
        tree.resolve("elsewhere", {LABEL_NAME: DEFAULT, LABEL_PREEMPTIBLE: "false"})
    assert "the root of the quota tree" in (review_pod({LABEL_NAME: ROOT}, []) or "")
    assert review_pod({LABEL_NAME: SYSTEM}, []) is None


# -- the root hands down what they leave -------------------------------------------------


def test_worked_example_default_and_system_pods_lower_the_runtimes() -> None:
    """10 GPUs; every team wants 8. Alone, research gets min(10, 16, its max 8) = 8 and the
    teams 3 and 5 (the walk-through). With pods of no quota holding 3 GPUs (a fourth
    waiting, which holds nothing) and a system pod holding 1, the root hands down
    10 - 3 - 1 = 6: research gets 6; the teams their mins 2 + 2 and the 2 left by weight
    8 : 16 (0.67 and 1.33, rounded to 0 and 1, the leftover unit to team-a's larger
    remainder): 3 and 3."""
    tree = build_tree(department())
    teams = [TreePod("team-a", {GPU: 1}, False) for _ in range(8)]
    teams += [TreePod("team-b", {GPU: 1}, False) for _ in range(8)]
    alone = tree_state(tree, teams, {GPU: 10})
    assert alone.runtime == {"research": {GPU: 8}, "team-a": {GPU: 3}, "team-b": {GPU: 5}}
    outside = [TreePod(DEFAULT, {GPU: 1}, True) for _ in range(3)]
    outside += [TreePod(DEFAULT, {GPU: 1}, False), TreePod(SYSTEM, {GPU: 1}, True)]
    state = tree_state(tree, teams + outside, {GPU: 10})
    assert state.handed_down == {GPU: 6}
    assert state.runtime == {"research": {GPU: 6}, "team-a": {GPU: 3}, "team-b": {GPU: 3}}
    assert state.outside_used == {DEFAULT: {GPU: 3}, SYSTEM: {GPU: 1}}
    assert state.outside_request == {DEFAULT: {GPU: 4}, SYSTEM: {GPU: 1}}


def test_what_is_handed_down_never_goes_below_zero() -> None:
    assert handed_down({"cpu": 4000, GPU: 2}, [{"cpu": 1000}, {GPU: 5, "memory": 1}]) == {
        "cpu": 3000,
        GPU: 0,
    }


@given(
    st.integers(0, 100),
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 40), st.integers(0, 40)),
             min_size=1, max_size=5),
    st.integers(0, 60),
    st.integers(0, 60),
)  # fmt: skip
def test_the_root_never_hands_down_what_default_and_system_pods_hold(
    cluster: int, teams: list[tuple[int, int, int]], default_used: int, system_used: int
) -> None:
    """Random quotas under the root, random use of the default and system quotas: the
    runtimes of the root's children add up to no more than the cluster less what those
    two hold, and none exceeds its max."""
    objects = [eq(f"t{i}", m, m + extra, labels={LABEL_IS_PARENT: "false"})
               for i, (m, extra, _) in enumerate(teams)]  # fmt: skip
    tree = build_tree(objects)
    pods = [TreePod(f"t{i}", {GPU: 1}, False) for i, (*_, want) in enumerate(teams)
            for _ in range(want)]  # fmt: skip
    pods += [TreePod(DEFAULT, {GPU: 1}, True)] * default_used
    pods += [TreePod(SYSTEM, {GPU: 1}, True)] * system_used
    state = tree_state(tree, pods, {GPU: cluster})
    left = max(cluster - default_used - system_used, 0)
    assert state.handed_down == {GPU: left}
    assert sum(state.runtime[name][GPU] for name in tree.children[ROOT]) <= left
    for name, quota in tree.quotas.items():
        assert state.runtime[name][GPU] <= quota.max[GPU]


# -- their max ---------------------------------------------------------------------------


def test_a_default_quota_pod_is_checked_against_its_max() -> None:
    tree = build_tree([eq(DEFAULT, maximum=4, namespace="ops")])
    state = tree_state(tree, [TreePod(DEFAULT, {GPU: 1, "pods": 1}, True)] * 3, {GPU: 10})
    assert check_outside(tree, state, DEFAULT, {GPU: 1, "pods": 1}) is None
    rejection = check_outside(tree, state, DEFAULT, {GPU: 2, "pods": 1})
    assert rejection is not None
    assert rejection.message() == (
        f"Insufficient quotas, quotaName: {DEFAULT}, runtime: map[nvidia.com/gpu:4], "
        "used: map[nvidia.com/gpu:3], pod's request: map[nvidia.com/gpu:2 pods:1], "
        "exceedDimensions: [nvidia.com/gpu]"
    )
    # No max (the default): nothing is refused.
    assert check_outside(build_tree([]), state, DEFAULT, {GPU: 100}) is None


# -- status and the tree drawn -----------------------------------------------------------


def stored() -> list[dict[str, Any]]:
    return [
        *department(),
        eq(ROOT, namespace="koordinator-system", labels={LABEL_IS_PARENT: "true"}),
        eq(DEFAULT, maximum=6, namespace="koordinator-system"),
        eq(SYSTEM, namespace="koordinator-system"),
        {"metadata": {"name": "flat", "namespace": "flat"}, "spec": {"max": {GPU: "4"}}},
    ]


def cluster_pods() -> list[PodSeen]:
    pods = [PodSeen("team-a", {}, {GPU: 1}, False) for _ in range(8)]
    pods += [PodSeen("team-b", {}, {GPU: 1}, False) for _ in range(8)]
    pods += [PodSeen("batch", {}, {GPU: 1}, True) for _ in range(3)]  # no quota
    pods += [PodSeen("batch", {LABEL_NAME: SYSTEM}, {GPU: 1}, True)]
    pods += [PodSeen("flat", {}, {GPU: 2}, True)]  # a flat quota's: not the default's
    return pods


def test_stored_root_default_and_system_quotas_get_their_status() -> None:
    patches = {p.name: p for p in desired_tree(stored(), cluster_pods(), {GPU: 12}, {"flat"})}
    default = patches[DEFAULT]
    assert default.status["used"] == {GPU: "3"}
    assert default.status["runtime"] == {GPU: "6"}  # its max, as in Koordinator
    assert default.status["conditions"][0]["reason"] == "OutsideTree"
    assert json.loads(default.annotations[ANNOTATION_RUNTIME]) == {GPU: "6"}
    assert patches[SYSTEM].status["used"] == {GPU: "1"}
    # 12 GPUs less the flat quota's 2, the default's 3 and the system's 1: 6 handed down.
    root = patches[ROOT]
    assert root.status["runtime"] == {GPU: "6"}
    assert root.status["used"] == {GPU: "4"}  # the tree's pods all wait
    assert root.status["request"] == {GPU: "20"}
    assert patches["research"].status["runtime"] == {GPU: "6"}
    assert "flat" not in patches  # the namespace's flat rules write its status


def test_berth_quota_tree_shows_the_default_and_system_quotas_under_the_root() -> None:
    pods = [
        {"metadata": {"name": f"p{i}", "namespace": "batch"},
         "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {GPU: "1"}}}]},
         "status": {"phase": "Running"}}
        for i in range(3)
    ]  # fmt: skip
    rows, _ = tree_rows(department(), pods, {DEFAULT: {GPU: 5}})
    default = [r for r in rows if r["name"] == DEFAULT]
    assert [(r["resource"], r["max"], r["runtime"], r["used"], r["depth"]) for r in default] == [
        (GPU, "5", "5", "3", 1)
    ]
    assert not [r for r in rows if r["name"] == SYSTEM]  # holds nothing, not stored
    lines = render(department(), pods).splitlines()
    assert lines[1].strip() == ROOT
    assert lines[-1].split()[:2] == ["└─", DEFAULT]
    assert lines[-1].split()[2:] == [GPU, "0", "unlimited", "3", "unlimited", "3", "-", "-"]
    # A cluster without tree quotas draws no tree, whatever its pods.
    assert render([], pods).startswith("No ElasticQuotas in the quota tree")


def test_the_objects_made_in_quota_group_namespace_are_koordinators_and_read_as_such() -> None:
    """What Berth makes for ``quotaGroupNamespace`` is what Koordinator's plugin makes,
    and Berth's own reading of the names accepts it: the root lends nothing and hangs from
    nothing, the default quota takes its argument's max, the system quota none."""
    args = {"quotaGroupNamespace": "koordinator-system", "defaultQuotaGroupMax": {"cpu": "64"}}
    namespace = quota_group_namespace(args)
    assert namespace == "koordinator-system"
    objects = reserved_quota_objects(namespace, args)
    assert [o["metadata"]["name"] for o in objects] == [ROOT, DEFAULT, SYSTEM]
    assert {o["metadata"]["namespace"] for o in objects} == {"koordinator-system"}
    assert objects[0]["metadata"]["labels"] == {
        LABEL_IS_PARENT: "true",
        LABEL_ALLOW_LENT_RESOURCE: "false",
        LABEL_PARENT: "",
    }
    read = [parse_reserved(o) for o in objects]
    assert read[1].max == {"cpu": 64000}
    assert read[2].max == {}
    assert quota_group_namespace({}) is None
    with pytest.raises(ValueError, match="quotaGroupNamespace: 'Koordinator_System'"):
        quota_group_namespace({"quotaGroupNamespace": "Koordinator_System"})
