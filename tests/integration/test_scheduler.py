"""The scheduler core on the real cluster: each standard plugin with kube-scheduler's message,
requeue on cluster events, preemption (with and without a PDB), bind failure recovery and
the configuration file.

Each test runs its own Scheduler with a profile named after its namespace and adds kwok
nodes labelled for it; its pods select those nodes, so the other nodes of the cluster
appear in messages as "didn't match Pod's node affinity/selector".
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
)

from tests.integration.cluster import (
    DeniedBindings,
    Nodes,
    Pods,
    PriorityClasses,
    config_for,
    pod_body,
    running,
)
from tests.support import eventually

SMALL = {"cpu": "4", "memory": "8Gi", "pods": "110"}
SELECTOR_REASON = "node(s) didn't match Pod's node affinity/selector"


@pytest.fixture
async def nodes(api: ApiClient, namespace: str) -> AsyncIterator[Nodes]:
    made = Nodes(api, short(namespace))
    yield made
    await made.delete_all()


@pytest.fixture
async def priorities(api: ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    classes = PriorityClasses(api, short(namespace))
    yield {"low": await classes.add("low", 10), "high": await classes.add("high", 1000)}
    await classes.delete_all()


@pytest.fixture
def pods(api: ApiClient, namespace: str) -> Pods:
    return Pods(api, namespace)


def short(namespace: str) -> str:
    """A name for the test's nodes and labels that fits in 63 characters."""
    return "t-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def mine(namespace: str) -> dict[str, str]:
    return {"berth-test": short(namespace)}


async def node_count(api: ApiClient) -> int:
    return len((await CoreV1Api(api).list_node()).items)


def expected(total: int, reasons: dict[str, int], preemption: dict[str, int] | None) -> str:
    """kube-scheduler's message: reasons as "count reason", sorted as text."""

    def text(histogram: dict[str, int]) -> str:
        return ", ".join(sorted(f"{n} {r}" for r, n in histogram.items() if n))

    message = f"0/{total} nodes are available: {text(reasons)}."
    if preemption is not None:
        message += f" preemption: 0/{total} nodes are available: {text(preemption)}."
    return message


async def test_binds_pods_and_spreads_them(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    for i in range(3):
        await nodes.add(f"n{i}", labels=mine(namespace), allocatable=SMALL)
    name = short(namespace)
    async with running(api, config_for(name)):
        for i in range(6):
            await pods.create(pod_body(f"p{i}", name, cpu="1", nodeSelector=mine(namespace)))
        placed = [await pods.wait_bound(f"p{i}") for i in range(6)]
        assert sorted(placed.count(n) for n in set(placed)) == [2, 2, 2]
        message = await pods.wait_event("p0", "Scheduled")
        assert message == f"Successfully assigned {namespace}/p0 to {placed[0]}"


async def test_insufficient_taint_and_selector_message(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    await nodes.add("small", labels=mine(namespace), allocatable=SMALL)
    await nodes.add(
        "gpu",
        labels=mine(namespace),
        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    )
    total = await node_count(api)
    others = total - 2
    name = short(namespace)
    async with running(api, config_for(name)):
        await pods.create(pod_body("big", name, cpu="8", nodeSelector=mine(namespace)))
        await pods.wait_message(
            "big",
            expected(
                total,
                {
                    "Insufficient cpu": 1,
                    "node(s) had untolerated taint {dedicated: gpu}": 1,
                    SELECTOR_REASON: others,
                },
                # 8 cpu asked of a 4-cpu node: eviction cannot help there either.
                {"Preemption is not helpful for scheduling": others + 2},
            ),
        )
        event = await pods.wait_event("big", "FailedScheduling")
        assert event.startswith(f"0/{total} nodes are available: 1 Insufficient cpu")


async def test_unschedulable_node_and_too_many_pods(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    await nodes.add("cordoned", labels=mine(namespace), unschedulable=True)
    await nodes.add("tiny", labels=mine(namespace), allocatable={**SMALL, "pods": "1"})
    total = await node_count(api)
    name = short(namespace)
    async with running(api, config_for(name)):
        await pods.create(pod_body("first", name, cpu="100m", nodeSelector=mine(namespace)))
        assert await pods.wait_bound("first") == f"{short(namespace)}-tiny"
        await pods.create(pod_body("second", name, cpu="100m", nodeSelector=mine(namespace)))
        await pods.wait_message(
            "second",
            expected(
                total,
                {
                    "Too many pods": 1,
                    "node(s) were unschedulable": 1,
                    SELECTOR_REASON: total - 2,
                },
                {
                    "No preemption victims found for incoming pod": 1,
                    "Preemption is not helpful for scheduling": total - 1,
                },
            ),
        )


async def test_host_ports_conflict(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    await nodes.add("web", labels=mine(namespace))
    total = await node_count(api)
    name = short(namespace)
    ports = [
        {
            "name": "c",
            "image": "registry.local/app",
            "ports": [{"containerPort": 80, "hostPort": 8080}],
        }
    ]
    async with running(api, config_for(name)):
        await pods.create(pod_body("a", name, nodeSelector=mine(namespace), containers=ports))
        await pods.wait_bound("a")
        await pods.create(pod_body("b", name, nodeSelector=mine(namespace), containers=ports))
        await pods.wait_message(
            "b",
            expected(
                total,
                {
                    "node(s) didn't have free ports for the requested pod ports": 1,
                    SELECTOR_REASON: total - 1,
                },
                {
                    "No preemption victims found for incoming pod": 1,
                    "Preemption is not helpful for scheduling": total - 1,
                },
            ),
        )


async def test_affinity_and_taint_preferences_choose_the_node(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    await nodes.add("plain", labels={**mine(namespace), "disk": "hdd"})
    await nodes.add("ssd", labels={**mine(namespace), "disk": "ssd"})
    await nodes.add(
        "soft",
        labels={**mine(namespace), "disk": "hdd"},
        taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}],
    )
    name = short(namespace)
    preferred = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "berth-test", "operator": "In", "values": [short(namespace)]}
                        ]
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                    },
                }
            ],
        }
    }
    async with running(api, config_for(name)):
        for i in range(3):
            await pods.create(pod_body(f"ssd{i}", name, cpu="100m", affinity=preferred))
            assert await pods.wait_bound(f"ssd{i}") == f"{short(namespace)}-ssd"
        # Without a preference, the PreferNoSchedule taint keeps pods off "soft" while
        # "plain" is as good: the taint score (weight 3) decides.
        await pods.create(
            pod_body(
                "plain",
                name,
                cpu="100m",
                nodeSelector={**mine(namespace), "disk": "hdd"},
            )
        )
        assert await pods.wait_bound("plain") == f"{short(namespace)}-plain"


async def test_unschedulable_pod_is_bound_when_a_fitting_node_is_added(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    name = short(namespace)
    wanted = {**mine(namespace), "pool": "late"}
    async with running(api, config_for(name)) as scheduler:
        await pods.create(pod_body("waiting", name, cpu="1", nodeSelector=wanted))
        await pods.wait_event("waiting", "FailedScheduling")
        assert scheduler.queue.counts()["unschedulable"] + scheduler.queue.counts()["backoff"] == 1
        added = await nodes.add("late", labels=wanted)
        assert await pods.wait_bound("waiting", within=15) == added


async def test_preemption_evicts_lower_priority_pods(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods, priorities: dict[str, str]
) -> None:
    node = await nodes.add("only", labels=mine(namespace), allocatable=SMALL)
    name = short(namespace)
    async with running(api, config_for(name)):
        for i in range(2):
            await pods.create(
                pod_body(
                    f"low{i}",
                    name,
                    cpu="2",
                    priority_class=priorities["low"],
                    nodeSelector=mine(namespace),
                )
            )
            await pods.wait_bound(f"low{i}")
        await pods.create(
            pod_body(
                "high",
                name,
                cpu="2",
                priority_class=priorities["high"],
                nodeSelector=mine(namespace),
            )
        )
        assert await pods.wait_bound("high") == node
        remaining = (await CoreV1Api(api).list_namespaced_pod(namespace)).items
        survivors = {p.metadata.name for p in remaining if p.metadata.deletion_timestamp is None}
        # 2 cpu needed on a 4-cpu node holding 2+2: one low pod is enough.
        assert len(survivors & {"low0", "low1"}) == 1
        victims = {"low0", "low1"} - survivors
        preempted = await pods.events(victims.pop(), "Preempted")
        assert preempted, "the victim has no Preempted event"
        assert "Preempted by pod" in preempted[0].message


async def test_preemption_prefers_the_node_without_pdb_violations(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods, priorities: dict[str, str]
) -> None:
    guarded = await nodes.add("guarded", labels=mine(namespace), allocatable=SMALL)
    free = await nodes.add("free", labels=mine(namespace), allocatable=SMALL)
    name = short(namespace)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await PolicyV1Api(api).create_namespaced_pod_disruption_budget(namespace, pdb)
    async with running(api, config_for(name)) as scheduler:
        await pods.create(
            pod_body(
                "g",
                name,
                cpu="4",
                priority_class=priorities["low"],
                labels={"app": "guarded"},
                nodeName=guarded,
            )
        )
        await pods.create(
            pod_body(
                "f",
                name,
                cpu="4",
                priority_class=priorities["low"],
                labels={"app": "other"},
                nodeName=free,
            )
        )

        async def pdb_counted() -> bool:
            budget = await PolicyV1Api(api).read_namespaced_pod_disruption_budget("keep", namespace)
            status = budget.status
            return bool(status and status.current_healthy == 1 and status.disruptions_allowed == 0)

        await eventually(pdb_counted)

        async def view_has_pdb() -> bool:
            return f"{namespace}/keep" in scheduler.view.pdbs and (
                scheduler.view.pdbs[f"{namespace}/keep"].get("status", {}).get("currentHealthy")
                == 1
            )

        await eventually(view_has_pdb)
        await pods.create(
            pod_body(
                "high",
                name,
                cpu="4",
                priority_class=priorities["high"],
                nodeSelector=mine(namespace),
            )
        )
        assert await pods.wait_bound("high") == free
        assert (await pods.get("g")).metadata.deletion_timestamp is None


async def test_preemption_violates_a_pdb_when_that_is_the_only_way(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods, priorities: dict[str, str]
) -> None:
    """kube-scheduler's last resort: budgets steer the choice of victims, they do not forbid
    it. The only victim's budget allows no disruption: it is deleted, the preemptor binds."""
    guarded = await nodes.add("guarded", labels=mine(namespace), allocatable=SMALL)
    name = short(namespace)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await PolicyV1Api(api).create_namespaced_pod_disruption_budget(namespace, pdb)
    async with running(api, config_for(name)) as scheduler:
        await pods.create(
            pod_body(
                "g",
                name,
                cpu="4",
                priority_class=priorities["low"],
                labels={"app": "guarded"},
                nodeName=guarded,
            )
        )

        async def pdb_counted() -> bool:
            budget = await PolicyV1Api(api).read_namespaced_pod_disruption_budget("keep", namespace)
            status = budget.status
            seen = scheduler.view.pdbs.get(f"{namespace}/keep", {}).get("status", {})
            return bool(
                status and status.disruptions_allowed == 0 and seen.get("currentHealthy") == 1
            )

        await eventually(pdb_counted, 60)
        await pods.create(
            pod_body(
                "high",
                name,
                cpu="4",
                priority_class=priorities["high"],
                nodeSelector=mine(namespace),
            )
        )
        preempted = await pods.wait_event("g", "Preempted", 60)
        assert "Preempted by pod" in preempted
        assert await pods.wait_bound("high", 60) == guarded


async def test_a_failed_binding_is_forgotten_and_retried(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods
) -> None:
    node = await nodes.add("guarded", labels=mine(namespace))
    name = short(namespace)
    allowed = f"object.target.name != '{node}'"
    async with DeniedBindings(
        api, namespace, f"deny-bind-{name}", allowed, "bindings paused"
    ) as policy:
        await pods.create(pod_body("probe", "nobody"))
        await policy.in_force("probe", node)
        async with running(api, config_for(name)) as scheduler:
            await pods.create(pod_body("p", name, cpu="1", nodeSelector=mine(namespace)))
            message = await pods.wait_event("p", "FailedScheduling")
            assert "bindings paused" in message
            assert await pods.node_of("p") is None

            async def forgotten() -> bool:
                row = scheduler.view.nodes.index[node]
                return not scheduler.view.nodes.pods[row]

            await eventually(forgotten)
            await policy.lift()
            assert await pods.wait_bound("p", within=30) == node


@pytest.mark.parametrize("taint_filter", ["enabled", "disabled"])
async def test_configuration_enables_and_disables_plugins(
    api: ApiClient, namespace: str, nodes: Nodes, pods: Pods, taint_filter: str
) -> None:
    tainted = await nodes.add(
        "tainted",
        labels=mine(namespace),
        taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
    )
    name = short(namespace)
    extra: dict[str, Any] = {}
    if taint_filter == "disabled":
        extra = {"plugins": {"filter": {"disabled": [{"name": "TaintToleration"}]}}}
    async with running(api, config_for(name, extra)):
        await pods.create(pod_body("p", name, cpu="1", nodeSelector=mine(namespace)))
        if taint_filter == "disabled":
            assert await pods.wait_bound("p") == tainted
        else:
            message = await pods.wait_event("p", "FailedScheduling")
            assert "1 node(s) had untolerated taint {dedicated: infra}" in message
            assert await pods.node_of("p") is None


async def test_the_view_follows_berth_custom_resources(
    api: ApiClient, namespace: str, crds: None
) -> None:
    custom = CustomObjectsApi(api)
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "team"},
        "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
    }
    async with running(api, config_for(short(namespace))) as scheduler:
        await custom.create_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
        )
        key = f"{namespace}/team"

        async def seen() -> bool:
            return key in scheduler.view.custom.get("ElasticQuota", {})

        await eventually(seen)
        await custom.delete_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", "team"
        )

        async def gone() -> bool:
            return key not in scheduler.view.custom.get("ElasticQuota", {})

        await eventually(gone)
