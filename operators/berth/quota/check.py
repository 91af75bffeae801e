"""The quota arithmetic of capacity scheduling, per resource, in scheduler units.

``min`` is guaranteed, ``max`` a ceiling; the gap is borrowed from other quotas' unused
min, which is safe because all quotas together never use more than the sum of their mins.
A quota governs the resources its min or max names: one missing from max is unlimited,
one missing from min has a min of zero, one the quota does not name at all is not its
concern. A resource a pod requests none of never rejects it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.podresources import PODS, Resources, add, resource_list
from berth.quota.usage import format_units

OVER_MAX = "OverMax"
OVER_MIN_TOTAL = "OverMinTotal"


@dataclass(frozen=True)
class Quota:
    """The governing ElasticQuota of a namespace."""

    namespace: str
    name: str
    min: Resources
    max: Resources
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def named(self) -> frozenset[str]:
        return frozenset(self.min) | frozenset(self.max)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Quota:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        return cls(
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            min=resource_list(spec.get("min")),
            max=resource_list(spec.get("max")),
            raw=dict(obj),
        )


def precedence(created: str, name: str) -> tuple[str, str]:
    """Sort key of the quotas of one namespace: the first governs (oldest, then by name)."""
    return (created, name)


def governing(objects: Iterable[Mapping[str, Any]]) -> dict[str, Quota]:
    """The governing quota of each namespace among ElasticQuota objects."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        current = chosen.get(namespace)
        if current is None or _key(obj) < _key(current):
            chosen[namespace] = obj
    return {namespace: Quota.from_object(obj) for namespace, obj in chosen.items()}


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return precedence(str(meta.get("creationTimestamp") or ""), meta.get("name") or "")


def quota_request(requests: Mapping[str, int]) -> Resources:
    """What a pod adds to its quota's use: its requests and one ``pods``."""
    return {**requests, PODS: 1}


@dataclass(frozen=True)
class Excess:
    """The first resource that would go over its limit, with the numbers that show it."""

    resource: str
    used: int
    nominated: int
    requested: int
    limit: int

    def describe(self) -> str:
        def unit(value: int) -> str:
            return format_units(self.resource, value)

        parts = [f"{unit(self.used)} used"]
        if self.nominated:
            parts.append(f"{unit(self.nominated)} nominated")
        parts.append(f"{unit(self.requested)} requested")
        return f"{self.resource}: {' + '.join(parts)} > {unit(self.limit)}"


def _first_excess(
    request: Mapping[str, int],
    used: Mapping[str, int],
    nominated: Mapping[str, int],
    limits: Mapping[str, int],
    governed: Iterable[str],
) -> Excess | None:
    governed = set(governed)
    for resource in sorted(request):
        requested = request[resource]
        if requested <= 0 or resource not in governed:
            continue
        total = used.get(resource, 0) + nominated.get(resource, 0) + requested
        limit = limits.get(resource, 0)
        if total > limit:
            return Excess(
                resource, used.get(resource, 0), nominated.get(resource, 0), requested, limit
            )
    return None


def over_max(
    quota: Quota, used: Mapping[str, int], nominated: Mapping[str, int], request: Mapping[str, int]
) -> Excess | None:
    """used + nominated + request > max for a resource max names."""
    return _first_excess(request, used, nominated, quota.max, quota.max)


def over_min(quota: Quota, used: Mapping[str, int], extra: Mapping[str, int]) -> bool:
    """used + extra > min for a resource the quota names (with ``extra`` empty: borrowing)."""
    resources = quota.named & ({r for r, v in extra.items() if v > 0} or set(used))
    return any(used.get(r, 0) + extra.get(r, 0) > quota.min.get(r, 0) for r in resources)


def over_min_total(
    quotas: Iterable[Quota],
    used: Mapping[str, Mapping[str, int]],
    nominated: Mapping[str, int],
    request: Mapping[str, int],
) -> Excess | None:
    """Σ used + nominated + request > Σ min, over every quota, for a resource any names."""
    total_used: Resources = {}
    total_min: Resources = {}
    governed: set[str] = set()
    for quota in quotas:
        add(total_used, used.get(quota.namespace, {}))
        add(total_min, quota.min)
        governed |= quota.named
    return _first_excess(request, total_used, nominated, total_min, governed)
