"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; PreferNoSchedule scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from berth.api.meta import Taint, TaintEffect, Toleration
from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import NODE, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import MAX_NODE_SCORE, CycleState, Plugin, Reason, Verdict

HARD_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def first_untolerated(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]
) -> Taint | None:
    for taint in taints:
        if taint.effect in HARD_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value or ''}}}"


class TaintToleration(Plugin):
    name = "TaintToleration"
    filter_reads_no_pods = True

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        group_of_row, groups = nodes.taint_groups()
        reasons: list[Reason] = []
        passed = np.ones(nodes.size, dtype=bool)
        for group, taints in enumerate(groups):
            taint = first_untolerated(taints, pod.tolerations) if taints else None
            if taint is not None:
                rows = group_of_row == group
                passed &= ~rows
                reasons.append(Reason(rows, reason(taint), resolvable=False))
        return Verdict(passed, tuple(reasons))

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        return first_untolerated(nodes.taints[row], pod.tolerations) is None

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        """Fewer intolerable PreferNoSchedule taints score higher."""
        group_of_row, groups = nodes.taint_groups()
        soft = tuple(
            t for t in pod.tolerations if t.effect in (None, "", TaintEffect.PREFER_NO_SCHEDULE)
        )
        per_group = np.array(
            [
                sum(
                    1
                    for taint in taints
                    if taint.effect is TaintEffect.PREFER_NO_SCHEDULE
                    and not any(t.tolerates(taint) for t in soft)
                )
                for taints in groups
            ],
            dtype=np.int64,
        )
        counts = per_group[group_of_row[rows]]
        top = int(counts.max()) if len(counts) else 0
        if top == 0:
            return np.full(len(rows), MAX_NODE_SCORE, dtype=np.int64)
        return MAX_NODE_SCORE - counts * MAX_NODE_SCORE // top
