"""One scheduling attempt: PreFilter, Filter over all nodes, then Score the feasible ones.

Pure decision logic over the cluster view: no API calls, no awaits. Filters run in the
profile's order and a node is charged to the first filter it fails, so the failure message
counts each node once per reason, as kube-scheduler's does.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import numpy as np

from berth.scheduler.framework import CycleState, Diagnosis, Status
from berth.scheduler.messages import FitError
from berth.scheduler.nodetable import Ints, NodeTable
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.registry import ProfilePlugins
from berth.scheduler.view import ClusterView

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE = 5


@dataclass(frozen=True)
class Placement:
    node: str
    row: int
    feasible: int
    scored: int


class Cycle:
    """Finds a node for a pod with one profile's plugins."""

    def __init__(
        self,
        plugins: ProfilePlugins,
        view: ClusterView,
        percentage_of_nodes_to_score: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.plugins = plugins
        self.view = view
        percentage = plugins.profile.percentage_of_nodes_to_score
        self.percentage = percentage if percentage is not None else percentage_of_nodes_to_score
        self.rng = rng or random.Random()
        self.next_start = 0

    def feasible(self, state: CycleState, pod: PodInfo) -> tuple[Ints, Diagnosis]:
        """Rows passing every filter, and why the others failed."""
        nodes = self.view.nodes
        self.view.hold_nominated(state, pod)
        for plugin in self.plugins.at("preFilter"):
            status: Status = plugin.pre_filter(state, pod, nodes)
            if not status.ok:
                empty = np.zeros(nodes.size, dtype=bool)
                return np.zeros(0, dtype=np.int64), Diagnosis(nodes.count, {}, empty, status)
        feasible = nodes.present[: nodes.size].copy()
        histogram: Counter[str] = Counter()
        resolvable = np.zeros(nodes.size, dtype=bool)
        if state.node_subset is not None:
            outside = int((feasible & ~state.node_subset).sum())
            if outside:
                plugins = " ".join(state.node_subset_by)
                histogram[f"node(s) didn't satisfy plugin(s) [{plugins}]"] += outside
            feasible &= state.node_subset
        for plugin in self.plugins.at("filter"):
            if not feasible.any():
                break
            verdict = plugin.filter(state, pod, nodes)
            newly_failed = feasible & ~verdict.passed
            if not newly_failed.any():
                continue
            for reason in verdict.reasons:
                hit = reason.rows & newly_failed
                count = int(hit.sum())
                if count:
                    histogram[reason.message] += count
                    if reason.resolvable:
                        resolvable |= hit
            feasible &= verdict.passed
        return np.flatnonzero(feasible), Diagnosis(nodes.count, dict(histogram), resolvable)

    def reasons_at(self, state: CycleState, pod: PodInfo, row: int) -> tuple[str, ...]:
        """Why the pod does not fit on one row, from the first filter it fails; () if it fits."""
        nodes = self.view.nodes
        for plugin in self.plugins.at("filter"):
            verdict = plugin.filter(state, pod, nodes)
            if not verdict.passed[row]:
                return tuple(r.message for r in verdict.reasons if r.rows[row])
        return ()

    def schedule(self, state: CycleState, pod: PodInfo) -> Placement:
        """The best node for the pod, or FitError."""
        nodes = self.view.nodes
        rows, diagnosis = self.feasible(state, pod)
        if len(rows) == 0:
            raise FitError(diagnosis)
        rows = self._to_score(rows, nodes)
        if len(rows) == 1:
            row = int(rows[0])
            return Placement(nodes.names[row], row, len(rows), 1)
        total = np.zeros(len(rows), dtype=np.int64)
        for plugin in self.plugins.at("score"):
            total += plugin.score(state, pod, nodes, rows) * self.plugins.weights[plugin.name]
        best = np.flatnonzero(total == total.max())
        row = int(rows[best[self.rng.randrange(len(best))]])
        return Placement(nodes.names[row], row, len(rows), len(rows))

    def _to_score(self, rows: Ints, nodes: NodeTable) -> Ints:
        """kube-scheduler's percentageOfNodesToScore: enough feasible nodes, round robin."""
        wanted = self.nodes_to_find(nodes.count)
        if len(rows) <= wanted:
            return rows
        start = self.next_start % max(nodes.size, 1)
        rotated = np.concatenate([rows[rows >= start], rows[rows < start]])
        chosen = rotated[:wanted]
        last = int(chosen[-1])
        self.next_start = (last + 1) % max(nodes.size, 1)
        return np.sort(chosen)

    def nodes_to_find(self, all_nodes: int) -> int:
        percentage = self.percentage or 0
        if all_nodes < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
            return all_nodes
        if percentage == 0:
            percentage = max(MIN_FEASIBLE_NODES_PERCENTAGE, 50 - all_nodes // 125)
        return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)
