"""LoadAwareScheduling on the local cluster: NodeMetric status written by the test as an
agent would, then by a real `berth agent`; Berth's scheduler in the test's event loop.

Each test's pods select its own kwok nodes by label, so the session's other nodes (no
NodeMetric: they would pass) stay out of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes, Pods, config_for, pod_body, running
from tests.integration.processes import process
from tests.support import eventually

GROUP, VERSION, PLURAL = "slo.koordinator.sh", "v1alpha1", "nodemetrics"
MERGE = "application/merge-patch+json"
THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"


def short(namespace: str) -> str:
    return "la-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def stamp(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """The test's kwok nodes, their NodeMetrics and a label its pods select them by."""

    def __init__(self, api: ApiClient, group: str) -> None:
        self.api = api
        self.group = group
        self.nodes = Nodes(api, group)
        self.custom = CustomObjectsApi(api)
        self.metrics: list[str] = []

    async def node(
        self, suffix: str, cpu: str = "4", annotations: dict[str, str] | None = None
    ) -> str:
        name = await self.nodes.add(
            suffix,
            labels={"berth.test/group": self.group},
            allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"},
        )
        if annotations:
            await self.nodes.core.patch_node(name, {"metadata": {"annotations": annotations}})
        return name

    async def report(self, node: str, cpu: str, *, seconds_ago: float = 0) -> None:
        """What an agent writes: usage at updateTime (the NodeMetric made first if needed)."""
        if node not in self.metrics:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "NodeMetric",
                "metadata": {"name": node},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 1}},
            }
            with contextlib.suppress(ApiException):  # a NodeMetric operator may have made it
                await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            self.metrics.append(node)
        status = {
            "updateTime": stamp(seconds_ago),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
        }
        await self.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, node, {"status": status}, _content_type=MERGE
        )

    def pod(self, name: str, scheduler: str, cpu: str = "1") -> dict[str, Any]:
        return pod_body(
            name, scheduler, cpu=cpu, memory="256Mi", nodeSelector={"berth.test/group": self.group}
        )

    async def close(self) -> None:
        for name in self.metrics:
            await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        await self.nodes.delete_all()


@pytest.fixture
async def cluster(api: ApiClient, crds: None, namespace: str) -> AsyncIterator[Cluster]:
    made = Cluster(api, short(namespace))
    try:
        yield made
    finally:
        await made.close()


def load_aware(name: str, *, only_load_scores: bool = False) -> Any:
    plugins: dict[str, Any] = {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]}}
    if only_load_scores:  # request-based spreading would hide what load-awareness does
        plugins["score"] = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": "LoadAwareScheduling"}],
        }
    return config_for(name, {"plugins": plugins})


async def test_expired_metric_and_thresholds_filter_nodes(
    api: ApiClient, namespace: str, cluster: Cluster
) -> None:
    stale = await cluster.node("stale")
    hot = await cluster.node("hot")  # 4 cpu, 2.8 used: 70% > 65%
    strict = await cluster.node(
        "strict", annotations={THRESHOLDS: '{"usageThresholds": {"cpu": 40}}'}
    )
    cool = await cluster.node("cool")
    await cluster.report(stale, "0", seconds_ago=181)
    await cluster.report(hot, "2800m")
    await cluster.report(strict, "1800m")  # 45%: under 65, over its own 40
    await cluster.report(cool, "1500m")
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, load_aware(scheduler)):
        # The filter reads the report alone: 2 cpu more would be 88% of cool, and fits.
        await pods.create(cluster.pod("fits", scheduler, cpu="2"))
        assert await pods.wait_bound("fits") == cool
        await cluster.report(cool, "3")  # cool's next report: 75%
        await pods.create(cluster.pod("waits", scheduler, cpu="100m"))
        nodes = len((await pods.core.list_node()).items)
        selector = nodes - 4
        await pods.wait_message(
            "waits",
            f"0/{nodes} nodes are available: 1 node(s) nodeMetric expired, "
            f"3 node(s) cpu usage exceed threshold, {selector} node(s) didn't match Pod's "
            f"node affinity/selector. preemption: 0/{nodes} nodes are available: {nodes} "
            "Preemption is not helpful for scheduling.",
            within=60,
        )


async def test_estimates_never_refuse_a_pod_on_idle_nodes(
    api: ApiClient, namespace: str, cluster: Cluster
) -> None:
    """Design 004: only the latest report is filtered on. A 500m pod with a 4-cpu limit
    (estimated at 3.4 cpu) and a 3.2-cpu Guaranteed pod (2.72 cpu) fit idle 4-cpu nodes."""
    for suffix in ("a", "b"):
        await cluster.report(await cluster.node(suffix), "0")
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    limited = cluster.pod("limited", scheduler, cpu="500m")
    limited["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "4"}
    guaranteed = cluster.pod("guaranteed", scheduler)
    whole = {"cpu": "3200m", "memory": "1Gi"}
    guaranteed["spec"]["containers"][0]["resources"] = {"requests": whole, "limits": whole}
    async with running(api, load_aware(scheduler)):
        await pods.create(limited)
        await pods.create(guaranteed)
        assert await pods.wait_bound("limited", within=60) in cluster.nodes.names
        assert await pods.wait_bound("guaranteed", within=60) in cluster.nodes.names


async def test_a_daemonset_pod_lands_on_a_busy_node(
    api: ApiClient, namespace: str, cluster: Cluster
) -> None:
    busy = await cluster.node("busy")
    await cluster.report(busy, "3900m")  # 98%
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, load_aware(scheduler)):
        await pods.create(cluster.pod("plain", scheduler, cpu="100m"))
        message = await pods.wait_event("plain", "FailedScheduling", within=60)
        assert "1 node(s) cpu usage exceed threshold" in message
        template = cluster.pod("agent", scheduler, cpu="100m")
        daemonset = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": template["spec"]},
            },
        }
        await AppsV1Api(api).create_namespaced_daemon_set(namespace, daemonset)

        async def placed() -> bool:
            listed = await pods.core.list_namespaced_pod(namespace, label_selector="app=agent")
            return any(p.spec.node_name == busy for p in listed.items)

        await eventually(placed, within=90)
        assert not await pods.node_of("plain")


async def test_a_burst_onto_cold_nodes_spreads(
    api: ApiClient, namespace: str, cluster: Cluster
) -> None:
    names = [await cluster.node(f"n{i}", cpu="32") for i in range(5)]
    for i, name in enumerate(names):
        await cluster.report(name, "1" if i == 0 else "2")  # n0 is the coldest
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, load_aware(scheduler, only_load_scores=True)):
        for i in range(50):
            await pods.create(cluster.pod(f"burst-{i}", scheduler))

        async def all_bound() -> bool:
            listed = await pods.core.list_namespaced_pod(namespace)
            return sum(1 for p in listed.items if p.spec.node_name) == 50

        await eventually(all_bound, within=60)
    listed = await pods.core.list_namespaced_pod(namespace)
    per_node: dict[str, int] = {}
    for pod in listed.items:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
    # Without counting the burst's own pods, all 32 that fit would go to n0 first.
    assert max(per_node.values()) <= 12, per_node
    assert set(per_node) == set(names)


async def test_the_agents_report_is_what_the_scheduler_uses(
    api: ApiClient, namespace: str, kubeconfig_path: str, cluster: Cluster, tmp_path: Path
) -> None:
    node = await cluster.node("agent", cpu="64")
    await cluster.report(node, "0", seconds_ago=600)  # stale: the node is filtered out
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, load_aware(scheduler)):
        await pods.create(cluster.pod("waits", scheduler, cpu="100m"))
        await pods.wait_event("waits", "FailedScheduling")
        assert not await pods.node_of("waits")
        argv = [sys.executable, "-m", "berth.cli", "agent", f"--node-name={node}"]
        argv += [f"--kubeconfig={kubeconfig_path}", f"--cgroup-root={tmp_path}"]
        with process(argv, tmp_path / "agent.log"):
            # The agent's fresh report of this machine's usage makes the node schedulable.
            assert await pods.wait_bound("waits", within=60) == node
        metric = await cluster.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
        assert metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["memory"] != "1Gi"
