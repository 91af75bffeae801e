"""VolumeZone: a pod follows its bound PVs' zone and region labels."""

from __future__ import annotations

from berth.scheduler.cache.volumestore import PersistentVolume
from berth.scheduler.framework.clusterevents import PERSISTENT_VOLUME, ActionType, ClusterEvent
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.volumezone import (
    NO_PV_NAME,
    NO_PV_OR_CLASS,
    ZONE_CONFLICT,
    VolumeZone,
)
from tests.unit.scheduler_fixtures import (
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
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"


def zoned(*labels: tuple[str, str]) -> list[dict[str, object]]:
    """The claim "data" bound to a PV with these labels."""
    return [pvc("data", volume="vol"), pv("vol", claim=("default", "data"), labels=dict(labels))]


def nodes() -> list[dict[str, object]]:
    return [
        node("a", labels={ZONE: "za", REGION: "r1"}),
        node("b", labels={ZONE: "zb", REGION: "r1"}),
        node("c", labels={ZONE: "zc", REGION: "r2"}),
    ]


def test_a_bound_pv_keeps_the_pod_in_its_zone() -> None:
    env = make_env(*nodes(), *zoned((ZONE, "zb")))
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["b"]


def test_a_pv_in_several_zones_and_a_region() -> None:
    env = make_env(*nodes(), *zoned((ZONE, "za__zc"), (REGION, "r1")))
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["a"]


def test_no_zone_anywhere_is_unresolvable() -> None:
    env = make_env(*nodes(), *zoned((ZONE, "zz")))
    assert env.message(with_volumes(pod("p", "100m"), "data")) == (
        f"0/3 nodes are available: 3 {ZONE_CONFLICT}."
    )


def test_a_node_without_zone_labels_passes() -> None:
    env = make_env(node("bare"), node("a", labels={ZONE: "za"}), *zoned((ZONE, "zb")))
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["bare"]


def test_a_beta_label_on_the_pv_matches_the_ga_label_on_the_node() -> None:
    env = make_env(*nodes(), *zoned((BETA_ZONE, "zc")))
    assert env.feasible(with_volumes(pod("p", "100m"), "data")) == ["c"]


def test_a_claim_waiting_for_its_first_consumer_is_skipped() -> None:
    env = make_env(*nodes(), storage_class("wffc"), pvc("data", storage_class="wffc"))
    status = env.plugin("VolumeZone").pre_filter(
        CycleState(), info(with_volumes(pod("p", "100m"), "data")), env.view.nodes
    )
    assert status.skipped


def test_unbound_claims_it_cannot_place() -> None:
    plugin: VolumeZone
    env = make_env(*nodes(), storage_class("now", mode="Immediate"), pvc("data"))
    plugin = env.plugin("VolumeZone")
    raw = info(with_volumes(pod("p", "100m"), "data"))
    assert plugin.pre_filter(CycleState(), raw, env.view.nodes).reasons == (NO_PV_OR_CLASS,)
    env = make_env(
        *nodes(), storage_class("now", mode="Immediate"), pvc("data", storage_class="now")
    )
    plugin = env.plugin("VolumeZone")
    assert plugin.pre_filter(CycleState(), raw, env.view.nodes).reasons == (NO_PV_NAME,)
    env = make_env(*nodes(), storage_class("unset", mode=None), pvc("data", storage_class="unset"))
    plugin = env.plugin("VolumeZone")
    assert plugin.pre_filter(CycleState(), raw, env.view.nodes).reasons == (
        'VolumeBindingMode not set for StorageClass "unset"',
    )


def test_a_pv_update_requeues_only_when_its_topology_changes() -> None:
    env = make_env(*nodes())
    plugin: VolumeZone = env.plugin("VolumeZone")
    (registration,) = [
        r for r in plugin.events_to_register() if r.event.resource == "PersistentVolume"
    ]
    waiting = info(with_volumes(pod("p", "100m"), "data"))
    before = PersistentVolume.parse(pv("vol", labels={ZONE: "za"}))
    relabelled = PersistentVolume.parse(pv("vol", labels={ZONE: "zb"}))
    resized = PersistentVolume.parse(pv("vol", labels={ZONE: "za"}, size="2Gi"))
    update = ClusterEvent(PERSISTENT_VOLUME, ActionType.UPDATE_OTHER)
    assert registration.helps(waiting, update, before, relabelled)
    assert not registration.helps(waiting, update, before, resized)
