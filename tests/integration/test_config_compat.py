"""Upstream scheduler configurations, loaded by a real `berth run` exactly as written
(docs/examples/config-compat/), schedule as their Berth equivalents do; and `berth run`
without --config runs the profile the manifests install.

Each upstream file and its ``.berth.yaml`` equivalent run the same scenario in turn, one
`berth run` process at a time, on this test's kwok nodes; the outcome (each pod's node,
or that it was refused) must be the same, and the one the file's settings call for.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.run import run_command
from tests.integration.cluster import Nodes, Pods, numa_topology, pod_body
from tests.integration.processes import process
from tests.support import REPO, eventually

COMPAT = REPO / "docs" / "examples" / "config-compat"
GROUP_LABEL = "berth.test/group"
HOSTNAME = "kubernetes.io/hostname"
BATCH = {"koordinator.sh/priority-class": "koord-batch"}
REFUSED = "refused"
Outcome = dict[str, str]


def short(namespace: str) -> str:
    return "cc-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


@contextlib.asynccontextmanager
async def namespace_for_leases(api: ApiClient, name: str) -> AsyncIterator[None]:
    """The namespace a configuration's leader election keeps its Lease in."""
    core = CoreV1Api(api)
    try:
        await core.create_namespace({"metadata": {"name": name}})
        made = True
    except ApiException as err:
        if err.status != 409:
            raise
        made = False
    try:
        yield
    finally:
        if made:
            await core.delete_namespace(name)

            async def gone() -> bool:
                try:
                    await core.read_namespace(name)
                except ApiException as err:
                    return err.status == 404
                return False

            await eventually(gone, within=120)  # the next test may make it again


@contextlib.contextmanager
def berth_run(kubeconfig: str, config: Path | None, log: Path) -> Any:
    """`berth run` (the scheduler) with the file as it is, or without --config."""
    argv = run_command(kubeconfig, None if config is None else str(config), log_level="info")
    with process(argv, log) as child:
        yield child


async def decided(pods: Pods, name: str) -> str:
    """The pod's node once bound, or REFUSED once the scheduler said why it does not fit."""
    result: list[str] = []

    async def done() -> bool:
        node = await pods.node_of(name)
        if node:
            result.append(node)
            return True
        if await pods.events(name, "FailedScheduling"):
            result.append(REFUSED)
            return True
        return False

    await eventually(done, within=90)
    return result[0]


class Scenario:
    """This test's nodes and what they report; ``run`` places pods under one config."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.group = short(namespace)
        self.nodes = Nodes(api, self.group)
        self.custom = CustomObjectsApi(api)
        self.cleanup: list[tuple[str, str, str, str]] = []

    async def node(self, suffix: str, cpu: str = "4") -> str:
        return await self.nodes.add(
            suffix,
            labels={GROUP_LABEL: self.group},
            allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"},
        )

    async def created(self, group: str, version: str, plural: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        with contextlib.suppress(ApiException):  # an operator may have made it
            await self.custom.create_cluster_custom_object(group, version, plural, body)
        self.cleanup.append((group, version, plural, name))

    async def metric(self, node: str, cpu: str, windows: dict[str, str]) -> None:
        """A NodeMetric report: ``cpu`` now, and p90/p95 over 5m as ``windows`` say."""
        group, version, plural = "slo.koordinator.sh", "v1alpha1", "nodemetrics"
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 1}},
        }
        await self.created(group, version, plural, body)
        status = {
            "updateTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}},
                "aggregatedNodeUsages": [
                    {
                        "duration": "5m",
                        "usage": {k: {"resources": {"cpu": v}} for k, v in windows.items()},
                    }
                ],
            },
        }
        await self.custom.patch_cluster_custom_object_status(
            group, version, plural, node, {"status": status},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    async def topology(self, node: str, zones: int) -> None:
        """A NodeResourceTopology of ``zones`` free zones of 4 cpu, single-numa-node."""
        group, version, plural = "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies"
        body = numa_topology(node, ["4"] * zones)
        await self.created(group, version, plural, body)
        await asyncio.sleep(1.1)  # decisions strictly after the report's second

    def pod(self, name: str, scheduler: str, **kwargs: Any) -> dict[str, Any]:
        selector = {GROUP_LABEL: self.group, **kwargs.pop("node_selector", {})}
        return pod_body(name, scheduler, nodeSelector=selector, **kwargs)

    async def close(self) -> None:
        for group, version, plural, name in self.cleanup:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(group, version, plural, name)
        await self.nodes.delete_all()


@pytest.fixture
async def scenario(api: ApiClient, crds: None, namespace: str) -> AsyncIterator[Scenario]:
    made = Scenario(api, namespace)
    try:
        yield made
    finally:
        await made.close()


async def cleared(pods: Pods) -> None:
    """Delete the run's pods and wait until they are gone (they would count as load)."""
    listed = await pods.core.list_namespaced_pod(pods.namespace)
    for item in listed.items:
        with contextlib.suppress(ApiException):
            await pods.delete(item.metadata.name)

    async def gone() -> bool:
        return not (await pods.core.list_namespaced_pod(pods.namespace)).items

    await eventually(gone, within=60)


Run = Callable[[Pods, str], Awaitable[Outcome]]


async def load_aware_run(scenario: Scenario, hot: str, pods: Pods, tag: str) -> Outcome:
    """A batch pod anywhere, then one only on the node whose p95 usage is high."""
    await pods.create(scenario.pod(f"{tag}-any", "koord-scheduler", cpu="1", labels=BATCH))
    anywhere = await decided(pods, f"{tag}-any")
    only_hot = scenario.pod(
        f"{tag}-on-hot", "koord-scheduler", cpu="1", labels=BATCH, node_selector={HOSTNAME: hot}
    )
    await pods.create(only_hot)
    return {"any": anywhere, "on-hot": await decided(pods, f"{tag}-on-hot")}


async def numa_run(scenario: Scenario, pods: Pods, tag: str) -> Outcome:
    """Four Guaranteed 3-cpu pods onto a node whose report of three free 4-cpu zones never
    changes: each pod after the first is refused with the ledger on."""
    for i in range(4):
        body = scenario.pod(f"{tag}-p{i}", "topo-aware-scheduler")
        body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "3", "memory": "1Gi"}}
        await pods.create(body)
    outcome = {f"p{i}": await decided(pods, f"{tag}-p{i}") for i in range(4)}
    return {"bound": str(sum(1 for v in outcome.values() if v != REFUSED))}


async def compare(
    api: ApiClient, namespace: str, kubeconfig: str, tmp_path: Path, name: str, run: Run
) -> tuple[Outcome, Outcome]:
    """The scenario under the upstream file, then under its Berth equivalent."""
    pods = Pods(api, namespace)
    outcomes = []
    for tag, path in (
        ("up", COMPAT / name),
        ("berth", COMPAT / name.replace(".yaml", ".berth.yaml")),
    ):
        leases = yaml.safe_load(path.read_text()).get("leaderElection") or {}
        lease_namespace = leases.get("resourceNamespace", "berth-system")
        async with namespace_for_leases(api, lease_namespace):
            with berth_run(kubeconfig, path, tmp_path / f"{tag}.log"):
                outcomes.append(await run(pods, tag))
        await cleared(pods)
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # p95 over 5m is 88% on hot, over aggregated.usageThresholds cpu 70.
        ("koordinator-load-aware-scheduling.yaml", {"any": "cool", "on-hot": REFUSED}),
        # Thresholds 0 (off): the lower current usage of hot wins the score.
        ("koordinator-scheduler.yaml", {"any": "hot", "on-hot": "hot"}),
    ],
)
async def test_koordinator_configurations_schedule_as_their_berth_equivalents(
    api: ApiClient,
    namespace: str,
    kubeconfig_path: str,
    scenario: Scenario,
    tmp_path: Path,
    name: str,
    expected: Outcome,
) -> None:
    hot = await scenario.node("hot")
    cool = await scenario.node("cool")
    await scenario.metric(hot, "1", {"p90": "3500m", "p95": "3500m"})
    await scenario.metric(cool, "1500m", {"p90": "1500m", "p95": "1500m"})
    names = {hot: "hot", cool: "cool", REFUSED: REFUSED}

    async def run(pods: Pods, tag: str) -> Outcome:
        return {k: names[v] for k, v in (await load_aware_run(scenario, hot, pods, tag)).items()}

    upstream, berth = await compare(api, namespace, kubeconfig_path, tmp_path, name, run)
    assert upstream == berth == expected


@pytest.mark.parametrize(
    ("name", "bound"),
    [
        # No cache: the stale report says every zone is free, all four land.
        ("scheduler-plugins-noderesourcetopology.yaml", "4"),
        # The reserve plugin's cache: the first pod is pending in the report, no zone is
        # surely free for the next.
        ("scheduler-plugins-noderesourcetopology-cache.yaml", "1"),
    ],
)
async def test_scheduler_plugins_configurations_schedule_as_their_berth_equivalents(
    api: ApiClient,
    namespace: str,
    kubeconfig_path: str,
    scenario: Scenario,
    tmp_path: Path,
    name: str,
    bound: str,
) -> None:
    node = await scenario.node("numa", cpu="12")
    await scenario.topology(node, zones=3)

    async def run(pods: Pods, tag: str) -> Outcome:
        return await numa_run(scenario, pods, tag)

    upstream, berth = await compare(api, namespace, kubeconfig_path, tmp_path, name, run)
    assert upstream == berth == {"bound": bound}


async def elastic_quota(scenario: Scenario, namespace: str, cpu: str) -> None:
    """The namespace's ElasticQuota, ``cpu`` both its min and its max."""
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "team", "namespace": namespace},
        "spec": {"min": {"cpu": cpu}, "max": {"cpu": cpu}},
    }
    await scenario.custom.create_namespaced_custom_object(
        "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
    )


async def test_without_config_an_elasticquota_max_is_enforced(
    api: ApiClient, namespace: str, kubeconfig_path: str, scenario: Scenario, tmp_path: Path
) -> None:
    """A new user's first try: `berth run` with no --config, an ElasticQuota with max 6
    cpu, seven 1-cpu pods: six bind, the seventh is refused by the quota."""
    await scenario.node("a", cpu="16")
    await elastic_quota(scenario, namespace, "6")
    pods = Pods(api, namespace)
    async with namespace_for_leases(api, "berth-system"):
        with berth_run(kubeconfig_path, None, tmp_path / "berth.log"):
            for i in range(6):
                await pods.create(scenario.pod(f"p{i}", "berth-scheduler", cpu="1"))
            for i in range(6):
                assert await decided(pods, f"p{i}") != REFUSED
            await pods.create(scenario.pod("p6", "berth-scheduler", cpu="1"))
            message = await pods.wait_event("p6", "FailedScheduling", within=90)
            assert f"ElasticQuota {namespace} is more than Max" in message
            assert not await pods.node_of("p6")


async def test_the_koord_scheduler_configuration_enforces_an_elasticquota_max(
    api: ApiClient, namespace: str, kubeconfig_path: str, scenario: Scenario, tmp_path: Path
) -> None:
    """Koordinator's quota plugin by its own name, ElasticQuota: with a max of 1 cpu in the
    namespace, the second 1-cpu pod is refused, as under the Berth equivalent; and, as
    Koordinator does, each makes its root, default and system quotas in the
    quotaGroupNamespace (absent before: the namespace is made for each run)."""
    await scenario.node("q")
    await elastic_quota(scenario, namespace, "1")
    made = ("koordinator-root-quota", "koordinator-default-quota", "koordinator-system-quota")

    async def reserved() -> bool:
        listed = await scenario.custom.list_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", "koordinator-system", "elasticquotas"
        )
        return sorted(o["metadata"]["name"] for o in listed["items"]) == sorted(made)

    async def run(pods: Pods, tag: str) -> Outcome:
        await eventually(reserved, within=60)
        outcome = {}
        for i in range(2):
            await pods.create(scenario.pod(f"{tag}-p{i}", "koord-scheduler", cpu="1"))
            outcome[f"p{i}"] = "bound" if await decided(pods, f"{tag}-p{i}") != REFUSED else REFUSED
        return outcome

    name = "koordinator-scheduler.yaml"
    upstream, berth = await compare(api, namespace, kubeconfig_path, tmp_path, name, run)
    assert upstream == berth == {"p0": "bound", "p1": REFUSED}
