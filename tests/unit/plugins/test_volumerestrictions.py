"""VolumeRestrictions: unshareable inline disks per node, ReadWriteOncePod claims cluster-wide."""

from __future__ import annotations

from berth.scheduler.framework.clusterevents import POD, ActionType, ClusterEvent
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.volumerestrictions import (
    DISK_CONFLICT,
    RWOP_CONFLICT,
    VolumeRestrictions,
)
from tests.unit.scheduler_fixtures import info, make_env, node, pod, pv, pvc, with_volumes

RWOP = ("ReadWriteOncePod",)


def gce(name: str, *, read_only: bool = False) -> dict[str, object]:
    return {"name": "disk", "gcePersistentDisk": {"pdName": name, "readOnly": read_only}}


def test_a_read_write_once_pod_claim_in_use_fails_every_node() -> None:
    env = make_env(
        node("n1"),
        node("n2"),
        pv("vol", modes=RWOP, claim=("default", "data")),
        pvc("data", modes=RWOP, volume="vol"),
        with_volumes(pod("owner", "100m", node_name="n1"), "data"),
    )
    message = env.message(with_volumes(pod("second", "100m"), "data"))
    assert message == f"0/2 nodes are available: 2 {RWOP_CONFLICT}."


def test_a_read_write_once_pod_claim_nobody_uses_is_fine() -> None:
    env = make_env(
        node("n1"),
        pv("vol", modes=RWOP, claim=("default", "data")),
        pvc("data", modes=RWOP, volume="vol"),
        # The same claim name in another namespace is another claim.
        with_volumes(pod("other", "100m", node_name="n1", namespace="elsewhere"), "data"),
    )
    assert env.node_for(with_volumes(pod("p", "100m"), "data")) == "n1"


def test_removing_the_claims_user_lifts_the_conflict_for_preemption() -> None:
    owner = with_volumes(pod("owner", "100m", node_name="n1"), "data")
    env = make_env(
        node("n1"),
        pv("vol", modes=RWOP, claim=("default", "data")),
        pvc("data", modes=RWOP, volume="vol"),
        owner,
    )
    plugin: VolumeRestrictions = env.plugin("VolumeRestrictions")
    state, incoming = CycleState(), info(with_volumes(pod("second", "100m"), "data"))
    assert plugin.pre_filter(state, incoming, env.view.nodes).ok
    assert not plugin.filter(state, incoming, env.view.nodes).passed[0]
    plugin.remove_pod(state, incoming, info(owner), 0)
    assert plugin.filter(state, incoming, env.view.nodes).passed[0]
    plugin.add_pod(state, incoming, info(owner), 0)
    assert not plugin.filter(state, incoming, env.view.nodes).passed[0]


def test_the_same_gce_disk_on_a_node_sends_the_pod_elsewhere() -> None:
    env = make_env(
        node("n1"),
        node("n2"),
        with_volumes(pod("holder", "100m", node_name="n1"), gce("disk-1")),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), gce("disk-1"))) == ["n2"]
    assert env.feasible(with_volumes(pod("q", "100m"), gce("disk-2"))) == ["n1", "n2"]


def test_read_only_on_both_sides_may_share_a_gce_disk() -> None:
    env = make_env(
        node("n1"),
        with_volumes(pod("holder", "100m", node_name="n1"), gce("disk-1", read_only=True)),
    )
    assert env.node_for(with_volumes(pod("p", "100m"), gce("disk-1", read_only=True))) == "n1"
    message = env.message(with_volumes(pod("q", "100m"), gce("disk-1")))
    assert message == f"0/1 nodes are available: 1 {DISK_CONFLICT}."


def test_an_ebs_volume_is_never_shared_even_read_only() -> None:
    ebs = {"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": True}}
    env = make_env(node("n1"), with_volumes(pod("holder", "100m", node_name="n1"), ebs))
    assert env.message(with_volumes(pod("p", "100m"), ebs)).endswith(f"1 {DISK_CONFLICT}.")


def test_rbd_images_conflict_only_through_a_shared_monitor() -> None:
    def rbd(*monitors: str) -> dict[str, object]:
        return {"name": "d", "rbd": {"monitors": list(monitors), "pool": "p", "image": "i"}}

    env = make_env(node("n1"), with_volumes(pod("holder", "100m", node_name="n1"), rbd("m1")))
    assert env.feasible(with_volumes(pod("p", "100m"), rbd("m2"))) == ["n1"]
    assert env.feasible(with_volumes(pod("q", "100m"), rbd("m1", "m3"))) == []


def test_a_missing_claim_is_unresolvable() -> None:
    env = make_env(node("n1"))
    message = env.message(with_volumes(pod("p", "100m"), "nope"))
    assert message == '0/1 nodes are available: persistentvolumeclaim "nope" not found.'


def test_a_pod_without_restricted_volumes_skips_the_filter() -> None:
    env = make_env(node("n1"), pvc("data", volume="vol"), pv("vol", claim=("default", "data")))
    state = CycleState()
    status = env.plugin("VolumeRestrictions").pre_filter(
        state, info(with_volumes(pod("p", "100m"), "data")), env.view.nodes
    )
    assert status.skipped


def test_deleting_the_claims_user_requeues_the_pod() -> None:
    env = make_env(node("n1"))
    plugin: VolumeRestrictions = env.plugin("VolumeRestrictions")
    waiting = info(with_volumes(pod("p", "100m"), "data"))
    user = info(with_volumes(pod("u", "100m", node_name="n1"), "data"))
    stranger = info(with_volumes(pod("s", "100m", node_name="n1"), "other"))
    deleted = ClusterEvent(POD, ActionType.DELETE)
    (hint,) = [r for r in plugin.events_to_register() if r.event.resource == POD]
    assert hint.helps(waiting, deleted, user, None)
    assert not hint.helps(waiting, deleted, stranger, None)


def test_preemption_evicts_the_lower_priority_holder_of_a_read_write_once_pod_claim() -> None:
    from tests.unit.test_preemption import victims_on

    env = make_env(
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pv("vol", modes=RWOP, claim=("default", "data")),
        pvc("data", modes=RWOP, volume="vol"),
        with_volumes(pod("holder", "100m", node_name="n1", priority=1), "data"),
        pod("bystander", "100m", node_name="n2", priority=1),
    )
    preemptor = with_volumes(pod("urgent", "100m", priority=100), "data")
    assert victims_on(env, preemptor, "n1") == ["holder"]
    # On the other node, evicting its pods does not free the claim.
    assert victims_on(env, preemptor, "n2") is None
