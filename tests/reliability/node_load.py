"""The steady nodes' agents, played by the churn: kwok runs none, so every ``REPORT_SECONDS``
each steady node's NodeMetric says what its running pods use (``podsMetric``) on top of
its system's share, as the node agent writes it. The pods use a tenth of what they request,
so a node is idle for LowNodeLoad (under 30% cpu) unless it runs hot: every
``SPIKE_EVERY`` seconds one steady node running a ReplicaSet's pods reports a system load
that puts it over both the scheduler's LoadAwareScheduling threshold (65%) and the
balancer's high one (75%) for ``SPIKE_SECONDS``. The scheduler must then keep pods off it,
and the balancer move the ReplicaSets' pods (the only ones with a controller) to the idle
steady nodes."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.reliability.migration_invariants import TERMINAL_JOB
from tests.reliability.objects import Obj, requests_of

NODE_METRIC = ("slo.koordinator.sh", "v1alpha1", "nodemetrics")
MERGE = "application/merge-patch+json"
REPORT_SECONDS = 4.0
SYSTEM_M = 100  # every node's system share, millicores
SPIKE_M = 7000  # a hot node's system share: 87.5% of 8 cpu, whatever its pods
SPIKE_EVERY = 30.0
SPIKE_SECONDS = 20.0
FIRST_SPIKE = 8.0  # seconds into the load: a short churn (45 s) sees two
USED = Decimal("0.1")  # of each pod's cpu request


@dataclass
class NodeLoad:
    api: ApiClient
    namespaces: list[str]
    steady: set[str]  # the churn's, kept up to date by it
    workload_label: dict[str, str]  # on the ReplicaSets' pods
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    hot: str | None = None
    _calm: asyncio.Event = field(default_factory=asyncio.Event)
    _seen: list[Obj] = field(default_factory=list)
    _migrating: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.custom = CustomObjectsApi(self.api)

    def calm(self) -> None:
        """No more spikes, and the current one ends: at rest no node is hot, so the
        balancer makes no job the at-rest checks would find unfinished."""
        self._calm.set()
        self.hot = None

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        next_spike, spike_ends = start + FIRST_SPIKE, 0.0
        while not stop.is_set():
            now = loop.time()
            if self.hot is not None and now >= spike_ends:
                self.hot = None
            if not self._calm.is_set() and self.hot is None and now >= next_spike:
                self.hot = self._pick()
                spike_ends, next_spike = now + SPIKE_SECONDS, now + SPIKE_EVERY
                self.counts["load spikes"] += self.hot is not None
            # A round that fails (an API hiccup, a NodeMetric not made yet) is the next's.
            with contextlib.suppress(ApiException, OSError, TimeoutError):
                await self.report_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REPORT_SECONDS)

    def seen(self, pods: list[Obj], jobs: list[Obj]) -> None:
        """The pods and migration jobs as the checker's latest look listed them: an
        agent's view as old as that look, with no list of its own (thousands of pods every
        round would be load of their own on the API server)."""
        self._migrating = {
            (ref.get("namespace") or "", ref.get("name") or "")
            for job in jobs
            if (job.get("status") or {}).get("phase") not in TERMINAL_JOB
            for ref in [(job.get("spec") or {}).get("podRef") or {}]
        }
        self._seen = [
            p
            for p in pods
            if p["metadata"].get("namespace") in self.namespaces
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    def _pick(self) -> str | None:
        """A steady node running a ReplicaSet's pod no migration job moves yet: one the
        balancer has work on (it leaves a pod already moving alone)."""
        labels = self.workload_label.items()
        running = {
            p["spec"].get("nodeName")
            for p in self._seen
            if labels <= (p["metadata"].get("labels") or {}).items()
            and key(p) not in self._migrating
        }
        candidates = sorted(self.steady & running)
        return self.rng.choice(candidates) if candidates else None

    async def report_once(self) -> None:
        on: dict[str, list[Obj]] = defaultdict(list)
        for pod in self._seen:
            on[pod["spec"].get("nodeName") or ""].append(pod)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for node in sorted(self.steady):
            used = {
                key(p): int(1000 * USED * requests_of(p["spec"]).get("cpu", Decimal(0)))
                for p in on[node]
            }
            cpu = (SPIKE_M if node == self.hot else SYSTEM_M) + sum(used.values())
            status: dict[str, Any] = {
                "updateTime": now,
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": f"{cpu}m", "memory": "1Gi"}}},
                "podsMetric": [
                    {
                        "namespace": namespace,
                        "name": name,
                        "podUsage": {"resources": {"cpu": f"{m}m", "memory": "64Mi"}},
                    }
                    for (namespace, name), m in sorted(used.items())
                ],
            }
            with contextlib.suppress(ApiException):  # a node deleted, or its report not made
                await self.custom.patch_cluster_custom_object_status(
                    *NODE_METRIC, node, {"status": status}, _content_type=MERGE
                )
                self.counts["node reports written"] += 1


def key(pod: Obj) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]
