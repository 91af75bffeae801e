"""A NodeResourceTopology as the fit needs it: policy, scope, fingerprint, NUMA zones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from berth.api.noderesourcetopology import NodeResourceTopology, ZoneType
from berth.podresources import Resources, to_units

SINGLE_NUMA_NODE = "single-numa-node"
CONTAINER, POD = "container", "pod"
# The deprecated topologyPolicies values, as (policy, scope).
LEGACY_POLICIES = {
    "SingleNUMANodeContainerLevel": (SINGLE_NUMA_NODE, CONTAINER),
    "SingleNUMANodePodLevel": (SINGLE_NUMA_NODE, POD),
}


@dataclass(frozen=True)
class Zone:
    name: str
    allocatable: Resources
    available: Resources


@dataclass(frozen=True)
class NodeTopology:
    policy: str
    scope: str
    fingerprint: str | None
    zones: tuple[Zone, ...]
    reported_at: float  # when the updater last wrote it (its managedFields), else 0

    @property
    def single_numa_node(self) -> bool:
        return self.policy == SINGLE_NUMA_NODE

    @property
    def listed(self) -> frozenset[str]:
        """Resources some zone lists: the only ones NUMA alignment is about."""
        return frozenset(r for zone in self.zones for r in zone.available)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeTopology:
        nrt = NodeResourceTopology.model_validate(obj)
        policy = nrt.topology_manager_policy or ""
        scope = nrt.topology_manager_scope or CONTAINER
        for legacy in nrt.topology_policies or ():
            if not policy and legacy in LEGACY_POLICIES:
                policy, scope = LEGACY_POLICIES[legacy]
        zones = tuple(
            Zone(
                zone.name,
                {r.name: to_units(r.name, str(r.allocatable)) for r in zone.resources or ()},
                {r.name: to_units(r.name, str(r.available)) for r in zone.resources or ()},
            )
            for zone in nrt.zones
            if zone.type == ZoneType.NODE
        )
        return cls(policy, scope, nrt.pods_fingerprint, zones, _written_at(obj))


def _written_at(obj: Mapping[str, Any]) -> float:
    """The latest write by any manager (seconds resolution), as the report's time."""
    times = [
        entry.get("time")
        for entry in (obj.get("metadata") or {}).get("managedFields") or ()
        if entry.get("time")
    ]
    if not times:
        return 0.0
    return max(datetime.fromisoformat(str(t).replace("Z", "+00:00")).timestamp() for t in times)
