"""Whether a pod can be aligned to single NUMA zones, and how well (the score).

Only ``single-numa-node`` nodes are checked. A Guaranteed pod needs, for every resource
the zones list, one zone with enough available: the whole pod in one zone at pod scope,
each container in some zone at container scope (app containers take their share as they
are placed; init containers run one at a time and take nothing). Other pods only need
their non-native resources (devices) aligned. Pending requests are subtracted from every
zone that lists the resource, floored at zero: the scheduler cannot know which zone the
kubelet picks, so it assumes the worst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from berth.numa.topology import POD, NodeTopology, Zone
from berth.podresources import (
    CPU,
    GUARANTEED,
    MEMORY,
    Resources,
    container_requests,
    pod_requests,
    qos_class,
)

NATIVE_PREFIXES = ("hugepages-",)
NATIVE = frozenset({CPU, MEMORY, "ephemeral-storage", "pods"})


def is_guaranteed(spec: Mapping[str, Any]) -> bool:
    """Kubernetes' Guaranteed QoS: every container limits cpu and memory, requests = limits."""
    return qos_class(spec) == GUARANTEED


def native(resource: str) -> bool:
    return resource in NATIVE or resource.startswith(NATIVE_PREFIXES)


def available(topology: NodeTopology, pending: Mapping[str, int]) -> list[Resources]:
    """Each zone's available minus everything pending on the node, floored at 0."""
    return [
        {r: max(0, amount - pending.get(r, 0)) for r, amount in zone.available.items()}
        for zone in topology.zones
    ]


def _wanted(request: Mapping[str, int], listed: frozenset[str], guaranteed: bool) -> Resources:
    return {
        r: v for r, v in request.items() if v > 0 and r in listed and (guaranteed or not native(r))
    }


def _fits(zone: Mapping[str, int], wanted: Mapping[str, int]) -> bool:
    return all(zone.get(r, 0) >= v for r, v in wanted.items())


def misalignment(
    topology: NodeTopology, spec: Mapping[str, Any], name: str, pending: Mapping[str, int]
) -> str | None:
    """Why the pod cannot be aligned on the node, None when it can (or need not be)."""
    if not topology.single_numa_node or not topology.zones:
        return None
    guaranteed = is_guaranteed(spec)
    listed = topology.listed
    zones = available(topology, pending)
    if topology.scope == POD:
        wanted = _wanted(pod_requests(spec), listed, guaranteed)
        if wanted and not any(_fits(zone, wanted) for zone in zones):
            return f"cannot align pod: {name}"
        return None
    for container in spec.get("initContainers") or ():
        wanted = _wanted(container_requests(container), listed, guaranteed)
        if wanted and not any(_fits(zone, wanted) for zone in zones):
            return f"cannot align init container: {container.get('name', '')}"
    for container in spec.get("containers") or ():
        wanted = _wanted(container_requests(container), listed, guaranteed)
        if not wanted:
            continue
        zone = next((z for z in zones if _fits(z, wanted)), None)
        if zone is None:
            return f"cannot align container: {container.get('name', '')}"
        for r, v in wanted.items():
            zone[r] -= v
    return None


STRATEGIES = ("LeastAllocated", "MostAllocated", "BalancedAllocation")


def zone_score(
    zone: Zone,
    free: Mapping[str, int],
    request: Mapping[str, int],
    strategy: str,
    weights: Sequence[tuple[str, int]],
) -> int:
    """0..100 for placing ``request`` in one zone, after it, by the strategy."""
    fractions: list[tuple[float, int]] = []
    for resource, weight in weights:
        allocatable = zone.allocatable.get(resource, 0)
        if allocatable <= 0:
            continue
        used = allocatable - free.get(resource, 0) + request.get(resource, 0)
        fractions.append((min(1.0, max(0.0, used / allocatable)), weight))
    if not fractions:
        return 0
    if strategy == "BalancedAllocation":
        values = [f for f, _ in fractions]
        mean = sum(values) / len(values)
        spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        return int((1 - spread) * 100)
    total = sum(w for _, w in fractions) or 1
    allocated = sum(f * w for f, w in fractions) / total
    return int((allocated if strategy == "MostAllocated" else 1 - allocated) * 100)


def node_score(
    topology: NodeTopology,
    spec: Mapping[str, Any],
    pending: Mapping[str, int],
    strategy: str,
    weights: Sequence[tuple[str, int]],
) -> int:
    """The score of the best zone that can take the whole pod (0 when none can)."""
    request = pod_requests(spec)
    free = available(topology, pending)
    wanted = {r: v for r, v in request.items() if r in topology.listed}
    scores = [
        zone_score(zone, zone_free, request, strategy, weights)
        for zone, zone_free in zip(topology.zones, free, strict=True)
        if _fits(zone_free, wanted)
    ]
    return max(scores, default=0)
