"""Every PodSpec field is honoured by Berth's scheduler, refused by name, or has no say in
placement: a field the API gains fails this test until someone decides which."""

from __future__ import annotations

import kubernetes.client
import kubernetes_asyncio.client
import pytest

from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.placementfields import (
    HONOURED,
    NOT_PLACEMENT,
    PLACED_VOLUME_SOURCES,
    REFUSED,
    UNPLACED_VOLUME_SOURCES,
)
from tests.unit.scheduler_fixtures import info, make_env, node, pod


def api_fields(model: str) -> set[str]:
    """The model's JSON field names in both API clients (``kubernetes`` is pinned old;
    ``kubernetes_asyncio`` follows the current API)."""
    fields: set[str] = set()
    for client in (kubernetes.client, kubernetes_asyncio.client):
        fields |= set(getattr(client, model).attribute_map.values())
    return fields


def test_every_pod_spec_field_is_classified() -> None:
    classified = HONOURED | set(REFUSED) | NOT_PLACEMENT
    assert api_fields("V1PodSpec") - classified == set()
    assert not HONOURED & set(REFUSED)
    assert not (HONOURED | set(REFUSED)) & NOT_PLACEMENT


def test_every_volume_source_is_classified() -> None:
    assert (
        api_fields("V1Volume") - {"name"} - PLACED_VOLUME_SOURCES - UNPLACED_VOLUME_SOURCES == set()
    )
    assert not PLACED_VOLUME_SOURCES & UNPLACED_VOLUME_SOURCES


def test_the_walk_would_catch_a_new_field() -> None:
    # What the first test relies on: a field nobody classified shows up.
    assert "someFutureField" not in HONOURED | set(REFUSED) | NOT_PLACEMENT


def refused(spec_update: dict[str, object]) -> str:
    env = make_env(node("n1"), node("n2"))
    raw = pod("p", "100m")
    raw["spec"].update(spec_update)
    return env.message(raw)


def test_device_claims_are_refused_by_name() -> None:
    message = refused({"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]})
    assert message == (
        "0/2 nodes are available: Berth does not allocate device claims: spec.resourceClaims."
    )


CLAIM_SOURCES = {
    "persistentVolumeClaim": 'persistentvolumeclaim "missing" not found',
    "ephemeral": (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-data"'
    ),
}


@pytest.mark.parametrize("source", sorted(PLACED_VOLUME_SOURCES - CLAIM_SOURCES.keys()))
def test_inline_volumes_that_steer_placement_are_placed_by_the_volume_plugins(
    source: str,
) -> None:
    env = make_env(node("n1"))
    raw = pod("p", "100m")
    raw["spec"]["volumes"] = [{"name": "data", source: {}}]
    assert env.node_for(raw) == "n1"


@pytest.mark.parametrize("source", sorted(CLAIM_SOURCES))
def test_claims_are_looked_up_not_refused(source: str) -> None:
    spec = {"claimName": "missing"} if source == "persistentVolumeClaim" else {}
    message = refused({"volumes": [{"name": "data", source: spec}]})
    assert message == f"0/2 nodes are available: {CLAIM_SOURCES[source]}."


def test_volumes_without_placement_effect_are_fine() -> None:
    env = make_env(node("n1"))
    raw = pod("p", "100m")
    raw["spec"]["volumes"] = [
        {"name": "cfg", "configMap": {"name": "c"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "token", "projected": {"sources": []}},
    ]
    assert env.node_for(raw) == "n1"


def test_gang_keys_in_a_profile_without_coscheduling_are_refused_by_name() -> None:
    env = make_env(node("n1"))
    raw = pod("p", "100m")
    raw["metadata"]["annotations"] = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "3",
    }
    assert env.message(raw) == (
        "0/1 nodes are available: annotation gang.scheduling.koordinator.sh/name, annotation "
        "gang.scheduling.koordinator.sh/min-available: profile berth-scheduler has no "
        "Coscheduling plugin to place the pod with its gang."
    )
    labelled = pod("q", "100m", labels={"scheduling.x-k8s.io/pod-group": "train"})
    assert env.message(labelled) == (
        "0/1 nodes are available: label scheduling.x-k8s.io/pod-group: profile "
        "berth-scheduler has no Coscheduling plugin to place the pod with its gang."
    )
    grouped = pod("r", "100m")
    grouped["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    assert env.message(grouped) == (
        "0/1 nodes are available: spec.schedulingGroup.podGroupName: profile "
        "berth-scheduler has no Coscheduling plugin to place the pod with its gang."
    )


def test_koordinators_podgroup_is_refused_by_name() -> None:
    env = make_env(
        node("n1"),
        profile={"plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}]}}},
    )
    raw = pod("p", "100m", labels={"pod-group.scheduling.sigs.k8s.io": "train"})
    assert "Berth does not serve Koordinator's PodGroup (scheduling.sigs.k8s.io)" in (
        env.message(raw)
    )


def test_a_reservation_naming_a_gang_needs_coscheduling_as_a_pod_does() -> None:
    env = make_env(node("n1"))
    template = info(pod("r", "100m", labels={"scheduling.x-k8s.io/pod-group": "train"}))
    template.reservation = {"metadata": {"name": "r"}}
    state = CycleState()
    status = env.plugins.run_pre_filter(state, template)
    assert status.message == (
        "label scheduling.x-k8s.io/pod-group: profile berth-scheduler has no Coscheduling "
        "plugin to place the pod with its gang"
    )
