"""NodeResourceTopologyMatch: NUMA alignment from NodeResourceTopology, minus pending.

A topology updater on each node reports its NUMA zones; the report is always older than
this scheduler's latest decisions. With pending tracking on (``cacheResyncPeriodSeconds``
above 0, as scheduler-plugins enables its reserve cache), a node's zones are read as
reported minus the requests of the pods the report does not include yet:

- when the report carries a pods fingerprint (the ``nodeTopologyPodsFingerprint``
  attribute, over all pods or, per ``nodeTopologyPodsFingerprintMethod``, over the pods
  with exclusive resources; or the legacy ``topology.node.k8s.io/fingerprint``
  annotation) and it matches the pods this scheduler knows on the node, nothing is pending;
- when it does not match, the pods placed since the last report that matched are;
- without a fingerprint, the pods with exclusive resources placed at or after the
  updater's last report are (a pod sharing the pool changes no zone, so no report would
  ever follow it).

A report is a change of the updater's own fields, never a label or an annotation someone
else writes (``numa.report``).

"Placed" is the view's record (``ClusterView.unreported``), the same one load-aware
scheduling reads NodeMetric with: our Reserve, or the binding seen by the watch, so a
restart rebuilds it from the API. With tracking off, the report is taken as it is.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from berth.numa.exclusive import has_exclusive_resources
from berth.numa.fingerprint import sign
from berth.numa.fit import STRATEGIES, available, misalignment, node_score
from berth.numa.report import Report, follow
from berth.numa.topology import NodeTopology
from berth.podresources import Resources
from berth.quota.usage import as_resource_list
from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import (
    NODE,
    NODE_RESOURCE_TOPOLOGY,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import CycleState, Handle, Plugin, Reason, Verdict

KIND = "NodeResourceTopology"
# The decision record shows the NUMA zones of at most this many nodes per pod.
EXPLAINED_NODES = 20
# scheduler-plugins' arguments whose only value Berth honours is how it always works.
FIXED_ARGS: dict[str, tuple[object, str]] = {
    "discardReservedNodes": (False, "nodes with pending pods are counted, never discarded"),
    "preemptionMode": ("Disabled", "preemption does not simulate NUMA zones"),
    "cache.foreignPodsDetect": ("All", "every pod on a node counts, whoever placed it"),
    "cache.informerMode": ("Shared", "pods are followed by the scheduler's one watch"),
}


def _check_fixed_args(args: dict[str, Any]) -> None:
    """Refuse, by name, a value Berth cannot honour."""
    cache = args.get("cache") or {}
    if not isinstance(cache, dict):
        raise ValueError("cache: expected a mapping")
    given = {**args, **{f"cache.{k}": v for k, v in cache.items()}}
    for name, (value, meaning) in FIXED_ARGS.items():
        if name in given and given[name] != value:
            raise ValueError(
                f"{name}: {given[name]!r} is not supported; Berth works as {value!r} ({meaning})"
            )


class NodeResourceTopologyMatch(Plugin):
    name = "NodeResourceTopologyMatch"
    consumes = frozenset({KIND})

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        _check_fixed_args(args)
        strategy = args.get("scoringStrategy") or {}
        self.strategy = str(strategy.get("type") or "LeastAllocated")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"scoringStrategy.type {self.strategy!r} is not one of {', '.join(STRATEGIES)}"
            )
        self.weights = [
            (str(r["name"]), int(r.get("weight", 1)))
            for r in strategy.get("resources") or [{"name": "cpu"}, {"name": "memory"}]
        ]
        self.track_pending = int(args.get("cacheResyncPeriodSeconds") or 0) > 0
        self._topologies: dict[str, NodeTopology] = {}
        self._reports: dict[str, Report] = {}
        self._matched_at: dict[str, float] = {}
        self._pending: dict[int, tuple[tuple[str, int, int], Resources]] = {}
        self._versions: dict[str, int] = {}
        for obj in handle.view.custom.get(KIND, {}).values():
            self.on_event(KIND, "ADDED", obj)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(NODE_RESOURCE_TOPOLOGY, ActionType.ALL),
            on(NODE, ActionType.ADD),
            on(POD, ActionType.DELETE),
        )

    def on_event(self, kind: str, event: str, obj: Any) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        self._versions[name] = self._versions.get(name, 0) + 1
        if event == "DELETED":
            self._topologies.pop(name, None)
            self._reports.pop(name, None)
            self._matched_at.pop(name, None)
            return
        report = follow(self._reports.get(name), obj, time.time())
        self._reports[name] = report
        self._topologies[name] = NodeTopology.from_object(obj, report.at)

    def pending(self, row: int, node: str, topology: NodeTopology) -> Resources:
        """Requests on the node that its report does not account for yet."""
        if not self.track_pending:
            return {}
        view = self.handle.view
        key = (node, self._versions.get(node, 0), int(view.nodes.row_versions[row]))
        cached = self._pending.get(row)
        if cached is not None and cached[0] == key:
            return cached[1]
        since = topology.reported_at
        if topology.fingerprint:
            pods = view.pods_at(row)
            if topology.exclusive_only:
                listed = topology.listed
                pods = [p for p in pods if has_exclusive_resources(p.raw.get("spec") or {}, listed)]
            if sign((p.namespace, p.name) for p in pods) == topology.fingerprint:
                self._matched_at[node] = topology.reported_at
                self._pending[row] = (key, {})
                return {}
            since = self._matched_at.get(node, topology.reported_at)
            unreported = view.unreported(row, since, lambda _pod: True)
        else:
            # Only a pod holding resources of its own changes the zones, and so brings a
            # report; one sharing the pool would stay pending for good.
            unreported = [
                p
                for p in view.unreported(row, since, lambda _pod: True)
                if has_exclusive_resources(p.raw.get("spec") or {}, topology.listed)
            ]
        total: Resources = {}
        for pod in unreported:
            for resource, value in pod.requests.items():
                total[resource] = total.get(resource, 0) + value
        self._pending[row] = (key, total)
        return total

    def _checked(self, nodes: NodeTable) -> list[tuple[int, str, NodeTopology]]:
        rows = []
        for name, topology in self._topologies.items():
            row = nodes.index.get(name)
            if row is not None and topology.single_numa_node:
                rows.append((row, name, topology))
        return rows

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        spec = pod.raw.get("spec") or {}
        failed: dict[str, list[int]] = {}
        for row, name, topology in self._checked(nodes):
            reason = misalignment(topology, spec, pod.name, self.pending(row, name, topology))
            if reason is not None:
                failed.setdefault(reason, []).append(row)
        if not failed:
            return Verdict.all(nodes)
        passed = np.ones(nodes.size, dtype=bool)
        reasons = []
        for message, rows in failed.items():
            mask = np.zeros(nodes.size, dtype=bool)
            mask[rows] = True
            passed &= ~mask
            # Evicting pods frees zones only once the updater reports it: not resolvable.
            reasons.append(Reason(mask, message, resolvable=False))
        return Verdict(passed, tuple(reasons))

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        scores = np.zeros(len(rows), dtype=np.int64)
        checked = self._checked(nodes)
        if not checked:
            return scores
        spec = pod.raw.get("spec") or {}
        position = {int(r): i for i, r in enumerate(rows)}
        for row, name, topology in checked:
            if row in position:
                pending = self.pending(row, name, topology)
                scores[position[row]] = node_score(
                    topology, spec, pending, self.strategy, self.weights
                )
        return scores

    # -- the decision record ----------------------------------------------------------

    def explain(self, state: CycleState, pod: PodInfo) -> dict[str, Any]:
        """Per single-numa-node node: each zone's available after pending requests, and
        whether the pod can be aligned there."""
        nodes = self.handle.view.nodes
        spec = pod.raw.get("spec") or {}
        figures = {}
        for row, name, topology in sorted(self._checked(nodes), key=lambda c: c[1]):
            pending = self.pending(row, name, topology)
            reason = misalignment(topology, spec, pod.name, pending)
            figures[name] = {
                "scope": topology.scope,
                "zones": {
                    zone.name: as_resource_list(free)
                    for zone, free in zip(topology.zones, available(topology, pending), strict=True)
                },
                "pending": as_resource_list(pending),
                "fits": reason is None,
                "reason": reason or "",
            }
            if len(figures) >= EXPLAINED_NODES:
                break
        return {"checked": len(self._checked(nodes)), "nodes": figures}

    def pending_ledger(self) -> dict[str, Resources]:
        """The pending ledger now: per node, the requests its report does not include yet
        (nodes with nothing pending left out); empty with tracking off."""
        if not self.track_pending:
            return {}
        nodes = self.handle.view.nodes
        ledger = {}
        for row, name, topology in self._checked(nodes):
            pending = self.pending(row, name, topology)
            if any(pending.values()):
                ledger[name] = pending
        return ledger
