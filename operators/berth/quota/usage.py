"""``status.used`` of an ElasticQuota: the requests of its namespace's bound, live pods.

Bound and not finished (Succeeded/Failed) is what counts, Pending-but-bound included:
scheduler-plugins counts only Running pods, and users see used lag what is really
allocated. Every resource named in min or max appears, at zero when nothing uses it; the
``pods`` count appears when min or max names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from berth.api.quantity import QuantityFormat, format_quantity
from berth.podresources import CPU, PODS, Resources, pod_requests
from berth.podstate import holds_capacity

BINARY_RESOURCES = ("memory", "ephemeral-storage")


def counts_against_quota(pod: Mapping[str, Any]) -> bool:
    node = (pod.get("spec") or {}).get("nodeName")
    return holds_capacity(node, (pod.get("status") or {}).get("phase"))


def requests_if_counted(pod: Mapping[str, Any]) -> Resources | None:
    """The pod's requests when it counts against its namespace's quota, else None."""
    return pod_requests(pod.get("spec") or {}) if counts_against_quota(pod) else None


def used(requests: Iterable[Mapping[str, int]], named: Iterable[str]) -> Resources:
    """Summed requests (scheduler units) of the counted pods, plus zeros for ``named``."""
    named = set(named)
    total: Resources = {name: 0 for name in named}
    for pod in requests:
        for resource, value in pod.items():
            total[resource] = total.get(resource, 0) + value
        if PODS in named:
            total[PODS] += 1
    return total


def format_units(name: str, value: int) -> str:
    """One resource in scheduler units back to a quantity as the API writes it."""
    if name == CPU:
        return format_quantity(Decimal(value) / 1000)
    if name in BINARY_RESOURCES or name.startswith("hugepages-"):
        return format_quantity(value, QuantityFormat.BINARY_SI)
    return format_quantity(value)


def as_resource_list(resources: Mapping[str, int]) -> dict[str, str]:
    """Scheduler units back to quantities (1500m, 2Gi, 4), sorted by name."""
    return {name: format_units(name, value) for name, value in sorted(resources.items())}
