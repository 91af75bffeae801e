"""The fake nodes of the local cluster, shaped like real cloud workers.

kwok keeps them Ready and plays their kubelet; the annotation tells other kwok instances
(and readers) that nobody runs containers here.
"""

from __future__ import annotations

from typing import Any

ZONES = ("zone-a", "zone-b", "zone-c")
KWOK_KEY, KWOK_VALUE = "kwok.x-k8s.io/node", "fake"
KWOK_ANNOTATION = f"{KWOK_KEY}={KWOK_VALUE}"
"""The nodes kwok plays; the real node has none."""
ALLOCATABLE = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}


def node_name(index: int) -> str:
    return f"kwok-node-{index}"


def node_manifest(index: int) -> dict[str, Any]:
    """One node of the local cluster: hostname, zone and region labels."""
    return kwok_node(
        node_name(index),
        labels={
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "berth.kwok.32x128",
            "topology.kubernetes.io/region": "local",
            "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
        },
    )


def kwok_node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    allocatable: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node object that kwok will keep Ready; realistic allocatable unless given."""
    resources = dict(allocatable or ALLOCATABLE)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
            "annotations": {
                KWOK_KEY: KWOK_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_manifests(count: int) -> list[dict[str, Any]]:
    return [node_manifest(i) for i in range(count)]
