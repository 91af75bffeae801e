"""NUMA alignment judged from the churn's NodeResourceTopology objects and the pods bound
to their nodes, with no Berth code.

The churn writes each topology once, before its node exists, and never again (no topology
updater runs), with the ``single-numa-node`` policy: every pod holding exclusive resources
on such a node is one its report does not include. A scheduler that tracks such pods as
pending (scheduler-plugins' reserve cache; Berth's pending ledger, docs/numa.md) cannot
know which zone the kubelet gives each, so it subtracts them from every zone:

- ``zone_overcommitted``: the exclusive requests on a node, for a resource its zones list,
  are never more than the largest zone's available. Past it, the last of those pods is
  one the scheduler placed on room it had counted for the others.

``aligns`` is the same rule for a pod still waiting (the liveness checks): a Guaranteed pod
is placeable on such a node only if one zone has room for it after every exclusive pod
there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tests.reliability.objects import Amounts, Obj, _add, _fits, amounts, holds, key

SINGLE_NUMA = "single-numa-node"
SINGLE_NUMA_POLICIES = {"SingleNUMANodeContainerLevel", "SingleNUMANodePodLevel"}


def single_numa(topology: Mapping[str, Any]) -> bool:
    """Whether the node aligns (its kubelet's topology manager policy)."""
    attributes = {a.get("name"): a.get("value") for a in topology.get("attributes") or ()}
    if attributes.get("topologyManagerPolicy") == SINGLE_NUMA:
        return True
    return bool(SINGLE_NUMA_POLICIES & set(topology.get("topologyPolicies") or ()))


def zones_available(topology: Mapping[str, Any]) -> list[Amounts]:
    return [
        amounts({r["name"]: r["available"] for r in zone.get("resources") or ()})
        for zone in topology.get("zones") or ()
    ]


def listed(topology: Mapping[str, Any]) -> set[str]:
    return {r["name"] for zone in topology.get("zones") or () for r in zone.get("resources") or ()}


def _container_amounts(container: Mapping[str, Any]) -> tuple[Amounts, Amounts]:
    resources = container.get("resources") or {}
    limits = amounts(resources.get("limits"))
    requests = {**limits, **amounts(resources.get("requests"))}  # requests default to limits
    return requests, limits


def guaranteed(spec: Mapping[str, Any]) -> bool:
    """Kubernetes' Guaranteed QoS: every container limits cpu and memory, and requests
    what it limits."""
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    for container in containers:
        requests, limits = _container_amounts(container)
        if not {"cpu", "memory"} <= limits.keys():
            return False
        if any(requests.get(r) != limits[r] for r in ("cpu", "memory")):
            return False
    return bool(containers)


def exclusive(spec: Mapping[str, Any]) -> bool:
    """A Guaranteed pod with a whole number of cpus or any memory: it holds resources no
    other pod shares (the pods the scheduler counts as pending)."""
    if not guaranteed(spec):
        return False
    for container in spec.get("containers") or ():
        requests, _ = _container_amounts(container)
        cpu = requests.get("cpu", Decimal(0))
        if (cpu > 0 and cpu == cpu.to_integral_value()) or requests.get("memory", 0) > 0:
            return True
    return False


def _requests(spec: Mapping[str, Any]) -> Amounts:
    total: Amounts = {}
    for container in spec.get("containers") or ():
        _add(total, _container_amounts(container)[0])
    return total


def zones_left(topology: Mapping[str, Any], on_node: Iterable[Obj]) -> list[Amounts]:
    """Each zone's available minus every exclusive pod's requests on the node."""
    held: Amounts = {}
    for pod in on_node:
        if exclusive(pod["spec"]):
            _add(held, _requests(pod["spec"]))
    return [
        {r: v - held.get(r, Decimal(0)) for r, v in zone.items()}
        for zone in zones_available(topology)
    ]


def aligns(spec: Mapping[str, Any], topology: Mapping[str, Any], on_node: Iterable[Obj]) -> bool:
    """Whether one zone surely has room for a waiting pod: only a Guaranteed pod on a
    single-numa-node node needs it (for the resources the zones list)."""
    if not single_numa(topology) or not guaranteed(spec):
        return True
    names = listed(topology)
    wanted = {r: v for r, v in _requests(spec).items() if r in names and v > 0}
    return not wanted or any(_fits(wanted, zone) for zone in zones_left(topology, on_node))


def zone_overcommitted(topology: Mapping[str, Any], on_node: Iterable[Obj]) -> str:
    """Why the node's exclusive pods are more than its largest zone holds, or ""."""
    if not single_numa(topology):
        return ""
    pods = [p for p in on_node if exclusive(p["spec"])]
    held: Amounts = {}
    for pod in pods:
        _add(held, _requests(pod["spec"]))
    zones = zones_available(topology)
    for resource in sorted(listed(topology)):
        largest = max((z.get(resource, Decimal(0)) for z in zones), default=Decimal(0))
        if held.get(resource, Decimal(0)) > largest:
            names = ", ".join(sorted(key(p) for p in pods))
            return (
                f"{resource} {held[resource].normalize():f} on its exclusive pods > "
                f"{largest.normalize():f}, its largest NUMA zone's ({names})"
            )
    return ""


@dataclass
class NumaJudge:
    """``zone_overcommitted`` on every look; a node is reported when it goes over, and
    again only after it was back within."""

    scheduler: str
    counts: Counter[str] = field(default_factory=Counter)
    _over: set[str] = field(default_factory=set)
    _exclusive: set[str] = field(default_factory=set)

    def check(
        self, topologies: Mapping[str, Obj], nodes: Mapping[str, Obj], pods: Iterable[Obj]
    ) -> list[str]:
        on: dict[str, list[Obj]] = defaultdict(list)
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node in topologies and node in nodes and holds(pod):
                on[node].append(pod)
        found = []
        for name, topology in topologies.items():
            if name not in nodes:
                continue
            self._exclusive.update(
                p["metadata"]["uid"]
                for p in on[name]
                if p["spec"].get("schedulerName") == self.scheduler and exclusive(p["spec"])
            )
            why = zone_overcommitted(topology, on[name])
            if why and name not in self._over:
                found.append(f"node {name}: {why}")
            (self._over.add if why else self._over.discard)(name)
        self.counts["numa nodes seen"] = max(self.counts["numa nodes seen"], len(topologies))
        self.counts["exclusive pods bound on numa nodes"] = len(self._exclusive)
        return found
