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

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
BINARY_RESOURCES = ("memory", "ephemeral-storage")


def counts_against_quota(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return bool(spec.get("nodeName")) and phase not in TERMINAL_PHASES


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


def as_resource_list(resources: Mapping[str, int]) -> dict[str, str]:
    """Scheduler units back to quantities as the API writes them (1500m, 2Gi, 4)."""
    out = {}
    for name, value in sorted(resources.items()):
        if name == CPU:
            out[name] = format_quantity(Decimal(value) / 1000)
        elif name in BINARY_RESOURCES or name.startswith("hugepages-"):
            out[name] = format_quantity(value, QuantityFormat.BINARY_SI)
        else:
            out[name] = format_quantity(value)
    return out
