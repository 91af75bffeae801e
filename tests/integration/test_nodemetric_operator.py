"""The NodeMetric operator (a real `berth run --no-scheduler` process): one NodeMetric per
node, its collect policy from slo-controller-config, invalid configs reported and ignored.

The operator reads the ConfigMap from BERTH_NAMESPACE, here the test's own namespace, so the
tests never touch a shared one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.run import run_command
from tests.integration.cluster import Nodes
from tests.integration.nodemetrics import GROUP, PLURAL, VERSION, Metrics, made_nodes
from tests.integration.processes import process
from tests.support import eventually

CONFIGMAP, KEY = "slo-controller-config", "colocation-config"
MERGE = "application/merge-patch+json"
DEFAULT_POLICY = {
    "aggregateDurationSeconds": 300,
    "reportIntervalSeconds": 60,
    "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
    "nodeMemoryCollectPolicy": "usageWithoutPageCache",
}


@pytest.fixture
async def operator(
    api: ApiClient, kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path
) -> AsyncIterator[Path]:
    """The operator; the NodeMetrics it made for nodes other tests share are removed after."""
    custom = CustomObjectsApi(api)
    before = await custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    existing = {m["metadata"]["name"] for m in before["items"]}
    log = tmp_path / "operator.log"
    config = tmp_path / "config.yaml"
    config.write_text("leaderElection: {leaderElect: false}\n")  # one process: no election
    argv = run_command(
        kubeconfig_path, str(config), operators=True, scheduler=False, log_level="info"
    )
    try:
        with process(argv, log, env={"BERTH_NAMESPACE": namespace}):
            yield log
    finally:
        after = await custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        for name in {m["metadata"]["name"] for m in after["items"]} - existing:
            with contextlib.suppress(ApiException):
                await custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture
async def nodes(api: ApiClient) -> AsyncIterator[Nodes]:
    async with made_nodes(api, "nm") as made:
        yield made


class Config:
    """slo-controller-config in the test's namespace."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace

    async def write(self, text: str) -> None:
        body = {"metadata": {"name": CONFIGMAP}, "data": {KEY: text}}
        try:
            await self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise
            await self.core.patch_namespaced_config_map(
                CONFIGMAP, self.namespace, body, _content_type=MERGE
            )

    async def warnings(self) -> list[Any]:
        events = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={CONFIGMAP}"
        )
        return [e for e in events.items if e.type == "Warning"]


def policy(**changes: Any) -> dict[str, Any]:
    return {**DEFAULT_POLICY, **changes}


async def test_a_nodemetric_lives_and_dies_with_its_node(
    api: ApiClient, operator: Path, nodes: Nodes
) -> None:
    metrics = Metrics(api)
    name = await nodes.add("a")
    # No ConfigMap in the operator's namespace: the built-in defaults.
    await metrics.wait_policy(name, DEFAULT_POLICY)
    node = await CoreV1Api(api).read_node(name)
    owners = (metrics.last[name]["metadata"].get("ownerReferences")) or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Node", name, node.metadata.uid)]

    # Deleted by hand: it comes back.
    await metrics.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    await metrics.wait_policy(name, DEFAULT_POLICY)

    await CoreV1Api(api).delete_node(name)

    async def gone() -> bool:
        return await metrics.get(name) is None

    await eventually(gone, within=30)


async def test_colocation_config_reaches_every_nodemetric(
    api: ApiClient, namespace: str, operator: Path, nodes: Nodes
) -> None:
    metrics = Metrics(api)
    config = Config(api, namespace)
    pool = f"gpu-{uuid.uuid4().hex[:6]}"
    plain = await nodes.add("plain")
    gpu = await nodes.add("gpu", labels={"pool": pool})
    session_node = "kwok-node-0"  # a node the test did not make: every node follows
    await metrics.wait_policy(plain, DEFAULT_POLICY)

    def colocation(interval: int) -> str:
        return json.dumps(
            {
                "metricReportIntervalSeconds": interval,
                "metricMemoryCollectPolicy": "usageWithPageCache",
                "nodeConfigs": [
                    {
                        "name": "gpu",
                        "nodeSelector": {"matchLabels": {"pool": pool}},
                        "metricReportIntervalSeconds": 5,
                        "metricAggregatePolicy": {"durations": ["1m"]},
                    }
                ],
            }
        )

    cluster_20 = policy(reportIntervalSeconds=20, nodeMemoryCollectPolicy="usageWithPageCache")
    selected = policy(
        reportIntervalSeconds=5,
        nodeMemoryCollectPolicy="usageWithPageCache",
        nodeAggregatePolicy={"durations": ["1m"]},
    )
    await config.write(colocation(20))
    await metrics.wait_policy(plain, cluster_20)
    await metrics.wait_policy(session_node, cluster_20)
    await metrics.wait_policy(gpu, selected)

    # A changed ConfigMap reaches every NodeMetric again.
    cluster_25 = {**cluster_20, "reportIntervalSeconds": 25}
    await config.write(colocation(25))
    await metrics.wait_policy(plain, cluster_25)
    await metrics.wait_policy(session_node, cluster_25)
    await metrics.wait_policy(gpu, selected)

    # A node whose labels start matching the selector takes the selected policy.
    await CoreV1Api(api).patch_node(plain, {"metadata": {"labels": {"pool": pool}}})
    await metrics.wait_policy(plain, selected)

    # Invalid JSON: a Warning on the ConfigMap, every policy kept as it was.
    await config.write('{"metricReportIntervalSeconds": 7,')

    async def warned() -> bool:
        return any(e.reason == "InvalidColocationConfig" for e in await config.warnings())

    await eventually(warned, within=30)
    message = (await config.warnings())[-1].message
    assert "not valid JSON" in message
    # The last valid config still applies, to label changes too.
    await CoreV1Api(api).patch_node(plain, {"metadata": {"labels": {"pool": None}}})
    await metrics.wait_policy(plain, cluster_25)
    await asyncio.sleep(2)
    assert await metrics.policy(gpu) == selected
    assert await metrics.policy(session_node) == cluster_25

    # Valid again: applied again. Deleted: the defaults.
    await config.write(colocation(30))
    await metrics.wait_policy(session_node, {**cluster_20, "reportIntervalSeconds": 30})
    await CoreV1Api(api).delete_namespaced_config_map(CONFIGMAP, namespace)
    await metrics.wait_policy(session_node, DEFAULT_POLICY)
    await metrics.wait_policy(gpu, DEFAULT_POLICY)
