"""Pods with volumes, Berth beside kube-scheduler on the same cluster: real PersistentVolumes
and claims, bound by the controller manager's PV controller.

Each side gets its own volumes and claims (a PV binds once), made alike; both schedulers
must put the pod on the same node, or refuse it with the same PodScheduled message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, StorageV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import CycleState
from tests.integration.test_parity import HOSTNAME, WITHIN, ZONE, Case, Scheduler, Side
from tests.integration.test_parity import case as case  # the fixture
from tests.support import eventually


class Volumes:
    """Cluster-scoped PersistentVolumes and StorageClasses made for one test, and claims."""

    def __init__(self, api: ApiClient, namespace: str, tag: str) -> None:
        self.core = CoreV1Api(api)
        self.storage = StorageV1Api(api)
        self.namespace = namespace
        self.tag = tag
        self.pvs: list[str] = []
        self.classes: list[str] = []

    async def storage_class(self, suffix: str, mode: str) -> str:
        name = f"{self.tag}-{suffix}"
        await self.storage.create_storage_class(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": mode,
            }
        )
        self.classes.append(name)
        return name

    async def pv(
        self,
        suffix: str,
        storage_class: str,
        *,
        node: str | None = None,
        labels: dict[str, str] | None = None,
        modes: tuple[str, ...] = ("ReadWriteOnce",),
    ) -> str:
        name = f"{self.tag}-{suffix}"
        spec: dict[str, Any] = {
            "capacity": {"storage": "1Gi"},
            "accessModes": list(modes),
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
        }
        if node is not None:
            spec["local"] = {"path": f"/mnt/{name}"}
            term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
            spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        else:
            spec["hostPath"] = {"path": f"/mnt/{name}"}
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec,
        }
        await self.core.create_persistent_volume(body)
        self.pvs.append(name)
        return name

    async def claim(
        self,
        name: str,
        storage_class: str,
        *,
        volume: str | None = None,
        modes: tuple[str, ...] = ("ReadWriteOnce",),
    ) -> None:
        spec: dict[str, Any] = {
            "accessModes": list(modes),
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        }
        if volume is not None:
            spec["volumeName"] = volume
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": spec,
        }
        await self.core.create_namespaced_persistent_volume_claim(self.namespace, body)

    async def claim_state(self, name: str) -> tuple[str, str]:
        claim = await self.core.read_namespaced_persistent_volume_claim(name, self.namespace)
        return claim.status.phase or "", claim.spec.volume_name or ""

    async def wait_bound(self, name: str) -> str:
        async def bound() -> bool:
            return (await self.claim_state(name))[0] == "Bound"

        await eventually(bound, WITHIN)
        return (await self.claim_state(name))[1]

    async def delete_all(self) -> None:
        for name in self.pvs:
            with contextlib.suppress(ApiException):
                await self.core.delete_persistent_volume(name)
        for name in self.classes:
            with contextlib.suppress(ApiException):
                await self.storage.delete_storage_class(name)


@pytest.fixture
async def volumes(api: ApiClient, namespace: str, case: Case) -> AsyncIterator[Volumes]:
    made = Volumes(api, namespace, case.tag)
    yield made
    await made.delete_all()


def mounting(*claims: str) -> dict[str, Any]:
    return {
        "volumes": [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}}
            for i, claim in enumerate(claims)
        ]
    }


async def test_wait_for_first_consumer_local_pv_is_bound_on_the_chosen_node(
    case: Case, volumes: Volumes
) -> None:
    for i in range(3):
        await case.node(f"n{i}")
    local_node = case.nodes.names[1]
    wffc = await volumes.storage_class("local", "WaitForFirstConsumer")
    bound_to: dict[str, tuple[str, str]] = {}

    async def run(side: Side, scheduler: Scheduler | None) -> None:
        claim = f"{side.label}-data"
        await volumes.claim(claim, wffc)
        # No PV yet: refused, and waiting for one (the PV controller leaves the claim alone).
        await case.refuse(side, "app", cpu="100m", **mounting(claim))
        assert (await volumes.claim_state(claim))[0] == "Pending"
        # The PV's arrival brings the pod back; it goes where the PV is, and the PV
        # controller binds the claim to that PV.
        pv = await volumes.pv(f"{side.label}-local", wffc, node=local_node)
        side.placed["app"] = await case.pods.wait_bound("app", WITHIN)
        bound_to[side.label] = (await volumes.wait_bound(claim), pv)

    kube, berth = await case.both(run)
    assert kube.placed == berth.placed == {"app": local_node}
    assert "3 node(s) didn't find available persistent volumes to bind" in kube.messages["app"]
    assert berth.messages == kube.messages
    for volume, pv in bound_to.values():
        assert volume == pv


async def test_a_bound_pvs_zone_is_honoured(case: Case, volumes: Volumes) -> None:
    zones = {"a": f"{case.tag}-a", "b": f"{case.tag}-b"}
    for zone, value in zones.items():
        for i in range(2):
            await case.node(f"{zone}{i}", **{ZONE: value})
    in_b = sorted(n for n in case.nodes.names if "-b" in n)

    async def run(side: Side, scheduler: Scheduler | None) -> None:
        # Immediate binding: the PV controller binds the claims before any pod asks.
        for suffix, zone in (("b", zones["b"]), ("gone", f"{case.tag}-c")):
            pv = await volumes.pv(f"{side.label}-{suffix}", "", labels={ZONE: zone})
            await volumes.claim(f"{side.label}-{suffix}", "", volume=pv)
            await volumes.wait_bound(f"{side.label}-{suffix}")
        await case.bind(side, "app", cpu="100m", **mounting(f"{side.label}-b"))
        await case.refuse(side, "nowhere", cpu="100m", **mounting(f"{side.label}-gone"))
        if scheduler is not None:  # the refusal is VolumeZone's, on every zoned node
            body = case.body(side, "probe", cpu="100m", **mounting(f"{side.label}-gone"))
            pod = PodInfo.from_pod(body)
            rows, diagnosis = scheduler.profiles[side.scheduler].cycle.feasible(CycleState(), pod)
            assert len(rows) == 0
            assert diagnosis.histogram["node(s) had no available volume zone"] == 4

    kube, berth = await case.both(run)
    assert kube.placed["app"] in in_b
    assert berth.placed["app"] in in_b
    assert "4 node(s) had no available volume zone" in kube.messages["nowhere"]
    assert berth.messages == kube.messages


async def test_a_read_write_once_pod_conflict_is_refused(case: Case, volumes: Volumes) -> None:
    for i in range(2):
        await case.node(f"n{i}")
    rwop = ("ReadWriteOncePod",)

    async def run(side: Side, scheduler: Scheduler | None) -> None:
        pv = await volumes.pv(f"{side.label}-only", "", modes=rwop)
        claim = f"{side.label}-only"
        await volumes.claim(claim, "", volume=pv, modes=rwop)
        await volumes.wait_bound(claim)
        await case.bind(side, "owner", cpu="100m", **mounting(claim))
        await case.refuse(side, "second", cpu="100m", **mounting(claim))

    kube, berth = await case.both(run)
    assert kube.placed.keys() == berth.placed.keys() == {"owner"}
    assert (
        "2 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
        "already in-use by another pod" in kube.messages["second"]
    )
    assert berth.messages == kube.messages
