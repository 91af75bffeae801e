"""What a pod asks of a node: the one place Berth does pod request arithmetic.

Follows kube-scheduler (k8s.io/component-helpers resource.PodRequests): the sum of the
app containers and of the restartable init containers (sidecars), or the largest one-shot
init container plus the sidecars started before it, whichever is larger, plus the pod's
overhead; pod-level resources, when set, replace the containers' cpu and memory. Requests
left out but limited are taken from the limit, as the API server defaults them for pods
(Reservation templates are not defaulted by anyone else).

Values are integers in the units the scheduler compares: millicores for cpu, plain counts
(bytes, devices) for everything else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from berth.api.quantity import milli_value, value_ceil

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# kube-scheduler's defaults for containers that request nothing, used only for scoring so
# that empty pods do not all pile onto one node.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024

Resources = dict[str, int]


def is_extended(resource: str) -> bool:
    """An extended resource (``example.com/gpu``): Kubernetes' own live in no domain or
    in ``kubernetes.io``; a ``requests.`` name is a quota's, not a pod's."""
    own = "/" not in resource or "kubernetes.io/" in resource
    return not own and not resource.startswith("requests.")


@functools.lru_cache(maxsize=4096)
def to_units(name: str, quantity: Any) -> int:
    """A quantity as the scheduler's integer: millicores for cpu, the value otherwise.

    Cached: a cluster repeats a handful of quantity strings ("100m", "128Mi") endlessly.
    """
    return milli_value(quantity) if name == CPU else value_ceil(quantity)


def resource_list(values: Mapping[str, Any] | None) -> Resources:
    """A ResourceList (name -> quantity) in scheduler units."""
    return {name: to_units(name, q) for name, q in (values or {}).items()}


def container_requests(container: Mapping[str, Any], non_zero: bool = False) -> Resources:
    """One container's requests (a request left out but limited is the limit)."""
    resources = container.get("resources") or {}
    requests = resource_list(resources.get("requests"))
    for name, limit in resource_list(resources.get("limits")).items():
        requests.setdefault(name, limit)
    if non_zero:
        # Only a request left out gets the default; an explicit zero stays zero.
        requests.setdefault(CPU, DEFAULT_MILLI_CPU)
        requests.setdefault(MEMORY, DEFAULT_MEMORY)
    return requests


def container_limits(container: Mapping[str, Any]) -> Resources:
    return resource_list((container.get("resources") or {}).get("limits"))


GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"


def qos_class(spec: Mapping[str, Any]) -> str:
    """Kubernetes' QoS class: Guaranteed when every container limits cpu and memory with
    requests equal to limits, BestEffort when none requests or limits either, else
    Burstable."""
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    if not containers:
        return BEST_EFFORT
    guaranteed, any_set = True, False
    for container in containers:
        limits = container_limits(container)
        requests = container_requests(container)
        for resource in (CPU, MEMORY):
            any_set = any_set or bool(limits.get(resource)) or bool(requests.get(resource))
            if not limits.get(resource) or requests.get(resource) != limits[resource]:
                guaranteed = False
    if guaranteed:
        return GUARANTEED
    return BURSTABLE if any_set else BEST_EFFORT


def add(into: Resources, other: Mapping[str, int], sign: int = 1) -> None:
    """Add (or with ``sign`` -1, take away) one set of amounts to another, in place."""
    for name, value in other.items():
        into[name] = into.get(name, 0) + sign * value


def raise_to(into: Resources, other: Mapping[str, int]) -> None:
    """Raise each amount to the other's where that is larger, in place (a running maximum)."""
    for name, value in other.items():
        if value > into.get(name, 0):
            into[name] = value


def _pod_total(
    spec: Mapping[str, Any], per_container: Callable[[Mapping[str, Any]], Resources], field: str
) -> Resources:
    total: Resources = {}
    for container in spec.get("containers") or ():
        add(total, per_container(container))

    init_peak: Resources = {}
    sidecars: Resources = {}
    for container in spec.get("initContainers") or ():
        amounts = per_container(container)
        if container.get("restartPolicy") == "Always":
            add(total, amounts)
            add(sidecars, amounts)
            step = dict(sidecars)
        else:
            step = dict(amounts)
            add(step, sidecars)
        raise_to(init_peak, step)
    raise_to(total, init_peak)

    pod_level = resource_list((spec.get("resources") or {}).get(field))
    for name in (CPU, MEMORY):
        if name in pod_level:
            total[name] = pod_level[name]

    add(total, resource_list(spec.get("overhead")))
    return total


def pod_requests(spec: Mapping[str, Any], *, non_zero: bool = False) -> Resources:
    """The pod's effective requests (without the ``pods`` count).

    ``non_zero`` gives kube-scheduler's scoring view, where a container without a cpu or
    memory request counts 100m cpu and 200Mi memory.
    """
    return _pod_total(spec, lambda c: container_requests(c, non_zero), "requests")


def pod_limits(spec: Mapping[str, Any]) -> Resources:
    """The pod's effective limits, added up as requests are; a resource without a limit
    in some container is still summed over the containers that set one."""
    return _pod_total(spec, container_limits, "limits")


def sum_requests(specs: Iterable[Mapping[str, Any]]) -> Resources:
    """Requests of several pods added up (e.g. a quota's used, a node's requested)."""
    total: Resources = {}
    for spec in specs:
        add(total, pod_requests(spec))
    return total
