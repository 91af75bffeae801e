"""LoadAwareScheduling: keep nodes under a usage threshold and prefer the least loaded.

Design 004 splits the two: the filter reads the latest NodeMetric report only (nodeUsage,
the prod pods' usage, or a percentile of ``aggregatedNodeUsages``), so that a new pod is
never refused for its own estimate (a percentile not reported gives way to the node's pods'
estimates, as in Koordinator); the score adds the estimates of the pods the report does
not include (placed after ``updateTime - reportIntervalSeconds``, or not listed in
``podsMetric``) and of the pod being scheduled, which is what spreads a burst. A node
without a report passes and scores 0; an expired one is filtered (or, with
``enableScheduleWhenNodeMetricsExpired``, passes) and scores 0. DaemonSet pods are never
filtered by load.

Per node the filter's verdicts and the score's load are kept in columns and recomputed
only for nodes whose pods, node object or NodeMetric changed; the filter and the score are
then numpy expressions over all nodes. Koordinator's Reserve records when a pod was placed;
here the cluster view records it for every plugin (``ClusterView.placed_at``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.loadaware.args import (
    LoadAwareArgs,
    ThresholdProfile,
    ThresholdsAnnotationError,
    node_profile,
)
from berth.loadaware.estimate import NodeReport, estimate, pending_load
from berth.loadaware.priority import PROD, is_daemonset_pod, priority_class
from berth.podresources import CPU, MEMORY, Resources, add, pod_limits, resource_list
from berth.quota.usage import format_units
from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import (
    NODE,
    NODE_METRIC,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    Handle,
    Plugin,
    Reason,
    Verdict,
)

KIND = "NodeMetric"
EXPIRED = "node(s) nodeMetric expired"
# The decision record shows the load figures of at most this many nodes per pod.
EXPLAINED_NODES = 20
MIB = 2**20
Floats = npt.NDArray[np.float64]


def exceeds(resource: str, *, aggregated: bool = False) -> str:
    kind = "aggregated usage" if aggregated else "usage"
    return f"node(s) {resource} {kind} exceed threshold"


def over_threshold(
    usage: Mapping[str, int], allocatable: Mapping[str, int], thresholds: Mapping[str, int]
) -> str | None:
    """The first resource whose round(100 * usage / allocatable) is above its threshold
    (0 turns a check off; a resource the node does not have is not checked)."""
    for resource, threshold in thresholds.items():
        total = allocatable.get(resource, 0)
        if threshold == 0 or total == 0:
            continue
        if (200 * usage.get(resource, 0) + total) // (2 * total) > threshold:
            return resource
    return None


def node_scores(used: Ints, allocatable: Ints, weights: Ints, dominant_weight: int) -> Ints:
    """Koordinator's score per row: per resource (allocatable - used) * 100 / allocatable
    (0 when over or without the resource), weighted; the dominant resource, the one with
    the lowest score, weighs ``dominant_weight`` more."""
    safe = np.maximum(allocatable, 1)
    per = np.where(
        (allocatable > 0) & (used <= allocatable), (allocatable - used) * MAX_NODE_SCORE // safe, 0
    )
    total_weight = int(weights.sum()) + dominant_weight
    if total_weight == 0:
        return np.zeros(len(used), dtype=np.int64)
    scores = (per * weights).sum(axis=1)
    if dominant_weight:
        scores = scores + per.min(axis=1) * dominant_weight
    result: Ints = (scores // total_weight).astype(np.int64)
    return result


class LoadAwareScheduling(Plugin):
    name = "LoadAwareScheduling"
    consumes = frozenset({KIND})

    def __init__(
        self, args: dict[str, Any], handle: Handle, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(args, handle)
        self.config = LoadAwareArgs.parse(args)
        self.profile = self.config.node_profile()
        self.clock = clock
        # Koordinator scores over cpu and memory at least (weight 0 unless given): the
        # dominant resource is found among them even when only it is weighted.
        weights = self.config.resource_weights
        self.scored = list(dict.fromkeys([*weights, CPU, MEMORY]))
        self._weights = np.array([weights.get(r, 0) for r in self.scored], dtype=np.int64)
        self._reports: dict[str, NodeReport] = {}
        # The nodes whose agent has reported: none, and Filter and Score decide nothing.
        self._reporting: set[str] = set()
        self._changed: set[str] = set()
        self._messages: list[str] = [""]  # filter verdicts by code; 0 passes
        width = len(self.scored)
        self._seen: Ints = np.zeros(0, dtype=np.int64)
        self._updated: Floats = np.zeros(0)  # NaN: no report
        self._verdict: Ints = np.zeros((0, 2), dtype=np.int64)  # [other pods, prod pods]
        # [other pods, prod pods]: some threshold is set for them (else the node passes
        # unchecked, expiry included, as in Koordinator).
        self._checks: npt.NDArray[np.bool_] = np.zeros((0, 2), dtype=bool)
        self._load: Ints = np.zeros((0, 2, width), dtype=np.int64)  # [all, prod only]
        self._allocatable: Ints = np.zeros((0, width), dtype=np.int64)
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
            self._reporting.discard(name)
        else:
            report = self._reports[name] = NodeReport.from_object(obj)
            if report.updated is None:
                self._reporting.discard(name)
            else:
                self._reporting.add(name)
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

    def _prod(self, pod: PodInfo) -> bool:
        key = self.name + "/prod"
        if key not in pod.extra:
            pod.extra[key] = priority_class(pod.raw) == PROD
        return bool(pod.extra[key])

    def _reported_prod(self, row: int, report: NodeReport) -> set[tuple[str, str]]:
        """The prod pods of the report: by the priority it carries, else by the pod's own."""
        known = {(p.namespace, p.name): p for p in self.handle.view.pods_at(row)}
        prod = set()
        for key, entry in report.pods.items():
            if entry.priority == PROD or (
                entry.priority is None and key in known and self._prod(known[key])
            ):
                prod.add(key)
        return prod

    def load(self, row: int, report: NodeReport, *, prod_only: bool = False) -> Resources:
        """What the score counts on a node: the reported usage (all of it, a percentile of
        it, or the prod pods' part) plus what the pods the report may not include add."""
        assert report.updated is not None
        view = self.handle.view
        aggregated = self.config.aggregated
        base: Resources | None = report.usage
        if prod_only:
            base = {}
            for key in self._reported_prod(row, report):
                add(base, report.pods[key].usage)
        elif aggregated.scores:
            base = report.aggregated_usage(
                aggregated.score_aggregation_type, aggregated.score_window
            )
        if base is None:  # no such percentile yet: every pod is estimated (Koordinator)
            return self.estimated(row)
        pending = view.unreported(
            row,
            report.updated - report.interval,
            lambda p: (p.namespace, p.name) in report.pods,
        )
        if prod_only:
            pending = [p for p in pending if self._prod(p)]
        extra = pending_load((self.pod_estimate(p), _usage(report, p)) for p in pending)
        total = dict(base)
        add(total, extra)
        return total

    def estimated(self, row: int) -> Resources:
        """The estimates of the node's pods: what Koordinator counts when the window of
        ``aggregatedNodeUsages`` it reads is not reported."""
        total: Resources = {}
        for pod in self.handle.view.pods_at(row):
            add(total, self.pod_estimate(pod))
        return total

    def _verdicts(
        self, report: NodeReport, row: int, profile: ThresholdProfile, allocatable: Resources
    ) -> tuple[int, int]:
        """The filter's verdict codes for other pods and for prod pods (latest report only)."""
        other: str | None
        if profile.aggregated is not None:
            usage = report.aggregated_usage(
                profile.aggregated.aggregation_type, profile.aggregated.duration
            )
            if usage is None:
                usage = self.estimated(row)
            over = over_threshold(usage, allocatable, profile.aggregated.thresholds)
            other = exceeds(over, aggregated=True) if over else None
        else:
            over = over_threshold(report.usage, allocatable, profile.usage)
            other = exceeds(over) if over else None
        prod = other
        if profile.checks_prod:
            prod_usage: Resources = {}
            for key in self._reported_prod(row, report):
                add(prod_usage, report.pods[key].usage)
            over = over_threshold(prod_usage, allocatable, profile.prod)
            prod = exceeds(over) if over else None
        return self._code(other), self._code(prod)

    def _code(self, message: str | None) -> int:
        if message is None:
            return 0
        if message not in self._messages:
            self._messages.append(message)
        return self._messages.index(message)

    def _refresh(self, nodes: NodeTable) -> None:
        """Recompute the rows whose node, pods or NodeMetric changed since the last cycle."""
        size = nodes.size
        if len(self._seen) < size:
            grow = size - len(self._seen)
            self._seen = np.concatenate([self._seen, np.full(grow, -1, dtype=np.int64)])
            self._updated = np.concatenate([self._updated, np.full(grow, np.nan)])
            self._verdict = np.pad(self._verdict, ((0, grow), (0, 0)))
            self._checks = np.pad(self._checks, ((0, grow), (0, 0)))
            self._load = np.pad(self._load, ((0, grow), (0, 0), (0, 0)))
            self._allocatable = np.pad(self._allocatable, ((0, grow), (0, 0)))
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
        node = nodes.nodes[row] or {}
        allocatable = resource_list((node.get("status") or {}).get("allocatable"))
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        try:
            profile = node_profile(annotations, self.profile)
        except ThresholdsAnnotationError as err:
            profile = self.profile
            if self.handle.writer is not None:  # on the node, for `kubectl describe node`
                self.handle.writer.event(
                    node, "Node", "InvalidUsageThresholds", str(err), warning=True
                )
        self._verdict[row] = self._verdicts(report, row, profile, allocatable)
        self._checks[row] = (profile.checks(prod=False), profile.checks(prod=True))
        self._allocatable[row] = [allocatable.get(r, 0) for r in self.scored]
        loads = [self.load(row, report)]
        if self.config.score_according_prod_usage:
            loads.append(self.load(row, report, prod_only=True))
        for i, load in enumerate(loads):
            self._load[row, i] = [load.get(r, 0) for r in self.scored]

    def _ages(self, nodes: NodeTable) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """(reported, expired) per row."""
        self._refresh(nodes)
        updated = self._updated[: nodes.size]
        reported = ~np.isnan(updated) & nodes.present[: nodes.size]
        age = self.clock() - np.where(reported, updated, 0.0)
        return reported, reported & (age >= self.config.node_metric_expiration_seconds)

    # -- Filter / Score ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        if not self._reporting or is_daemonset_pod(pod.raw):
            return Verdict.all(nodes)
        reported, expired = self._ages(nodes)
        if not reported.any():
            return Verdict.all(nodes)
        config = self.config
        column = 1 if self._prod(pod) else 0
        # Every threshold the pod is held to is 0 there: passed unchecked, expiry included.
        checked = reported & self._checks[: nodes.size, column]
        expired = expired & checked
        reasons: list[Reason] = []
        failed = np.zeros(nodes.size, dtype=bool)
        if config.filter_expired_node_metrics:
            checked = checked & ~expired  # expired: filtered, or passed unchecked
            if expired.any() and not config.enable_schedule_when_node_metrics_expired:
                reasons.append(Reason(expired.copy(), EXPIRED, resolvable=False))
                failed |= expired
        codes = self._verdict[: nodes.size, column]
        for code in np.unique(codes[checked]).tolist():
            if code:
                # Usage is not requests: evicting pods does not lower it until reported.
                over = checked & (codes == code)
                reasons.append(Reason(over, self._messages[code], resolvable=False))
                failed |= over
        if not reasons:
            return Verdict.all(nodes)
        return Verdict(~failed, tuple(reasons))

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        if not self._reporting:  # every node scores as the busiest: no preference
            return np.zeros(len(rows), dtype=np.int64)
        reported, expired = self._ages(nodes)
        fresh = (reported & ~expired)[rows]
        prod = self.config.score_according_prod_usage and self._prod(pod)
        incoming = self.pod_estimate(pod)
        used = self._load[rows, 1 if prod else 0] + np.array(
            [incoming.get(r, 0) for r in self.scored], dtype=np.int64
        )
        scores = node_scores(
            used, self._allocatable[rows], self._weights, self.config.dominant_resource_weight
        )
        return np.where(fresh, scores, 0).astype(np.int64)

    # -- the decision record ----------------------------------------------------------

    def explain(self, state: CycleState, pod: PodInfo) -> dict[str, Any]:
        """Per reported node (rejected ones first): the filter's verdict for the pod, the
        latest report's usage against allocatable as a percentage beside the threshold it
        is compared with (the node's annotation, else the configured ones), and the
        report's age."""
        nodes = self.handle.view.nodes
        reported, expired = self._ages(nodes)
        prod = self._prod(pod)
        codes = self._verdict[: nodes.size, 1 if prod else 0]
        rows = np.flatnonzero(reported).tolist()
        ordered = sorted(rows, key=lambda r: (not codes[r], nodes.names[r]))
        now = self.clock()
        figures = {}
        for row in ordered[:EXPLAINED_NODES]:
            name = nodes.names[row]
            report = self.report(name)
            if report is None or report.updated is None:
                continue
            node = nodes.nodes[row] or {}
            allocatable = resource_list((node.get("status") or {}).get("allocatable"))
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            try:
                profile = node_profile(annotations, self.profile)
            except ThresholdsAnnotationError:
                profile = self.profile
            compared, usage, thresholds = self._compared(report, row, profile, prod)
            resources = {}
            for resource, threshold in thresholds.items():
                total = allocatable.get(resource, 0)
                if threshold and total:
                    used = (usage or {}).get(resource, 0)
                    resources[resource] = {
                        "usage": _readable(resource, used),
                        "allocatable": _readable(resource, total),
                        "percent": (200 * used + total) // (2 * total),
                        "threshold": threshold,
                    }
            figures[name] = {
                "verdict": self._messages[int(codes[row])] or "passes",
                "compared": compared,
                "reportAgeSeconds": round(now - report.updated, 1),
                "expired": bool(expired[row]),
                "resources": resources,
            }
        return {
            "reported": int(reported.sum()),
            "prodPod": prod,
            "filterExpiredNodeMetrics": self.config.filter_expired_node_metrics,
            "nodeMetricExpirationSeconds": self.config.node_metric_expiration_seconds,
            "nodes": figures,
        }

    def _compared(
        self, report: NodeReport, row: int, profile: ThresholdProfile, prod: bool
    ) -> tuple[str, Resources | None, dict[str, int]]:
        """What the filter compared for this pod on the node (as ``_verdicts`` decides):
        a description, the usage, and the thresholds."""
        if prod and profile.checks_prod:
            usage: Resources = {}
            for key in self._reported_prod(row, report):
                add(usage, report.pods[key].usage)
            return "usage of prod pods", usage, profile.prod
        aggregated = profile.aggregated
        if aggregated is not None:
            kind = f"{aggregated.aggregation_type} usage"
            window = report.aggregated_usage(aggregated.aggregation_type, aggregated.duration)
            if window is None:
                kind = f"estimated usage (no {kind} reported)"
                window = self.estimated(row)
            return kind, window, aggregated.thresholds
        return "usage", report.usage, profile.usage


def _usage(report: NodeReport, pod: PodInfo) -> Resources | None:
    entry = report.pods.get((pod.namespace, pod.name))
    return entry.usage if entry is not None else None


def _readable(resource: str, value: int) -> str:
    """A figure for people: memory to the MiB."""
    if resource == CPU or value % MIB == 0:
        return format_units(resource, value)
    return format_units(resource, round(value / MIB) * MIB)
