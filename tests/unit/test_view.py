"""What counts on a node in the cluster view: bound, assumed, nominated, finished and
deleted pods, nodes that come and go, resource columns that appear mid-way.
"""

from __future__ import annotations

import pytest

from berth.scheduler.framework.clusterevents import POD, ActionType, ClusterEvent
from berth.scheduler.framework.messages import NO_NODES
from tests.unit.scheduler_fixtures import (
    EPOCH,
    Env,
    host_port,
    info,
    make_env,
    node,
    pod,
)

Mi = 1024**2
Gi = 1024**3


# -- what counts on a node ---------------------------------------------------------------------


def nominated_cluster(priority: int) -> Env:
    return make_env(
        node("n1"),
        pod("preemptor", "3", priority=priority, nominated="n1", created=1),
    )


@pytest.mark.parametrize(("nominated_priority", "fits"), [(100, False), (200, False), (50, True)])
def test_nominated_pods_hold_capacity_for_equal_or_higher_priority(
    nominated_priority: int, fits: bool
) -> None:
    env = nominated_cluster(nominated_priority)
    wanted = pod("p", "2", priority=100)
    if fits:
        assert env.node_for(wanted) == "n1"
    else:
        assert env.message(wanted) == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_nominated_pod_does_not_hold_capacity_against_itself() -> None:
    env = nominated_cluster(100)
    assert env.node_for(env.view.pods["uid-default-preemptor"].raw) == "n1"


def test_nominated_pods_take_a_pod_slot() -> None:
    env = make_env(node("n1", pods="1"), pod("preemptor", "1", priority=100, nominated="n1"))
    assert env.message(pod("p", "1", priority=100)) == "0/1 nodes are available: 1 Too many pods."


def test_nominated_pods_hold_their_host_ports() -> None:
    # kube-scheduler adds nominated pods to the node (addNominatedPods) before running every
    # filter, NodePorts included.
    env = make_env(
        node("n1"), pod("preemptor", "1", priority=100, nominated="n1", ports=[host_port(80)])
    )
    assert env.message(pod("p", "1", priority=100, ports=[host_port(80)])) == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    )


def test_nomination_ends_when_the_pod_is_bound() -> None:
    env = nominated_cluster(100)
    env.events.on_pod("MODIFIED", pod("preemptor", "3", priority=100, node_name="n1", created=1))
    # Counted once, as a bound pod: 3 of 4 cpus.
    assert env.node_for(pod("p", "1", priority=100)) == "n1"
    assert (
        env.message(pod("p", "2", priority=100)) == "0/1 nodes are available: 1 Insufficient cpu."
    )


def test_a_late_nomination_of_an_assumed_pod_does_not_count_it_twice() -> None:
    """The preemptor is placed (assumed, counted on n1) before the watch brings back the
    nomination an earlier attempt wrote: that version of the pod holds nothing more. Its
    3 cpus count once, so a pod of 1 cpu still fits beside it."""
    env = make_env(node("n1"))
    preemptor = pod("preemptor", "3", priority=100, created=1)
    env.events.on_pod("ADDED", preemptor)
    env.view.assume(info(preemptor), "n1")
    env.events.on_pod("MODIFIED", pod("preemptor", "3", priority=100, nominated="n1", created=1))
    assert env.node_for(pod("p", "1", priority=100)) == "n1"


def test_pods_of_other_schedulers_count() -> None:
    env = make_env(node("n1"), pod("other", "3", node_name="n1", scheduler="default-scheduler"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_do_not_count(phase: str) -> None:
    env = make_env(node("n1"), pod("done", "4", node_name="n1", phase=phase))
    assert env.node_for(pod("p", "4")) == "n1"


def test_a_pod_that_finishes_frees_its_node() -> None:
    running = pod("job", "4", node_name="n1")
    env = make_env(node("n1"), running)
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.events.on_pod("MODIFIED", pod("job", "4", node_name="n1", phase="Succeeded"))
    assert env.node_for(pod("p", "4")) == "n1"


def test_terminating_pods_still_count() -> None:
    env = make_env(node("n1"), pod("leaving", "4", node_name="n1", deleting=True))
    assert env.message(pod("p", "1")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_deleted_pod_frees_its_node() -> None:
    bound = pod("a", "4", node_name="n1")
    env = make_env(node("n1"), bound)
    env.events.on_pod("DELETED", bound)
    assert env.node_for(pod("p", "4")) == "n1"


def test_assume_then_forget() -> None:
    env = make_env(node("n1"))
    chosen = info(pod("first", "3"))
    env.view.assume(chosen, "n1")
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.forget(chosen)
    assert env.node_for(pod("p", "2")) == "n1"


def test_assumed_pod_counted_once_when_the_binding_shows_up() -> None:
    env = make_env(node("n1"))
    raw = pod("first", "3")
    env.view.assume(info(raw), "n1")
    env.events.on_pod("MODIFIED", raw)  # the watch still shows it pending
    env.events.on_pod("MODIFIED", pod("first", "3", node_name="n1"))
    assert env.node_for(pod("p", "1")) == "n1"
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.view.forget(info(raw))  # too late to forget: it is bound
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_counted_pod_is_its_latest_version() -> None:
    """As in kube-scheduler's cache (UpdatePod: remove, then add), a node holds each of
    its pods as the watch shows it now, counted once."""
    env = make_env(node("n1"), pod("a", "3", node_name="n1", labels={"v": "1"}))
    env.events.on_pod(
        "MODIFIED", pod("a", "3", node_name="n1", labels={"v": "2"}, started=60, deleting=True)
    )
    [counted] = env.view.pods_on("n1")
    assert counted is env.view.pods["uid-default-a"]
    assert counted.labels == {"v": "2"}
    assert counted.deleting
    assert counted.started == EPOCH.timestamp() + 60
    assert env.node_for(pod("p", "1")) == "n1"
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_bound_pod_replaces_the_version_assumed() -> None:
    env = make_env(node("n1"))
    raw = pod("first", "3")
    env.view.assume(info(raw), "n1")
    env.events.on_pod("MODIFIED", pod("first", "3", node_name="n1"))
    [counted] = env.view.pods_on("n1")
    assert counted is env.view.pods["uid-default-first"]
    assert counted.node_name == "n1"


def test_a_resized_pod_counts_its_new_requests_once() -> None:
    env = make_env(node("n1"), pod("a", "3", node_name="n1"))
    env.events.on_pod("MODIFIED", pod("a", "1", node_name="n1", labels={"v": "2"}))
    [counted] = env.view.pods_on("n1")
    assert counted.labels == {"v": "2"}
    assert env.node_for(pod("p", "3")) == "n1"
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_status_update_leaves_what_is_derived_from_the_nodes_pods_alone() -> None:
    """Status updates (the kubelet's, most of a pod's events) do not move the row's
    version, so what plugins derive per row is not recomputed; a change of labels or
    the start of termination does."""
    env = make_env(node("n1"), pod("a", "1", node_name="n1"))
    versions = env.view.nodes.row_versions
    before = int(versions[0])
    ready = pod("a", "1", node_name="n1", started=30)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    env.events.on_pod("MODIFIED", ready)
    assert int(versions[0]) == before
    env.events.on_pod("MODIFIED", pod("a", "1", node_name="n1", labels={"v": "2"}))
    assert int(versions[0]) > before
    before = int(versions[0])
    env.events.on_pod("MODIFIED", pod("a", "1", node_name="n1", labels={"v": "2"}, deleting=True))
    assert int(versions[0]) > before


def test_the_cluster_event_a_bound_pods_update_amounts_to() -> None:
    env = make_env(node("n1"), pod("a", "3", node_name="n1"))
    assert env.view.on_pod("MODIFIED", pod("a", "3", node_name="n1", started=30))[1] is None
    relabelled = pod("a", "3", node_name="n1", labels={"v": "2"})
    assert env.view.on_pod("MODIFIED", relabelled)[1] == ClusterEvent(
        POD, ActionType.UPDATE_POD_LABEL
    )
    resized = pod("a", "1", node_name="n1", labels={"v": "3"})
    assert env.view.on_pod("MODIFIED", resized)[1] == ClusterEvent(
        POD, ActionType.UPDATE_POD_SCALE_DOWN
    )


def test_node_deleted_and_added_again_keeps_counting_its_pods() -> None:
    n1 = node("n1")
    env = make_env(n1, pod("a", "3", node_name="n1"))
    env.events.on_node("DELETED", n1)
    assert env.message(pod("p", "2")) == NO_NODES
    env.events.on_node("ADDED", n1)
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    assert env.node_for(pod("p", "1")) == "n1"


def test_pods_seen_before_their_node_count_when_it_appears() -> None:
    env = make_env(pod("early", "3", node_name="n1"))
    env.add(node("n1"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_pods_seen_before_their_node_count_in_their_latest_version() -> None:
    env = make_env(pod("a", "3", node_name="n1"))
    env.events.on_pod("MODIFIED", pod("a", "3", node_name="n1", labels={"v": "2"}))
    env.add(node("n1"))
    [counted] = env.view.pods_on("n1")
    assert counted.labels == {"v": "2"}
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_node_slot_reuse_does_not_inherit_the_old_pods() -> None:
    old = node("old")
    env = make_env(old, pod("a", "4", node_name="old"))
    env.events.on_node("DELETED", old)
    env.add(node("new"))
    assert env.node_for(pod("p", "4")) == "new"


def test_node_update_changes_allocatable_and_keeps_pods() -> None:
    env = make_env(node("n1", cpu="2"), pod("a", "1", node_name="n1"))
    assert env.message(pod("p", "2")) == "0/1 nodes are available: 1 Insufficient cpu."
    env.events.on_node("MODIFIED", node("n1", cpu="4"))
    assert env.node_for(pod("p", "2")) == "n1"
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_extended_resource_column_appearing_mid_way() -> None:
    env = make_env(node("cpu-only"), pod("a", "3", node_name="cpu-only"))
    env.add(node("gpu", extra={"nvidia.com/gpu": "2"}))
    gpu_pod = pod("trainer", "1", requests={"nvidia.com/gpu": "1"})
    assert env.node_for(gpu_pod) == "gpu"
    env.view.assume(info(gpu_pod), "gpu")
    assert env.message(pod("p", "1", requests={"nvidia.com/gpu": "2"})) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    # cpu-only keeps its 3 cpus requested across the new column.
    assert env.feasible(pod("p", "2")) == ["gpu"]


def test_bound_pod_with_a_resource_no_node_reports() -> None:
    env = make_env(node("n1"), pod("a", "1", requests={"example.com/foo": "1"}, node_name="n1"))
    assert env.message(pod("p", "1", requests={"example.com/foo": "1"})) == (
        "0/1 nodes are available: 1 Insufficient example.com/foo."
    )
    assert env.message(pod("p", "4")) == "0/1 nodes are available: 1 Insufficient cpu."


def test_resource_never_seen_before_with_nominated_pods_around() -> None:
    env = make_env(node("n1"), pod("preemptor", "1", priority=10, nominated="n1"))
    wanted = pod("p", "1", priority=10, requests={"example.com/dongle": "1"})
    assert env.message(wanted) == "0/1 nodes are available: 1 Insufficient example.com/dongle."
