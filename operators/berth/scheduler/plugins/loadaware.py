"""LoadAwareScheduling: keep nodes under a usage threshold and prefer the least loaded.

Usage comes from each node's NodeMetric (``berth.loadaware``); a node's estimated usage is
its last report, plus the estimate of every pod that report may not include (placed after
``updateTime - reportIntervalSeconds``, or not listed in ``podsMetric``), plus the pod
being scheduled. Pods this scheduler placed a moment ago count at once, so a burst onto
cold nodes spreads instead of piling onto the coldest. A node without a report passes the
filter and scores 0; so does a stale one unless ``filterExpiredNodeMetrics`` filters it.

Per node, the reported-plus-pending load and the thresholds are kept in columns and
recomputed only for nodes whose pods, node object or NodeMetric changed; the filter and
the score are then numpy expressions over all nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.loadaware.args import LoadAwareArgs, ThresholdsAnnotationError, node_thresholds
from berth.loadaware.estimate import RESOURCES, NodeReport, estimate, pending_load
from berth.podresources import Resources, pod_limits
from berth.scheduler.clusterevents import (
    NODE,
    NODE_METRIC,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework import MAX_NODE_SCORE, CycleState, Handle, Plugin, Reason, Verdict
from berth.scheduler.nodetable import Ints, Mask, NodeTable
from berth.scheduler.podinfo import PodInfo

KIND = "NodeMetric"
EXPIRED = "node(s) nodeMetric expired"
Floats = npt.NDArray[np.float64]


def exceeds(resource: str) -> str:
    return f"node(s) {resource} usage exceed threshold"


class LoadAwareScheduling(Plugin):
    name = "LoadAwareScheduling"
    consumes = frozenset({KIND})

    def __init__(
        self, args: dict[str, Any], handle: Handle, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(args, handle)
        self.config = LoadAwareArgs.parse(args)
        self.clock = clock
        self._reports: dict[str, NodeReport] = {}
        self._changed: set[str] = set()
        self._seen: Ints = np.zeros(0, dtype=np.int64)
        self._updated: Floats = np.zeros(0)  # NaN: no report
        self._load: Ints = np.zeros((0, len(RESOURCES)), dtype=np.int64)
        self._thresholds: Ints = np.zeros((0, len(RESOURCES)), dtype=np.int64)
        self._weights = np.array(
            [max(0, self.config.resource_weights.get(r, 0)) for r in RESOURCES], dtype=np.int64
        )
        for obj in handle.view.custom.get(KIND, {}).values():
            self.on_event(KIND, "ADDED", obj)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(NODE_METRIC, ActionType.ALL),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
            on(POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
        )

    # -- what each node reports and will carry -------------------------------------------

    def on_event(self, kind: str, event: str, obj: Any) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if event == "DELETED":
            self._reports.pop(name, None)
        else:
            self._reports[name] = NodeReport.from_object(obj)
        self._changed.add(name)

    def report(self, node: str) -> NodeReport | None:
        """The node's NodeMetric report, None without one or before its agent reported."""
        report = self._reports.get(node)
        return report if report is not None and report.updated is not None else None

    def pod_estimate(self, pod: PodInfo) -> Resources:
        cached: Resources | None = pod.extra.get(self.name)
        if cached is None:
            limits = pod_limits(pod.raw.get("spec") or {})
            cached = estimate(pod.requests, limits, self.config.estimated_scaling_factors)
            pod.extra[self.name] = cached
        return cached

    def load(self, row: int, report: NodeReport) -> Resources:
        """Reported usage plus what the pods the report may not include will add."""
        assert report.updated is not None
        pending = self.handle.view.unreported(
            row, report.updated - report.interval, lambda p: (p.namespace, p.name) in report.pods
        )
        extra = pending_load(
            [(self.pod_estimate(p), report.pods.get((p.namespace, p.name))) for p in pending]
        )
        return {r: report.usage.get(r, 0) + extra[r] for r in RESOURCES}

    def _refresh(self, nodes: NodeTable) -> None:
        """Recompute the rows whose node, pods or NodeMetric changed since the last cycle."""
        size = nodes.size
        if len(self._seen) < size:
            grow = size - len(self._seen)
            self._seen = np.concatenate([self._seen, np.full(grow, -1, dtype=np.int64)])
            self._updated = np.concatenate([self._updated, np.full(grow, np.nan)])
            self._load = np.pad(self._load, ((0, grow), (0, 0)))
            self._thresholds = np.pad(self._thresholds, ((0, grow), (0, 0)))
        versions = nodes.row_versions[:size]
        rows = set(np.flatnonzero(versions != self._seen[:size]).tolist())
        rows.update(nodes.index[n] for n in self._changed if n in nodes.index)
        self._changed.clear()
        for row in rows:
            self._compute(nodes, row)
        self._seen[:size] = versions

    def _compute(self, nodes: NodeTable, row: int) -> None:
        report = self.report(nodes.names[row]) if nodes.present[row] else None
        if report is None:
            self._updated[row] = np.nan
            return
        assert report.updated is not None
        self._updated[row] = report.updated
        load = self.load(row, report)
        self._load[row] = [load[r] for r in RESOURCES]
        node = nodes.nodes[row] or {}
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        try:
            thresholds = node_thresholds(annotations, self.config.usage_thresholds)
        except ThresholdsAnnotationError as err:
            thresholds = self.config.usage_thresholds
            if self.handle.writer is not None:  # on the node, for `kubectl describe node`
                self.handle.writer.event(
                    node, "Node", "InvalidUsageThresholds", str(err), warning=True
                )
        self._thresholds[row] = [thresholds.get(r, 0) for r in RESOURCES]

    def _columns(self, nodes: NodeTable) -> tuple[Mask, Mask, Ints, Ints]:
        """(reported, expired, estimated usage without the pod, allocatable) per row."""
        self._refresh(nodes)
        size = nodes.size
        updated = self._updated[:size]
        reported = ~np.isnan(updated) & nodes.present[:size]
        age = self.clock() - np.where(reported, updated, 0.0)
        expired = reported & (age > self.config.node_metric_expiration_seconds)
        allocatable = np.stack(
            [nodes.allocatable[:size, nodes.columns[r]] for r in RESOURCES], axis=1
        )
        return reported, expired, self._load[:size], allocatable

    def _incoming(self, pod: PodInfo) -> Ints:
        estimated = self.pod_estimate(pod)
        return np.array([estimated[r] for r in RESOURCES], dtype=np.int64)

    # -- Filter / Score ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        reported, expired, load, allocatable = self._columns(nodes)
        if not reported.any():
            return Verdict.all(nodes)
        used = load + self._incoming(pod)
        safe = np.maximum(allocatable, 1)
        percent = (200 * used + safe) // (2 * safe)  # round(100 * used / allocatable)
        thresholds = self._thresholds[: nodes.size]
        checked = reported & ~expired
        reasons: list[Reason] = []
        failed = np.zeros(nodes.size, dtype=bool)
        if self.config.filter_expired_node_metrics and expired.any():
            reasons.append(Reason(expired.copy(), EXPIRED, resolvable=False))
            failed |= expired
        for i, resource in enumerate(RESOURCES):  # a node is charged to its first resource
            over = (
                checked
                & ~failed
                & (thresholds[:, i] > 0)
                & (allocatable[:, i] > 0)
                & (percent[:, i] > thresholds[:, i])
            )
            if over.any():
                reasons.append(Reason(over, exceeds(resource), resolvable=False))
                failed |= over
        if not reasons:
            return Verdict.all(nodes)
        return Verdict(~failed, tuple(reasons))

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        total_weight = int(self._weights.sum())
        if not total_weight:
            return np.zeros(len(rows), dtype=np.int64)
        reported, expired, load, allocatable = self._columns(nodes)
        fresh = (reported & ~expired)[rows]
        alloc = allocatable[rows]
        used = load[rows] + self._incoming(pod)
        safe = np.maximum(alloc, 1)
        free = np.maximum(0, (alloc - used) * MAX_NODE_SCORE // safe)
        free = np.where(alloc > 0, free, 0)
        scores = (free * self._weights).sum(axis=1) // total_weight
        return np.where(fresh, scores, 0).astype(np.int64)
