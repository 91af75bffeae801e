"""The fake nodes of the local cluster, shaped like real cloud workers.

kwok keeps them Ready and plays their kubelet; the annotation tells other kwok instances
(and readers) that nobody runs containers here.
"""

from __future__ import annotations

from typing import Any

ZONES = ("zone-a", "zone-b", "zone-c")
ALLOCATABLE = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}


def node_name(index: int) -> str:
    return f"kwok-node-{index}"


def node_manifest(index: int, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """One kwok node: hostname, zone and region labels, realistic allocatable."""
    name = node_name(index)
    resources = dict(allocatable or ALLOCATABLE)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "berth.kwok.32x128",
                "topology.kubernetes.io/region": "local",
                "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                "type": "kwok",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_manifests(count: int) -> list[dict[str, Any]]:
    return [node_manifest(i) for i in range(count)]
