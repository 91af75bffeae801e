"""A burst of PodMigrationJobs against a real `berth run` (the installed scheduler profile,
the operators, the migration limits), judged every second by the migration invariants
(migration_invariants.py): no pod evicted before its reservation was Available, no
workload over its maxUnavailable or its PodDisruptionBudget. The burst must also get
somewhere: every job Succeeded, every pod moved.

The mutation case runs `berth run` with the reserve-first rule broken (evict_early.py)
and the invariant must report it (``--mutations``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes
from tests.integration.processes import BerthRun
from tests.reliability.harness import berth_run, installed_config, short
from tests.reliability.migration_invariants import MigrationHistory, Sample
from tests.support import eventually

GROUP, VERSION = "scheduling.koordinator.sh", "v1alpha1"
JOBS, RESERVATIONS = "podmigrationjobs", "reservations"
WORKLOADS = {"web": 6, "api": 4, "cache": 3}
"""ReplicaSets and their replicas: maxUnavailable 2, 2 and 1 by Koordinator's defaults."""
BUDGET = ("cache", 2)
"""A PodDisruptionBudget: cache keeps at least two of its three pods."""
NODES = 5
ALL_MOVED_WITHIN = 300.0
Json = dict[str, Any]


class Scene:
    """The test's nodes, ReplicaSets and jobs, and the samples taken of them."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.scheduler = short(namespace)
        self.group = self.scheduler
        self.nodes = Nodes(api, self.group)
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.jobs: list[str] = []
        self.history = MigrationHistory()

    async def node(self, suffix: str, *, unschedulable: bool = False) -> str:
        return await self.nodes.add(
            suffix,
            labels={"berth.test/group": self.group},
            allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"},
            unschedulable=unschedulable,
        )

    async def replicaset(self, name: str, replicas: int) -> None:
        labels = {"app": name}
        container = {
            "name": name,
            "image": "registry.local/app",
            "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
        }
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "schedulerName": self.scheduler,
                        "nodeSelector": {"berth.test/group": self.group},
                        "terminationGracePeriodSeconds": 5,
                        "containers": [container],
                    },
                },
            },
        }
        await AppsV1Api(self.api).create_namespaced_replica_set(self.namespace, body)

    async def budget(self, name: str, min_available: int) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
        }
        await PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(self.namespace, body)

    async def _items(self, call: Any) -> list[Json]:
        response = await call
        body = json.loads(await response.read())
        response.release()
        return list(body.get("items") or [])

    async def pods(self) -> list[Json]:
        return await self._items(
            self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        )

    async def running(self, count: int, within: float = 120) -> list[Json]:
        found: list[Json] = []

        async def there() -> bool:
            found[:] = [
                p
                for p in await self.pods()
                if p["spec"].get("nodeName")
                and p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            return len(found) == count

        await eventually(there, within)
        return found

    async def migrate(self, pod: Json, **spec: Any) -> str:
        name = f"{self.group}-{pod['metadata']['name']}"[:63]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodMigrationJob",
            "metadata": {"name": name},
            "spec": {
                "podRef": {"namespace": self.namespace, "name": pod["metadata"]["name"]},
                **spec,
            },
        }
        await self.custom.create_cluster_custom_object(GROUP, VERSION, JOBS, body)
        self.jobs.append(name)
        return name

    async def sample(self) -> list[str]:
        """One round of reads, folded into the history; what it reveals.

        Pods are read before the sample's time and reservations after it, so the time is
        an upper bound for a pod's absence and a lower bound for a reservation's state.
        """
        mine = set(self.jobs)
        jobs = [
            j
            for j in await self._items(
                self.custom.list_cluster_custom_object(GROUP, VERSION, JOBS, _preload_content=False)
            )
            if j["metadata"]["name"] in mine
        ]
        apps = AppsV1Api(self.api)
        controllers = await self._items(
            apps.list_namespaced_replica_set(self.namespace, _preload_content=False)
        )
        for item in controllers:
            item.setdefault("kind", "ReplicaSet")
        budgets = await self._items(
            PolicyV1Api(self.api).list_namespaced_pod_disruption_budget(
                self.namespace, _preload_content=False
            )
        )
        pods = await self.pods()
        at = time.time()
        reservations = [
            r
            for r in await self._items(
                self.custom.list_cluster_custom_object(
                    GROUP, VERSION, RESERVATIONS, _preload_content=False
                )
            )
            if r["metadata"]["name"] in mine
        ]
        return self.history.observe(
            Sample(at, jobs, reservations, pods, controllers=controllers, budgets=budgets)
        )

    async def close(self) -> None:
        for name in self.jobs:
            with contextlib.suppress(ApiException):  # gone already
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, JOBS, name)
        await self.nodes.delete_all()


@pytest.fixture
async def scene(api: ApiClient, crds: None, namespace: str) -> AsyncIterator[Scene]:
    made = Scene(api, namespace)
    try:
        yield made
    finally:
        await made.close()


def berth_for(
    scene: Scene, kubeconfig: str, directory: Path, module: str | None = None
) -> BerthRun:
    """`berth run` with the installed profile under the scene's scheduler name, the
    operators, and the burst's migration limits; ``module`` runs in place of Berth's CLI."""
    return berth_run(kubeconfig, installed_config(scene.scheduler), directory, module)


async def judged(scene: Scene, done: Callable[[], Awaitable[bool]], within: float) -> None:
    """Sample every second until ``done()`` or ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        await scene.sample()
        if await done():
            return
        await asyncio.sleep(1)


@pytest.mark.timeout(900)
async def test_a_burst_of_migrations_keeps_reserve_first_and_max_unavailable(
    scene: Scene, kubeconfig_path: str, tmp_path: Path
) -> None:
    for i in range(NODES):
        await scene.node(f"n{i}")
    for name, replicas in WORKLOADS.items():
        await scene.replicaset(name, replicas)
    await scene.budget(*BUDGET)
    total = sum(WORKLOADS.values())
    berth = berth_for(scene, kubeconfig_path, tmp_path).start()
    try:
        placed = await scene.running(total)
        before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in placed}
        # The burst: a job for every pod, all at once.
        names = await asyncio.gather(*(scene.migrate(p) for p in placed))
        statuses: dict[str, Json] = {}

        async def all_moved() -> bool:
            for name in names:
                got = await scene.custom.get_cluster_custom_object(GROUP, VERSION, JOBS, name)
                statuses[name] = got.get("status") or {}
            return all(s.get("phase") in ("Succeeded", "Failed") for s in statuses.values())

        started = time.monotonic()
        await judged(scene, all_moved, ALL_MOVED_WITHIN)
        took = time.monotonic() - started
    finally:
        berth.stop()
    history = scene.history
    sys.stderr.write(
        f"\nmigration burst: {len(names)} jobs in {took:.0f}s, {history.samples} samples, "
        f"worst unavailable {history.worst_unavailable}, violations {len(history.found)}\n"
    )
    assert history.found == []
    # Progress: every job moved its pod, to another node, in its reservation.
    phases = {
        name: (s.get("phase"), s.get("reason"), s.get("message")) for name, s in statuses.items()
    }
    assert all(p[0] == "Succeeded" for p in phases.values()), phases
    assert history.samples >= 5
    pods = {p["metadata"]["name"]: p for p in await scene.pods()}
    for name, status in statuses.items():
        job = await scene.custom.get_cluster_custom_object(GROUP, VERSION, JOBS, name)
        old = job["spec"]["podRef"]["name"]
        assert old not in pods, f"{name}: {old} still there"
        assert status["nodeName"] != before[old], f"{name}: back on {before[old]}"
        assert status["podRef"]["name"] != old
    # Every workload had pods migrating while the invariants looked.
    assert set(history.worst_unavailable) == {
        f"ReplicaSet {scene.namespace}/{n}" for n in WORKLOADS
    }


@pytest.mark.timeout(600)
async def test_the_invariant_catches_an_eviction_before_the_reservation(
    scene: Scene, kubeconfig_path: str, tmp_path: Path
) -> None:
    """The mutant evicts at once; the only other node is cordoned, so the reservation is
    never placed and the eviction came first whatever the timing."""
    await scene.node("a")
    await scene.node("b", unschedulable=True)
    await scene.replicaset("web", 2)
    berth = berth_for(scene, kubeconfig_path, tmp_path, "tests.reliability.evict_early").start()
    try:
        pods = await scene.running(2)
        name = await scene.migrate(pods[0], ttl="60s")

        async def caught() -> bool:
            return any(line.startswith(f"migration {name}:") for line in scene.history.found)

        await judged(scene, caught, 90)
    finally:
        berth.stop()
    sys.stderr.write("\n" + "\n".join(scene.history.found) + "\n")
    assert any(
        line.startswith(f"migration {name}: pod {scene.namespace}/{pods[0]['metadata']['name']}")
        and "(from never)" in line
        for line in scene.history.found
    ), scene.history.found
