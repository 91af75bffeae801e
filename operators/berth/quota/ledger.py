"""The scheduler's in-memory quota accounting: what each namespace uses right now.

Fed by the pod watch (bound, live pods) and by the scheduler's own Reserve/Unreserve, so
a pod placed a moment ago counts before the API server has even seen its binding, and
the next pod of the same burst cannot slip past the same quota. It never waits for
``status.used``, which the operator writes after the fact.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.podresources import Resources, add
from berth.quota.check import (
    OVER_MAX,
    OVER_MIN_TOTAL,
    Excess,
    Quota,
    governing,
    over_max,
    over_min,
    over_min_total,
    quota_request,
)


@dataclass(frozen=True)
class Rejection:
    reason: str  # OVER_MAX or OVER_MIN_TOTAL
    quota: Quota
    excess: Excess

    def cause(self) -> str:
        """Which limit, and the numbers that show the shortfall."""
        if self.reason == OVER_MAX:
            head = f"ElasticQuota {self.quota.namespace} is more than Max"
        else:
            head = "total ElasticQuota used is more than Min"
        return f"{head} ({self.excess.describe()})"

    def message(self, pod_key: str) -> str:
        return f"Pod {pod_key} is rejected because {self.cause()}"


@dataclass
class QuotaLedger:
    quotas: dict[str, Quota] = field(default_factory=dict)
    # Namespace -> summed quota requests of its counted pods (every namespace, so a quota
    # created later starts from the truth).
    used: dict[str, Resources] = field(default_factory=dict)
    pods: dict[str, tuple[str, Resources]] = field(default_factory=dict)

    def set_quotas(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self.quotas = governing(objects)

    def quota_of(self, namespace: str) -> Quota | None:
        return self.quotas.get(namespace)

    def add(self, uid: str, namespace: str, requests: Mapping[str, int]) -> None:
        if uid in self.pods:
            return
        request = quota_request(requests)
        self.pods[uid] = (namespace, request)
        add(self.used.setdefault(namespace, {}), request)

    def remove(self, uid: str) -> None:
        entry = self.pods.pop(uid, None)
        if entry is not None:
            namespace, request = entry
            add(self.used[namespace], request, -1)

    def used_of(self, namespace: str) -> Resources:
        return self.used.get(namespace, {})

    def borrowing(self, namespace: str) -> bool:
        """The namespace's quota uses more than its min: capacity it may have to return."""
        quota = self.quotas.get(namespace)
        return quota is not None and over_min(quota, self.used_of(namespace), {})

    def check(
        self,
        quota: Quota,
        request: Mapping[str, int],
        nominated_in_quota: Mapping[str, int],
        nominated_total: Mapping[str, int],
        freed: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Rejection | None:
        """Max first, then the sum of mins; ``freed`` are victims' requests by namespace."""
        used: Mapping[str, Mapping[str, int]] = self.used
        if freed:
            adjusted: dict[str, Resources] = {}
            for namespace, values in freed.items():
                adjusted[namespace] = dict(self.used_of(namespace))
                add(adjusted[namespace], values, -1)
            used = ChainMap(adjusted, self.used)  # type: ignore[arg-type]
        excess = over_max(quota, used.get(quota.namespace, {}), nominated_in_quota, request)
        if excess is not None:
            return Rejection(OVER_MAX, quota, excess)
        excess = over_min_total(self.quotas.values(), used, nominated_total, request)
        if excess is not None:
            return Rejection(OVER_MIN_TOTAL, quota, excess)
        return None
