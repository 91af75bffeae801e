"""The ElasticQuota operator (a real `berth run --no-scheduler` process): status.used follows
pods being bound, finishing and deleted; a second quota in a namespace is marked ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from tests.integration.cluster import Pods, pod_body
from tests.integration.processes import BerthRun
from tests.support import eventually

GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
MERGE = "application/merge-patch+json"


@pytest.fixture
def operator(kubeconfig_path: str, crds: None, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "operator.log"
    config = tmp_path / "config.yaml"
    config.write_text("leaderElection: {leaderElect: false}\n")  # one process: no election
    process = BerthRun(kubeconfig_path, config, log, scheduler=False).start()
    try:
        yield log
    finally:
        process.stop()


def quota(name: str, minimum: dict[str, Any], maximum: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ElasticQuota",
        "metadata": {"name": name},
        "spec": {"min": minimum, "max": maximum},
    }


def gpu_pod(name: str, cpu: str, gpus: int, node: str | None = "kwok-node-0") -> dict[str, Any]:
    body = pod_body(name, "nobody", cpu=cpu, memory="1Gi")
    body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if node:
        body["spec"]["nodeName"] = node
    return body


async def test_used_follows_pods_and_duplicates_are_ignored(
    api: ApiClient, namespace: str, operator: Path
) -> None:
    custom = CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        quota("team", {"cpu": "2", "nvidia.com/gpu": 4}, {"cpu": "4", "nvidia.com/gpu": 6}),
    )
    status: dict[str, Any] = {}

    async def used_is(expected: dict[str, str]) -> bool:
        obj = await custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "team")
        status.clear()
        status.update(obj.get("status") or {})
        return status.get("used") == expected

    async def wait_used(expected: dict[str, str]) -> None:
        try:
            await eventually(lambda: used_is(expected), within=30)
        except AssertionError as err:
            raise AssertionError(f"used {status.get('used')} != {expected}") from err

    # Every resource named in min or max appears, at zero.
    await wait_used({"cpu": "0", "nvidia.com/gpu": "0"})
    active = [c for c in status["conditions"] if c["type"] == "Active"]
    assert active
    assert active[0]["status"] == "True"

    pods = Pods(api, namespace)
    await pods.create(gpu_pod("a", "1500m", 2))
    await pods.create(gpu_pod("b", "500m", 1))
    await pods.create(gpu_pod("pending", "8", 4, node=None))  # not bound: does not count
    await wait_used({"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "3"})

    # A pod that finished no longer counts.
    await CoreV1Api(api).patch_namespaced_pod_status(
        "b", namespace, {"status": {"phase": "Succeeded"}}, _content_type=MERGE
    )
    await wait_used({"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "2"})

    await pods.delete("a")
    await wait_used({"cpu": "0", "nvidia.com/gpu": "0"})

    # A second quota in the namespace is ignored, and says which one governs.
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, quota("second", {"cpu": "1"}, {"cpu": "2"})
    )

    async def second_ignored() -> bool:
        obj = await custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "second")
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(
            c["type"] == "Active"
            and c["status"] == "False"
            and c["reason"] == "DuplicateQuota"
            and "ElasticQuota team already governs" in c["message"]
            for c in conditions
        )

    await eventually(second_ignored, within=30)
