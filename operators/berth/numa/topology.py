"""A NodeResourceTopology as the fit and the ledger need it: policy, scope, the pods
fingerprint and which pods it covers, NUMA zones, and when the updater reported it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    exclusive_only: bool  # the fingerprint covers only pods with exclusive resources
    zones: tuple[Zone, ...]
    reported_at: float  # when the updater last changed its fields (see ``numa.report``)

    @property
    def single_numa_node(self) -> bool:
        return self.policy == SINGLE_NUMA_NODE

    @property
    def listed(self) -> frozenset[str]:
        """Resources some zone lists: the only ones NUMA alignment is about."""
        return frozenset(r for zone in self.zones for r in zone.available)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], reported_at: float = 0.0) -> NodeTopology:
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
        return cls(
            policy,
            scope,
            nrt.pods_fingerprint,
            nrt.pods_fingerprint_exclusive_only,
            zones,
            reported_at,
        )
