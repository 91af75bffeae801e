"""LoadAwareScheduling: keep nodes under a usage threshold and prefer the least loaded.

Usage comes from each node's NodeMetric (``berth.loadaware``); a node's estimated usage is
its last report, plus the estimate of every pod that report may not include (placed after
``updateTime - reportIntervalSeconds``, or not listed in ``podsMetric``), plus the pod
being scheduled. Pods this scheduler placed a moment ago count at once, so a burst onto
cold nodes spreads instead of piling onto the coldest. A node without a report passes the
filter and scores 0; so does a stale one unless ``filterExpiredNodeMetrics`` filters it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from berth.loadaware.args import LoadAwareArgs, node_thresholds
from berth.loadaware.estimate import NodeReport, estimate, pending_load
from berth.podresources import Resources, pod_limits
from berth.scheduler.framework import MAX_NODE_SCORE, CycleState, Handle, Plugin, Reason, Verdict
from berth.scheduler.nodetable import Ints, NodeTable
from berth.scheduler.podinfo import PodInfo

KIND = "NodeMetric"
EXPIRED = "node(s) nodeMetric expired"


def exceeds(resource: str) -> str:
    return f"node(s) {resource} usage exceed threshold"


class LoadAwareScheduling(Plugin):
    name = "LoadAwareScheduling"

    def __init__(
        self, args: dict[str, Any], handle: Handle, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(args, handle)
        self.config = LoadAwareArgs.parse(args)
        self.clock = clock
        self._reports: dict[str, tuple[str, NodeReport]] = {}
        self._loads: dict[int, tuple[tuple[str, str, int], Resources]] = {}

    # -- what each node reports and will carry -------------------------------------------

    def report(self, node: str) -> NodeReport | None:
        """The node's parsed NodeMetric, None without one or before its agent reported."""
        obj = self.handle.view.custom.get(KIND, {}).get(node)
        if obj is None:
            return None
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._reports.get(node)
        if cached is None or cached[0] != version or not version:
            cached = (version, NodeReport.from_object(obj))
            self._reports[node] = cached
        return cached[1] if cached[1].updated is not None else None

    def pod_estimate(self, pod: PodInfo) -> Resources:
        cached: Resources | None = pod.extra.get(self.name)
        if cached is None:
            limits = pod_limits(pod.raw.get("spec") or {})
            cached = estimate(pod.requests, limits, self.config.estimated_scaling_factors)
            pod.extra[self.name] = cached
        return cached

    def load(self, row: int, node: str, report: NodeReport) -> Resources:
        """Reported usage plus what the pods the report may not include will add."""
        assert report.updated is not None
        nodes = self.handle.view.nodes
        key = (node, self._reports[node][0], nodes.pod_versions[row])
        cached = self._loads.get(row)
        if cached is not None and cached[0] == key:
            return cached[1]
        pending = self.handle.view.unreported(
            row, report.updated - report.interval, lambda p: (p.namespace, p.name) in report.pods
        )
        extra = pending_load(
            [(self.pod_estimate(p), report.pods.get((p.namespace, p.name))) for p in pending]
        )
        total = {r: report.usage.get(r, 0) + extra[r] for r in extra}
        self._loads[row] = (key, total)
        return total

    def _expired(self, report: NodeReport, now: float) -> bool:
        assert report.updated is not None
        return now - report.updated > self.config.node_metric_expiration_seconds

    # -- Filter / Score ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        now = self.clock()
        incoming = self.pod_estimate(pod)
        failed: dict[str, list[int]] = {}
        for name in self.handle.view.custom.get(KIND, {}):
            row = nodes.index.get(name)
            report = self.report(name) if row is not None else None
            if row is None or report is None:
                continue
            if self._expired(report, now):
                if self.config.filter_expired_node_metrics:
                    failed.setdefault(EXPIRED, []).append(row)
                continue
            load = self.load(row, name, report)
            node_meta = (nodes.nodes[row] or {}).get("metadata") or {}
            thresholds = node_thresholds(
                node_meta.get("annotations") or {}, self.config.usage_thresholds
            )
            for resource, threshold in sorted(thresholds.items()):
                col = nodes.columns.get(resource)
                allocatable = int(nodes.allocatable[row, col]) if col is not None else 0
                if threshold <= 0 or allocatable <= 0:
                    continue
                used = load.get(resource, 0) + incoming.get(resource, 0)
                if (200 * used + allocatable) // (2 * allocatable) > threshold:
                    failed.setdefault(exceeds(resource), []).append(row)
                    break
        if not failed:
            return Verdict.all(nodes)
        passed = np.ones(nodes.size, dtype=bool)
        reasons = []
        for message, rows in failed.items():
            mask = np.zeros(nodes.size, dtype=bool)
            mask[rows] = True
            passed &= ~mask
            reasons.append(Reason(mask, message, resolvable=False))
        return Verdict(passed, tuple(reasons))

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        now = self.clock()
        incoming = self.pod_estimate(pod)
        weights = {r: w for r, w in self.config.resource_weights.items() if w > 0}
        total_weight = sum(weights.values())
        scores = np.zeros(len(rows), dtype=np.int64)
        if not total_weight:
            return scores
        for i, row in enumerate(rows):
            name = nodes.names[int(row)]
            report = self.report(name)
            if report is None or self._expired(report, now):
                continue
            load = self.load(int(row), name, report)
            value = 0
            for resource, weight in weights.items():
                col = nodes.columns.get(resource)
                allocatable = int(nodes.allocatable[row, col]) if col is not None else 0
                if allocatable <= 0:
                    continue
                used = load.get(resource, 0) + incoming.get(resource, 0)
                value += weight * max(0, (allocatable - used) * MAX_NODE_SCORE // allocatable)
            scores[i] = value // total_weight
        return scores
