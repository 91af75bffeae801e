"""NodeVolumeLimits: a CSI driver's attach limit per node, from the node's CSINode."""

from __future__ import annotations

from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.nodevolumelimits import MAX_VOLUME_COUNT
from tests.unit.scheduler_fixtures import (
    csi_node,
    info,
    make_env,
    node,
    pod,
    pv,
    pvc,
    storage_class,
    with_volumes,
)

DRIVER = "disk.csi.example.com"


def csi_claim(name: str, handle: str) -> list[dict[str, object]]:
    return [
        pvc(name, volume=f"pv-{name}"),
        pv(f"pv-{name}", claim=("default", name), csi=(DRIVER, handle)),
    ]


def test_a_node_at_its_drivers_limit_takes_no_new_volume() -> None:
    env = make_env(
        node("n1"),
        node("n2"),
        csi_node("n1", {DRIVER: 1}),
        csi_node("n2", {DRIVER: 2}),
        *csi_claim("one", "h1"),
        *csi_claim("two", "h2"),
        with_volumes(pod("holder", "100m", node_name="n1"), "one"),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "two")) == ["n2"]
    # The volume the node already has attached is not counted twice.
    assert env.feasible(with_volumes(pod("q", "100m"), "one")) == ["n1", "n2"]


def test_over_the_limit_everywhere() -> None:
    env = make_env(
        node("n1"), csi_node("n1", {DRIVER: 1}), *csi_claim("one", "h1"), *csi_claim("two", "h2")
    )
    assert env.message(with_volumes(pod("p", "100m"), "one", "two")) == (
        f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT}."
    )


def test_nodes_without_a_csinode_or_limit_take_any_number() -> None:
    env = make_env(
        node("n1"),
        node("n2"),
        csi_node("n2", {"other.csi.example.com": 1}),
        *csi_claim("one", "h1"),
        *csi_claim("two", "h2"),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "one", "two")) == ["n1", "n2"]


def test_an_unbound_claim_counts_against_its_class_provisioner() -> None:
    env = make_env(
        node("n1"),
        csi_node("n1", {DRIVER: 1}),
        storage_class("fast", provisioner=DRIVER),
        pvc("new", storage_class="fast"),
        *csi_claim("one", "h1"),
        with_volumes(pod("holder", "100m", node_name="n1"), "one"),
    )
    assert env.message(with_volumes(pod("p", "100m"), "new")).endswith(f"1 {MAX_VOLUME_COUNT}.")


def test_an_inline_in_tree_disk_counts_once_the_node_migrated_it() -> None:
    gce_driver = "pd.csi.storage.gke.io"
    disk = {"name": "d", "gcePersistentDisk": {"pdName": "disk-2"}}
    held = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1"}}
    migrated = make_env(
        node("n1"),
        csi_node("n1", {gce_driver: 1}, migrated=["kubernetes.io/gce-pd"]),
        with_volumes(pod("holder", "100m", node_name="n1"), held),
    )
    assert migrated.feasible(with_volumes(pod("p", "100m"), disk)) == []
    not_migrated = make_env(
        node("n1"),
        csi_node("n1", {gce_driver: 1}),
        with_volumes(pod("holder", "100m", node_name="n1"), held),
    )
    assert not_migrated.feasible(with_volumes(pod("p", "100m"), disk)) == ["n1"]


def test_a_pod_without_attachable_volumes_skips_the_filter() -> None:
    env = make_env(node("n1"))
    status = env.plugin("NodeVolumeLimits").pre_filter(
        CycleState(), info(pod("p", "100m")), env.view.nodes
    )
    assert status.skipped


def test_the_node_count_is_derived_again_when_a_pod_arrives() -> None:
    env = make_env(
        node("n1"), csi_node("n1", {DRIVER: 1}), *csi_claim("one", "h1"), *csi_claim("two", "h2")
    )
    raw = with_volumes(pod("p", "100m"), "two")
    assert env.feasible(raw) == ["n1"]
    env.add(with_volumes(pod("holder", "100m", node_name="n1"), "one"))
    assert env.feasible(raw) == []
