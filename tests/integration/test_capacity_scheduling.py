"""ElasticQuota capacity scheduling on the local cluster, through a real `berth run` (the
scheduler with CapacityScheduling and the operators): the design's 10-GPU walk-through
from docs/examples/quota-walkthrough step by step, the max and sum-of-min rejections, a
namespace without quota left alone, and a scheduler crash that must not over-admit.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi

from tests.integration.cluster import Nodes, Pods, only_these_quotas, pod_body
from tests.integration.processes import BerthRun
from tests.support import REPO, eventually

GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
GPU = "nvidia.com/gpu"
WALKTHROUGH = REPO / "docs" / "examples" / "quota-walkthrough"


def short(namespace: str) -> str:
    return "cs-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((WALKTHROUGH / name).read_text()) if d]


@pytest.fixture
async def gpu_nodes(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """The walk-through's two 5-GPU nodes, under names of this test."""
    nodes = Nodes(api, short(namespace))
    try:
        names = []
        for i, doc in enumerate(documents("gpu-nodes.yaml")):
            names.append(await nodes.add(f"gpu{i}", allocatable=doc["status"]["allocatable"]))
        yield names
    finally:
        await nodes.delete_all()


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with the walk-through's scheduler configuration and a name of this test."""
    config = yaml.safe_load((WALKTHROUGH / "scheduler-config.yaml").read_text())
    config["profiles"][0]["schedulerName"] = short(namespace)
    process = BerthRun.configured(kubeconfig_path, config, tmp_path)
    try:
        yield process
    finally:
        process.stop()


class Team:
    """One namespace of the walk-through: its quota, its Deployment, its pods."""

    def __init__(self, api: ApiClient, namespace: str, scheduler: str, source: str) -> None:
        self.api = api
        self.namespace = namespace
        self.scheduler = scheduler
        self.source = source  # the namespace the example files use
        self.pods = Pods(api, namespace)
        self.quota_name = ""

    def _mine(self, doc: dict[str, Any]) -> dict[str, Any]:
        doc["metadata"]["namespace"] = self.namespace
        return doc

    async def apply_quota(self) -> None:
        for doc in documents("quotas.yaml"):
            meta = doc["metadata"]
            if doc["kind"] == "ElasticQuota" and meta["namespace"] == self.source:
                self.quota_name = meta["name"]
                await CustomObjectsApi(self.api).create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, self._mine(doc)
                )

    async def apply_workload(self) -> None:
        for doc in documents("workloads.yaml"):
            if doc["metadata"]["namespace"] == self.source:
                doc["spec"]["template"]["spec"]["schedulerName"] = self.scheduler
                await AppsV1Api(self.api).create_namespaced_deployment(
                    self.namespace, self._mine(doc)
                )

    async def scale(self, replicas: int) -> None:
        await AppsV1Api(self.api).patch_namespaced_deployment_scale(
            "trainer", self.namespace, {"spec": {"replicas": replicas}}
        )

    async def live(self) -> tuple[list[Any], list[Any]]:
        """(bound, pending) pods not being deleted."""
        listed = await CoreV1Api(self.api).list_namespaced_pod(self.namespace)
        pods = [p for p in listed.items if p.metadata.deletion_timestamp is None]
        return [p for p in pods if p.spec.node_name], [p for p in pods if not p.spec.node_name]

    async def used(self) -> str | None:
        obj = await CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.quota_name
        )
        return ((obj.get("status") or {}).get("used") or {}).get(GPU)

    async def quota_events(self, reason: str) -> list[Any]:
        events = await CoreV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.quota_name}"
        )
        return [e for e in events.items if e.reason == reason]


async def settle(teams: dict[Team, tuple[int, int]], within: float = 60) -> None:
    """Until each team has exactly (bound, pending) pods and status.used says bound."""
    seen: dict[str, Any] = {}

    async def steady() -> bool:
        for team, (bound, pending) in teams.items():
            live_bound, live_pending = await team.live()
            used = await team.used()
            seen[team.source] = (len(live_bound), len(live_pending), used)
            if (len(live_bound), len(live_pending), used) != (bound, pending, str(bound)):
                return False
        return True

    try:
        await eventually(steady, within)
    except AssertionError as err:
        wanted = {t.source: (*v, str(v[0])) for t, v in teams.items()}
        raise AssertionError(f"(bound, pending, used) {seen} != {wanted}") from err


async def pending_message(team: Team) -> str:
    _, pending = await team.live()
    assert len(pending) == 1, [p.metadata.name for p in pending]
    name = pending[0].metadata.name
    return await team.pods.wait_event(name, "FailedScheduling")


async def test_the_design_walkthrough_borrow_then_reclaim(
    api: ApiClient,
    namespace: str,
    second_namespace: str,
    gpu_nodes: list[str],
    berth: BerthRun,
) -> None:
    scheduler = short(namespace)
    a = Team(api, namespace, scheduler, "team-a")
    b = Team(api, second_namespace, scheduler, "team-b")
    await only_these_quotas(api, {a.namespace, b.namespace})
    await a.apply_quota()
    await b.apply_quota()
    berth.start()

    # QuotaA fills its min, QuotaB is under its own: 10 - 4 - 3 = 3 GPUs left.
    await a.apply_workload()
    await b.apply_workload()
    await settle({a: (4, 0), b: (3, 0)})

    # team-a wants the 3 GPUs left: it may use 2 of them, borrowed from QuotaB's idle min.
    await a.scale(7)
    await settle({a: (6, 1), b: (3, 0)})
    name = (await a.live())[1][0].metadata.name
    nodes = await _node_count(api)
    assert await pending_message(a) == (
        f"0/{nodes} nodes are available: Pod {a.namespace}/{name} is rejected because "
        f"ElasticQuota {a.namespace} is more than Max (nvidia.com/gpu: 6 used + 1 requested "
        f"> 6). preemption: 0/{nodes} nodes are available: {nodes} No preemption victims "
        "found for incoming pod."
    )
    over_max = await a.quota_events("OverMax")
    assert over_max, "kubectl describe elasticquota shows no OverMax event"
    assert "is more than Max" in over_max[0].message
    await a.scale(6)
    await settle({a: (6, 0), b: (3, 0)})

    # team-b wants its min back: the one free GPU, then 2 reclaimed from team-a by
    # preemption, whatever their priority. team-a's Deployment recreates the evicted
    # replicas, which stay Pending: QuotaA is at its min and the sum of mins is reached.
    await b.scale(6)
    await settle({a: (4, 2), b: (6, 0)}, within=90)
    recreated = (await a.live())[1][0].metadata.name
    events = await a.pods.events(recreated, "FailedScheduling")
    assert any("total ElasticQuota used is more than Min" in e.message for e in events)
    assert await b.quota_events("OverMinTotal"), "QuotaB has no event for the reclaim"
    preempted = [
        e
        for e in (await CoreV1Api(api).list_namespaced_event(a.namespace)).items
        if e.reason == "Preempted"
    ]
    assert len({e.involved_object.name for e in preempted}) == 2


async def _node_count(api: ApiClient) -> int:
    return len((await CoreV1Api(api).list_node()).items)


def gpu_pod(name: str, scheduler: str) -> dict[str, Any]:
    body = pod_body(name, scheduler, cpu="100m")
    body["spec"]["containers"][0]["resources"]["limits"] = {GPU: "1"}
    return body


async def test_a_crashed_scheduler_rebuilds_quota_use_and_admits_no_more(
    api: ApiClient,
    namespace: str,
    second_namespace: str,
    gpu_nodes: list[str],
    berth: BerthRun,
) -> None:
    scheduler = short(namespace)
    await only_these_quotas(api, {namespace})
    quota = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ElasticQuota",
        "metadata": {"name": "gpus"},
        "spec": {"min": {GPU: "3"}, "max": {GPU: "3"}},
    }
    await CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, quota
    )
    team = Team(api, namespace, scheduler, "")
    team.quota_name = "gpus"
    berth.start()
    for i in range(3):
        await team.pods.create(gpu_pod(f"p{i}", scheduler))
    await settle({team: (3, 0)})

    # The scheduler dies; pods keep coming while it is down.
    berth.kill()
    for i in range(3, 5):
        await team.pods.create(gpu_pod(f"p{i}", scheduler))
    free = Pods(api, second_namespace)
    await free.create(gpu_pod("no-quota", scheduler))
    berth.start()

    # Restarted, it counts the 3 bound pods before admitting any: both new pods are over
    # max, while the namespace without a quota is not quota-checked at all.
    await free.wait_bound("no-quota")
    nodes = await _node_count(api)
    for name in ("p3", "p4"):
        assert await team.pods.wait_event(name, "FailedScheduling") == (
            f"0/{nodes} nodes are available: Pod {namespace}/{name} is rejected because "
            f"ElasticQuota {namespace} is more than Max (nvidia.com/gpu: 3 used + 1 requested "
            f"> 3). preemption: 0/{nodes} nodes are available: {nodes} No preemption victims "
            "found for incoming pod."
        )
    await settle({team: (3, 2)})

    # One bound pod leaves: exactly one pending pod takes its place.
    await team.pods.delete("p0")
    await settle({team: (3, 1)})
