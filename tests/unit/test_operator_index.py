"""The operators' pods and nodes: the index over watch events, the shared informers'
fan-out, and each operator's marks and readiness, without a cluster."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from berth.api.podgroup import POD_GROUP_LABEL
from berth.operators.cluster import UNLISTED_RETRY, Followed
from berth.operators.elasticquota import TREE, Quotas, QuotaTree
from berth.operators.index import Index
from berth.operators.nodemetric import NodeMetrics
from berth.operators.podgroup import PodGroups
from berth.operators.reservation import Reservations
from berth.operators.worker import wall_clock
from berth.reservation.owners import ALLOCATED_ANNOTATION

Json = dict[str, Any]
T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def by_label(body: Mapping[str, Any]) -> dict[str, str]:
    """Pods under their ``team`` label, the value their phase."""
    meta = body.get("metadata") or {}
    team = (meta.get("labels") or {}).get("team")
    return {team: (body.get("status") or {}).get("phase", "")} if team else {}


def pod(
    name: str,
    *,
    namespace: str = "ns",
    team: str | None = None,
    phase: str = "Pending",
    node: str | None = None,
    cpu: str = "1",
    annotations: Json | None = None,
    group: str | None = None,
) -> Json:
    labels = {} if team is None else {"team": team}
    if group is not None:
        labels[POD_GROUP_LABEL] = group
    spec: Json = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str, *, labels: Json | None = None, cpu: str = "4", ready: str = "True") -> Json:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {}},
        "status": {
            "allocatable": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


# The index


def test_an_object_contributes_under_its_keys_and_each_key_collects_every_object() -> None:
    index = Index(by_label)
    assert index.observe("ADDED", pod("a", team="red")) == {"red"}
    assert index.observe("ADDED", pod("b", team="red", phase="Running")) == {"red"}
    assert index.observe("ADDED", pod("c")) == set()
    assert sorted(index.get("red", ())) == ["Pending", "Running"]
    assert "red" in index
    assert "blue" not in index
    assert list(index.keys()) == ["red"]
    assert index.get("blue", ()) == ()
    assert list(index["red"]) == ["Pending", "Running"]


def test_an_update_replaces_the_objects_contribution_and_says_which_keys_changed() -> None:
    index = Index(by_label)
    index.observe("ADDED", pod("a", team="red"))
    # Unchanged value: nothing to decide again.
    assert index.observe("MODIFIED", pod("a", team="red")) == set()
    assert index.observe("MODIFIED", pod("a", team="red", phase="Running")) == {"red"}
    assert list(index.get("red", ())) == ["Running"]
    # Moved: both the key it left and the key it joined changed.
    assert index.observe("MODIFIED", pod("a", team="blue")) == {"red", "blue"}
    assert "red" not in index
    assert list(index.get("blue", ())) == ["Pending"]


def test_a_deletion_removes_the_objects_contributions_only() -> None:
    index = Index(by_label)
    index.observe("ADDED", pod("a", team="red"))
    index.observe("ADDED", pod("b", team="red"))
    assert index.observe("DELETED", pod("a", team="red")) == {"red"}
    assert len(index.get("red", ())) == 1
    assert index.observe("DELETED", pod("b", team="red")) == {"red"}
    assert not index
    assert index.observe("DELETED", pod("never-seen", team="red")) == set()


def test_objects_of_the_same_name_in_two_namespaces_are_two_objects() -> None:
    index = Index(by_label)
    index.observe("ADDED", pod("a", namespace="one", team="red"))
    index.observe("ADDED", pod("a", namespace="two", team="red"))
    index.observe("DELETED", pod("a", namespace="one", team="red"))
    assert len(index.get("red", ())) == 1


def test_a_value_of_none_counts_as_a_contribution() -> None:
    index: Index[str, None] = Index(lambda body: {str(body["metadata"]["name"]): None})
    assert index.observe("ADDED", node("n1")) == {"n1"}
    assert index.observe("MODIFIED", node("n1", cpu="8")) == set()
    assert "n1" in index
    assert index.observe("DELETED", node("n1")) == {"n1"}
    assert "n1" not in index


# The shared informers


def followed() -> Followed:
    async def never(**_: Any) -> Any:
        raise AssertionError("no I/O in these tests")

    return Followed("pods", never)


def test_a_late_subscriber_is_handed_every_object_already_seen_then_every_event() -> None:
    pods = followed()
    early: list[tuple[str, str]] = []
    pods.subscribe(lambda kind, obj: early.append((kind, obj["metadata"]["name"])))
    pods.informer.handler("ADDED", pod("a"))
    pods.informer.handler("ADDED", pod("b"))
    pods.informer.known = {"ns/a": pod("a"), "ns/b": pod("b")}  # as the informer keeps them
    late: list[tuple[str, str]] = []
    pods.subscribe(lambda kind, obj: late.append((kind, obj["metadata"]["name"])))
    pods.informer.handler("DELETED", pod("a"))
    assert early == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert late == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


def test_a_failing_subscriber_keeps_the_event_from_no_other() -> None:
    pods = followed()
    seen: list[str] = []

    def broken(kind: str, obj: Json) -> None:
        raise RuntimeError("bug")

    pods.subscribe(broken)
    pods.subscribe(lambda kind, obj: seen.append(kind))
    pods.informer.handler("ADDED", pod("a"))
    assert seen == ["ADDED"]


def test_a_kind_is_listed_once_its_informer_has_synced() -> None:
    pods = followed()
    assert not pods.listed()
    pods.informer.synced.set()
    assert pods.listed()


# The operators' marks and readiness


def marked(worker: Any) -> set[str]:
    keys = set(worker._marked)
    worker._marked.clear()
    return keys


def not_listed() -> bool:
    return False


class NoWrites:
    """A writer that fails a test on any write."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"nothing may be written before the pods are listed: {name}")


async def test_a_namespace_is_marked_only_when_its_counted_pods_change() -> None:
    quotas = Quotas(cast(Any, None), cast(Any, {}), not_listed)
    quotas.pod_changed("ADDED", pod("a", node="n1", phase="Running"))
    assert marked(quotas.worker) == {"ns"}
    # A status change that leaves the requests as they were decides nothing again.
    running = pod("a", node="n1", phase="Running")
    running["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    quotas.pod_changed("MODIFIED", running)
    assert marked(quotas.worker) == set()
    quotas.pod_changed("DELETED", running)
    assert marked(quotas.worker) == {"ns"}
    quotas.writer = cast(Any, NoWrites())
    before = wall_clock()
    retry = await quotas.reconcile("ns")
    assert retry is not None
    assert before + UNLISTED_RETRY <= retry <= wall_clock() + UNLISTED_RETRY


async def test_the_tree_waits_for_pods_and_nodes_and_is_marked_by_what_it_counts() -> None:
    tree = QuotaTree(cast(Any, NoWrites()), cast(Any, {TREE: [{}]}), cast(Any, {}), not_listed)
    tree.node_changed("ADDED", node("n1"))
    assert marked(tree.worker) == {TREE}
    tree.node_changed("MODIFIED", node("n1", ready="False"))  # allocatable as it was
    assert marked(tree.worker) == set()
    tree.node_changed("MODIFIED", node("n1", cpu="8"))
    assert marked(tree.worker) == {TREE}
    tree.pod_changed("ADDED", pod("a"))
    assert marked(tree.worker) == {TREE}
    assert await tree.reconcile(TREE) is not None  # nothing written: not listed


async def test_a_group_is_marked_by_its_labelled_members_only() -> None:
    groups = PodGroups(cast(Any, None), cast(Any, {"ns/g": [{}]}), not_listed)
    groups.member_changed("ADDED", pod("loner"))
    assert marked(groups.worker) == set()
    groups.member_changed("ADDED", pod("a", group="g"))
    assert marked(groups.worker) == {"ns/g"}
    groups.member_changed("MODIFIED", pod("a", group="g", node="n1"))
    assert marked(groups.worker) == {"ns/g"}
    groups.member_changed("MODIFIED", pod("a", group="g", node="n1"))
    assert marked(groups.worker) == set()
    groups.writer = cast(Any, NoWrites())
    assert await groups.reconcile("ns/g") is not None


def reservation(name: str, node_name: str) -> Any:
    status = type("Status", (), {"node_name": node_name})()
    return type("Reservation", (), {"status": status})()


async def test_a_reservation_is_marked_by_its_annotated_pods_and_its_nodes_deletion() -> None:
    objects = {"r1": [reservation("r1", "n1")], "r2": [reservation("r2", "n2")]}
    state = Reservations(cast(Any, None), cast(Any, objects), not_listed, timedelta(hours=1))
    state.writer = cast(Any, NoWrites())
    state.pod_event("ADDED", pod("plain", node="n1"))
    assert marked(state.worker) == set()
    owner = pod("a", node="n1", annotations={ALLOCATED_ANNOTATION: json.dumps({"name": "r1"})})
    state.pod_event("ADDED", owner)
    assert marked(state.worker) == {"r1"}
    assert len(state.owners.get("r1", ())) == 1
    # Marked on every event of an annotated pod, as before.
    state.pod_event("MODIFIED", owner)
    assert marked(state.worker) == {"r1"}
    state.node_event("ADDED", node("n1"))
    state.node_event("ADDED", node("n2"))
    assert marked(state.worker) == set()
    assert "n1" in state.nodes
    state.node_event("DELETED", node("n2"))
    assert marked(state.worker) == {"r2"}
    assert "n2" not in state.nodes
    # Not listed yet: no decision, so a node not seen yet never fails a reservation.
    state.worker.clock = lambda: T0
    assert await state.reconcile("r2") == T0 + UNLISTED_RETRY


async def test_a_node_is_marked_for_its_nodemetric_only_when_its_uid_or_labels_change() -> None:
    state = NodeMetrics(cast(Any, object()), "berth-system", not_listed)
    state.node_changed("ADDED", node("n1"))
    assert marked(state.worker) == {"n1"}
    state.node_changed("MODIFIED", node("n1", ready="False", cpu="8"))  # a status report
    assert marked(state.worker) == set()
    state.node_changed("MODIFIED", node("n1", labels={"pool": "gpu"}))
    assert marked(state.worker) == {"n1"}
    assert list(state.nodes.keys()) == ["n1"]
    # NodeMetrics listed, nodes not: a NodeMetric whose node is not seen yet is kept.
    state._metric_watch.settled.set()
    state.metrics.observe("ADDED", {"metadata": {"name": "n2"}, "spec": {}})
    state.writer = cast(Any, NoWrites())
    assert await state.reconcile("n2") is not None
