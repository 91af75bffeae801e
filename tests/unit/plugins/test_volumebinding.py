"""VolumeBinding: bound claims follow their PV; WaitForFirstConsumer claims are matched to a
PV or provisioned on the chosen node; immediate unbound claims wait."""

from __future__ import annotations

import pytest

from berth.scheduler.cache.volumestore import PersistentVolume, PersistentVolumeClaim
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.volumebinding.binder import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
)
from berth.scheduler.plugins.volumebinding.plugin import VolumeBinding, check_bindings
from tests.unit.scheduler_fixtures import (
    expr,
    info,
    make_env,
    node,
    pod,
    pv,
    pvc,
    storage_class,
    with_volumes,
)

ZONE = "topology.kubernetes.io/zone"


def three_nodes() -> list[dict[str, object]]:
    return [
        node(f"n{i}", labels={ZONE: f"z{i}", "kubernetes.io/hostname": f"n{i}"}) for i in range(3)
    ]


def test_a_pod_without_claims_skips_volume_binding() -> None:
    env = make_env(*three_nodes())
    status = env.plugin("VolumeBinding").pre_filter(
        CycleState(), info(pod("p", "100m")), env.view.nodes
    )
    assert status.skipped


def test_a_bound_local_pv_narrows_the_attempt_to_its_node() -> None:
    env = make_env(
        *three_nodes(),
        pv("local", on_nodes=["n2"], claim=("default", "data")),
        pvc("data", volume="local"),
    )
    assert env.node_for(with_volumes(pod("p", "100m"), "data")) == "n2"
    full = with_volumes(pod("big", "64"), "data")
    assert env.message(full) == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [VolumeBinding]."
    )


def test_a_bound_pvs_node_affinity_filters_nodes() -> None:
    zoned = pv("zoned", claim=("default", "data"))
    term = {"matchExpressions": [expr(ZONE, "In", "z1")]}
    zoned["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    env = make_env(*three_nodes(), zoned, pvc("data", volume="zoned"))
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["n1"]
    term["matchExpressions"] = [expr(ZONE, "In", "nowhere")]
    env = make_env(*three_nodes(), zoned, pvc("data", volume="zoned"))
    assert env.message(with_volumes(pod("p", "100m"), "data")) == (
        f"0/3 nodes are available: 3 {NODE_CONFLICT}."
    )


def test_a_claim_bound_to_a_missing_pv() -> None:
    # VolumeZone, before VolumeBinding's Filter, errors on the missing PV when enabled.
    without_zone = {"plugins": {"multiPoint": {"disabled": [{"name": "VolumeZone"}]}}}
    env = make_env(*three_nodes(), pvc("data", volume="gone"), profile=without_zone)
    assert env.message(with_volumes(pod("p", "100m"), "data")) == (
        f"0/3 nodes are available: 3 {PV_NOT_EXIST}."
    )


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (None, 'persistentvolumeclaim "data" not found'),
        (pvc("data", storage_class=""), UNBOUND_IMMEDIATE),
        (pvc("data", storage_class="wffc", volume=None), None),
    ],
)
def test_claims_the_pod_must_wait_for(claim: dict[str, object] | None, message: str | None) -> None:
    objects = [*three_nodes(), storage_class("wffc", provisioner="kubernetes.io/no-provisioner")]
    if claim is not None:
        objects.append(claim)
    env = make_env(*objects)
    expected = message or f"3 {BIND_CONFLICT}"
    prefix = "0/3 nodes are available: "
    assert env.message(with_volumes(pod("p", "100m"), "data")) == f"{prefix}{expected}."


def test_a_lost_or_deleted_claim() -> None:
    lost = pvc("data", volume="vol")
    lost["status"]["phase"] = "Lost"
    env = make_env(*three_nodes(), lost)
    assert env.message(with_volumes(pod("p", "100m"), "data")).endswith(
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "vol".'
    )
    deleting = pvc("data", volume="vol")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    env = make_env(*three_nodes(), deleting)
    assert env.message(with_volumes(pod("p", "100m"), "data")).endswith(
        'persistentvolumeclaim "data" is being deleted.'
    )


def test_an_ephemeral_volumes_claim_must_exist_and_be_the_pods() -> None:
    raw = with_volumes(pod("p", "100m"), {"name": "scratch", "ephemeral": {}})
    env = make_env(*three_nodes())
    assert env.message(raw).endswith(
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch".'
    )
    env = make_env(*three_nodes(), pvc("p-scratch", owner_uid="someone-else"))
    assert env.message(raw).endswith(
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)."
    )


def test_wait_for_first_consumer_goes_where_a_matching_pv_is() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("local", provisioner="kubernetes.io/no-provisioner"),
        pvc("data", storage_class="local"),
        pv("on-n1", storage_class="local", on_nodes=["n1"]),
        pv("too-small", storage_class="local", on_nodes=["n2"], size="10Mi"),
        pv("taken", storage_class="local", on_nodes=["n0"], claim=("default", "other")),
        pv("wrong-mode", storage_class="local", on_nodes=["n0"], modes=["ReadOnlyMany"]),
        pv("other-class", storage_class="fast", on_nodes=["n0"]),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["n1"]


def test_reserve_takes_the_smallest_pv_and_unreserve_gives_it_back() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("local", provisioner="kubernetes.io/no-provisioner"),
        pvc("data", storage_class="local", size="1Gi"),
        pvc("more", storage_class="local", size="1Gi"),
        pv("big", storage_class="local", on_nodes=["n1"], size="5Gi"),
        pv("small", storage_class="local", on_nodes=["n1"], size="2Gi"),
    )
    plugin: VolumeBinding = env.plugin("VolumeBinding")
    store = env.view.volumes
    first = info(with_volumes(pod("p", "100m"), "data"))
    state = CycleState()
    assert plugin.pre_filter(state, first, env.view.nodes).ok
    assert plugin.reserve(state, first, "n1").ok
    assert store.pv("small").claim_ref is not None
    assert store.pv("big").claim_ref is None
    # The next pod's claim can only have the PV left.
    second = info(with_volumes(pod("q", "100m"), "more"))
    other = CycleState()
    assert plugin.pre_filter(other, second, env.view.nodes).ok
    assert plugin.reserve(other, second, "n1").ok
    assert store.pv("big").claim_ref is not None
    third = with_volumes(pod("r", "100m"), "data")
    plugin.unreserve(state, first, "n1")
    assert store.pv("small").claim_ref is None
    assert env.feasible(third) == ["n1"]


def test_a_provisioning_class_selects_the_node_within_its_allowed_topologies() -> None:
    fast = storage_class("fast")
    fast["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}]
    env = make_env(*three_nodes(), fast, pvc("data", storage_class="fast"))
    raw = with_volumes(pod("p", "100m"), "data")
    assert env.feasible(raw) == ["n2"]
    plugin: VolumeBinding = env.plugin("VolumeBinding")
    state, pod_info = CycleState(), info(raw)
    assert plugin.pre_filter(state, pod_info, env.view.nodes).ok
    assert plugin.reserve(state, pod_info, "n2").ok
    claim = env.view.volumes.pvc("default", "data")
    assert claim is not None
    assert claim.annotations["volume.kubernetes.io/selected-node"] == "n2"
    plugin.unreserve(state, pod_info, "n2")
    claim = env.view.volumes.pvc("default", "data")
    assert claim is not None
    assert "volume.kubernetes.io/selected-node" not in claim.annotations


def test_a_claim_already_selected_for_a_node_goes_there() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("fast"),
        pvc("data", storage_class="fast", annotations={"volume.kubernetes.io/selected-node": "n0"}),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["n0"]


def test_binding_is_done_when_the_pv_controller_has_bound_the_claim() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("local", provisioner="kubernetes.io/no-provisioner"),
        pvc("data", storage_class="local"),
        pv("vol", storage_class="local", on_nodes=["n1"]),
    )
    plugin: VolumeBinding = env.plugin("VolumeBinding")
    store = env.view.volumes
    state, pod_info = CycleState(), info(with_volumes(pod("p", "100m"), "data"))
    assert plugin.pre_filter(state, pod_info, env.view.nodes).ok
    assert plugin.reserve(state, pod_info, "n1").ok
    found = state.data["VolumeBinding"]
    chosen = found.chosen
    assert not check_bindings(store, chosen, "n1", found.versions)  # nothing written back yet
    bound_pv = pv("vol", storage_class="local", on_nodes=["n1"], claim=("default", "data"))
    bound_pv["metadata"]["resourceVersion"] = "2"
    bound_pv["spec"]["claimRef"]["uid"] = "pvc-default-data"
    env.events.on_pv("MODIFIED", bound_pv)
    assert not check_bindings(store, chosen, "n1", found.versions)  # the claim is not yet
    env.events.on_pvc("MODIFIED", pvc("data", storage_class="local", volume="vol"))
    assert check_bindings(store, chosen, "n1", found.versions)
    assert isinstance(store.pv("vol"), PersistentVolume)
    assert isinstance(store.pvc("default", "data"), PersistentVolumeClaim)


def test_unknown_and_scoring_arguments_are_refused() -> None:
    from berth.scheduler.config import ConfigError

    def profile(args: dict[str, object]) -> dict[str, object]:
        return {"pluginConfig": [{"name": "VolumeBinding", "args": args}]}

    make_env(profile=profile({"bindTimeoutSeconds": 30}))
    with pytest.raises(ConfigError, match="StorageCapacityScoring"):
        make_env(profile=profile({"shape": []}))
    with pytest.raises(ConfigError, match="bindTimeoutSeconds"):
        make_env(profile=profile({"bindTimeoutSeconds": -1}))


def test_a_pod_waiting_for_its_claim_goes_back_when_the_claim_is_bound() -> None:
    from berth.scheduler.framework.clusterevents import (
        PERSISTENT_VOLUME_CLAIM,
        ActionType,
        ClusterEvent,
    )

    env = make_env(*three_nodes())
    plugin: VolumeBinding = env.plugin("VolumeBinding")
    (registration,) = [
        r for r in plugin.events_to_register() if r.event.resource == PERSISTENT_VOLUME_CLAIM
    ]
    waiting = info(with_volumes(pod("p", "100m"), "data"))
    update = ClusterEvent(PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE_OTHER)
    before = PersistentVolumeClaim.parse(pvc("data"))
    after = PersistentVolumeClaim.parse(pvc("data", volume="vol"))
    other = PersistentVolumeClaim.parse(pvc("other", volume="vol"))
    assert registration.helps(waiting, update, before, after)
    assert not registration.helps(waiting, update, None, other)


async def test_a_pod_refused_for_an_unbound_claim_is_scheduled_once_the_claim_binds() -> None:
    from tests.unit.test_schedule_one import Loop, berth_pod

    loop = Loop(*three_nodes(), with_volumes(berth_pod("p", "100m"), "data"))
    events = loop.parts.events
    events.on_pvc("ADDED", pvc("data"))
    await loop.attempt()
    message = f"0/3 nodes are available: {UNBOUND_IMMEDIATE}."
    assert ("unschedulable", ("p", message)) in loop.writer.calls
    assert loop.queue.counts()["unschedulable"] == 1
    events.on_pvc("ADDED", pvc("unrelated"))  # not the pod's claim
    assert loop.queue.counts()["unschedulable"] == 1
    events.on_pv("ADDED", pv("vol", claim=("default", "data"), on_nodes=["n2"]))
    events.on_pvc("MODIFIED", pvc("data", volume="vol"))
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("p", "n2")) in loop.writer.calls


def test_two_claims_need_two_pvs_on_the_node() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("local", provisioner="kubernetes.io/no-provisioner"),
        pvc("a", storage_class="local"),
        pvc("b", storage_class="local"),
        pv("one-on-n1", storage_class="local", on_nodes=["n1"]),
        pv("one-on-n2", storage_class="local", on_nodes=["n2"]),
        pv("two-on-n2", storage_class="local", on_nodes=["n2"]),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "a")) == ["n1", "n2"]
    assert env.feasible(with_volumes(pod("p", "100m"), "a", "b")) == ["n2"]


def test_a_pre_bound_pv_decides_for_its_claim() -> None:
    env = make_env(
        *three_nodes(),
        storage_class("local", provisioner="kubernetes.io/no-provisioner"),
        pvc("a", storage_class="local"),
        pv("free-on-n1", storage_class="local", on_nodes=["n1"]),
        pv("for-a-on-n2", storage_class="local", on_nodes=["n2"], claim=("default", "a")),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "a")) == ["n2"]


def test_volume_zone_answers_first_for_a_missing_pv() -> None:
    env = make_env(*three_nodes(), pvc("data", volume="gone"))
    assert env.message(with_volumes(pod("p", "100m"), "data")) == (
        '0/3 nodes are available: persistentvolume "gone" not found.'
    )


def capacity_objects(zone: str, size: str) -> list[dict[str, object]]:
    """A driver that publishes capacity, its class, and room of ``size`` in ``zone``."""
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": "tracked.csi.example.com"},
            "spec": {"storageCapacity": True},
        },
        storage_class("tracked", provisioner="tracked.csi.example.com"),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIStorageCapacity",
            "metadata": {"name": f"cap-{zone}", "namespace": "kube-system"},
            "storageClassName": "tracked",
            "capacity": size,
            "nodeTopology": {"matchLabels": {ZONE: zone}},
        },
    ]


def test_a_tracked_driver_provisions_only_where_its_capacity_has_room() -> None:
    env = make_env(
        *three_nodes(),
        *capacity_objects("z1", "10Gi"),
        pvc("small", storage_class="tracked", size="1Gi"),
        pvc("huge", storage_class="tracked", size="100Gi"),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "small")) == ["n1"]
    assert env.message(with_volumes(pod("q", "100m"), "huge")) == (
        "0/3 nodes are available: 3 node(s) did not have enough free storage."
    )


def test_a_driver_without_capacity_tracking_provisions_anywhere() -> None:
    objects = capacity_objects("z1", "10Gi")
    objects[0]["spec"] = {"storageCapacity": False}
    env = make_env(*three_nodes(), *objects, pvc("small", storage_class="tracked"))
    assert env.feasible(with_volumes(pod("p", "100m"), "small")) == ["n0", "n1", "n2"]


def test_capacity_is_checked_row_by_row_for_competing_claims_too() -> None:
    env = make_env(
        *three_nodes(),
        *capacity_objects("z2", "10Gi"),
        pvc("a", storage_class="tracked"),
        pvc("b", storage_class="tracked"),
    )
    assert env.feasible(with_volumes(pod("p", "100m"), "a", "b")) == ["n2"]
