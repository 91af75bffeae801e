"""The objects the installed profile's plugins read, present while it is measured: an
ElasticQuota in each benchmark namespace, a fresh NodeMetric report for every node and
Available reservations on some nodes. Without them those plugins would skip their work and
the installed profile would measure as cheap as the default one.

The quotas are large enough never to refuse (the figure is the cost of checking them, not
of waiting on them); the reports show a quarter of each node busy, under the load-aware
thresholds; the reservations hold a little of one node in twenty for owners no benchmark pod
matches, so every pod is checked against them and none may use them.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import UTC, datetime
from typing import Any, Final

from berth.bench.fixture import CREATE_CONCURRENCY, for_each
from berth.bench.workloads import NAMESPACES, NODE_ALLOCATABLE, Workload
from berth.kube.write import ELASTIC_QUOTA, NODE_METRIC, RESERVATION, ApiWriter, Conflict

NODES_PER_RESERVATION: Final = 20
RESERVED: Final = {"cpu": "500m", "memory": "1Gi"}
REPORTED_USAGE: Final = {"cpu": "1", "memory": "8Gi"}
OWNER_LABEL: Final = "bench.berth.io/reservation-owner"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quota(namespace: str, nodes: int) -> dict[str, Any]:
    """Min and max of the whole cluster: checked on every pod, never refusing one."""
    cpu, memory = int(NODE_ALLOCATABLE["cpu"]) * nodes, f"{32 * nodes}Gi"
    whole = {"cpu": str(cpu), "memory": memory}
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "bench", "namespace": namespace},
        "spec": {"min": whole, "max": whole},
    }


def reservation(index: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": f"bench-reservation-{index}"},
        "spec": {
            "template": {
                "metadata": {"namespace": NAMESPACES[0]},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": RESERVED}}],
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {OWNER_LABEL: str(index)}}}],
            "ttl": "0s",
        },
    }


def reservation_status(node: str) -> dict[str, Any]:
    """Available on ``node``, as the scheduler and the operator would have left it."""
    now = _now()
    return {
        "phase": "Available",
        "nodeName": node,
        "allocatable": RESERVED,
        "conditions": [
            {"type": kind, "status": "True", "reason": reason, "lastTransitionTime": now}
            for kind, reason in (("Scheduled", "Scheduled"), ("Ready", "Available"))
        ],
    }


def report() -> dict[str, Any]:
    """A NodeMetric status reported now."""
    return {
        "updateTime": _now(),
        "nodeMetric": {"nodeUsage": {"resources": REPORTED_USAGE}},
        "podsMetric": [],
    }


async def create(writer: ApiWriter, workload: Workload, nodes: int) -> None:
    """The quotas, a NodeMetric per node and the reservations, for ``nodes`` nodes."""
    for namespace in NAMESPACES:
        body = quota(namespace, nodes)
        try:
            await writer.create(ELASTIC_QUOTA, body, namespace=namespace)
        except Conflict:
            await writer.patch(ELASTIC_QUOTA, "bench", {"spec": body["spec"]}, namespace=namespace)
    names = [workload.node(i)["metadata"]["name"] for i in range(nodes)]
    await for_each(names, functools.partial(_node_metric, writer), CREATE_CONCURRENCY)
    placed = list(enumerate(names[::NODES_PER_RESERVATION]))
    await for_each(placed, functools.partial(_reservation, writer), CREATE_CONCURRENCY)


async def refresh(writer: ApiWriter, workload: Workload, nodes: int) -> None:
    """Every node's report made fresh again, so that none has expired during the trial."""
    names = [workload.node(i)["metadata"]["name"] for i in range(nodes)]
    await for_each(
        names,
        lambda name: writer.patch_status(NODE_METRIC, name, report()),
        CREATE_CONCURRENCY,
    )


async def _node_metric(writer: ApiWriter, name: str) -> None:
    with contextlib.suppress(Conflict):
        await writer.create(
            NODE_METRIC,
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": name},
                "spec": {},
            },
        )
    await writer.patch_status(NODE_METRIC, name, report())


async def _reservation(writer: ApiWriter, placed: tuple[int, str]) -> None:
    index, node = placed
    with contextlib.suppress(Conflict):
        await writer.create(RESERVATION, reservation(index, node))
    await writer.patch_status(RESERVATION, f"bench-reservation-{index}", reservation_status(node))
