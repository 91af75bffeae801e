"""Which pods hold exclusive resources: the pods a ``with-exclusive-resources`` fingerprint
is computed over.

As scheduler-plugins decides it for the pods fingerprint: a pod holds exclusive resources
when one of its steady containers (app containers and restartable init containers) requests
a device the node's zones list, or, for a Guaranteed pod, a whole number of cpus, memory or
hugepages. A native resource is one without a domain, or in ``kubernetes.io``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth.podresources import CPU, GUARANTEED, MEMORY, container_requests, qos_class

__all__ = ["has_exclusive_resources"]

HUGEPAGES = "hugepages-"


def _native(resource: str) -> bool:
    return "/" not in resource or "kubernetes.io/" in resource


def _exclusive(resource: str, amount: int, guaranteed: bool, listed: frozenset[str]) -> bool:
    if not _native(resource):
        return resource in listed
    if not guaranteed or amount <= 0:
        return False
    if resource == CPU:
        return amount % 1000 == 0  # millicores: a whole number of cpus
    return resource == MEMORY or resource.startswith(HUGEPAGES)


def has_exclusive_resources(spec: Mapping[str, Any], listed: frozenset[str]) -> bool:
    """Whether the pod holds resources no other pod can share (``listed``: the resources
    the node's zones report)."""
    guaranteed = qos_class(spec) == GUARANTEED
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    return any(
        _exclusive(resource, amount, guaranteed, listed)
        for container in [*sidecars, *(spec.get("containers") or ())]
        for resource, amount in container_requests(container).items()
    )
