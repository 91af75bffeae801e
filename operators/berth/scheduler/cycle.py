"""The scheduling algorithm of one attempt: find the nodes that fit, score them, pick one.

kube-scheduler's ``schedulePod``: the framework runs PreFilter and Filter over every row;
a preemptor's nominated node is taken when it passes them;
``percentageOfNodesToScore`` limits how many feasible nodes are scored, taken round robin
from where the last attempt stopped; ties between the best scores are broken at random.
Pure decision logic over the cluster view: no API calls, no awaits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import CycleState, Diagnosis
from berth.scheduler.framework.messages import FitError
from berth.scheduler.framework.runtime import Framework

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE = 5


@dataclass(frozen=True)
class Placement:
    node: str
    row: int
    feasible: int
    scored: int


@dataclass
class Cycle:
    """Finds a node for a pod with one profile's framework."""

    framework: Framework
    rng: random.Random = field(default_factory=random.Random)
    next_start: int = 0
    # Gangs whose victims are leaving (gang key -> the victims' uids): no new preemption
    # for them until those are gone, as kube-scheduler waits for a nominated pod's victims.
    preempting: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def percentage(self) -> int | None:
        return self.framework.percentage

    def feasible(self, state: CycleState, pod: PodInfo) -> tuple[Ints, Diagnosis]:
        """Rows passing every filter, and why the others failed."""
        return self.framework.run_filter(state, pod)

    def schedule(self, state: CycleState, pod: PodInfo) -> Placement:
        """The best node for the pod, or FitError."""
        nodes = self.framework.view.nodes
        rows, diagnosis = self.feasible(state, pod)
        if len(rows) == 0:
            raise FitError(diagnosis)
        nominated = self._nominated_row(pod, rows)
        if nominated is not None:
            return Placement(nodes.names[nominated], nominated, 1, 1)
        rows = self._to_score(rows, nodes)
        if len(rows) == 1:
            row = int(rows[0])
            return Placement(nodes.names[row], row, len(rows), 1)
        total = self.framework.run_score(state, pod, rows)
        best = np.flatnonzero(total == total.max())
        row = int(rows[best[self.rng.randrange(len(best))]])
        return Placement(nodes.names[row], row, len(rows), len(rows))

    def _nominated_row(self, pod: PodInfo, rows: Ints) -> int | None:
        """The pod's nominated node when it passes every filter: kube-scheduler tries a
        preemptor's nominated node first and takes it unscored, so the pod goes where its
        victims made room (and into the Reservation held for it there), not to another node
        that happens to score higher."""
        view = self.framework.view
        held = view.nominated.get(pod.uid)
        node = held[0] if held is not None else pod.nominated_node
        row = view.nodes.index.get(node) if node else None
        if row is None or not bool(np.any(rows == row)):
            return None
        return row

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
