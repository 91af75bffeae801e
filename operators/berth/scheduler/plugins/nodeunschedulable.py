"""NodeUnschedulable: cordoned nodes take only pods that tolerate the unschedulable taint."""

from __future__ import annotations

from collections.abc import Sequence

from berth.api.meta import Taint, TaintEffect
from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import NODE, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import CycleState, Plugin, Verdict

REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect=TaintEffect.NO_SCHEDULE)


class NodeUnschedulable(Plugin):
    name = "NodeUnschedulable"
    filter_reads_no_pods = True

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(
                NODE,
                ActionType.ADD
                | ActionType.UPDATE_NODE_UNSCHEDULABLE
                | ActionType.UPDATE_NODE_TAINT,
            ),
        )

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        if _tolerates(pod):
            return Verdict.all(nodes)
        failed = nodes.unschedulable[: nodes.size].copy()
        return Verdict.failing(nodes, failed, REASON, resolvable=False)

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        return not nodes.unschedulable[row] or _tolerates(pod)


def _tolerates(pod: PodInfo) -> bool:
    return any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations)
