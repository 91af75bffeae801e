"""NodeName: a pod (or reservation template) pinned with spec.nodeName fits only there."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import NODE, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import CycleState, Plugin, Verdict

REASON = "node(s) didn't match the requested node name"


class NodeName(Plugin):
    name = "NodeName"
    filter_reads_no_pods = True

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (on(NODE, ActionType.ADD),)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        pinned = _pinned(pod)
        if not pinned:
            return Verdict.all(nodes)
        failed = np.ones(nodes.size, dtype=bool)
        row = nodes.index.get(pinned)
        if row is not None:
            failed[row] = False
        return Verdict.failing(nodes, failed, REASON, resolvable=False)

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        pinned = _pinned(pod)
        return not pinned or nodes.names[row] == pinned


def _pinned(pod: PodInfo) -> str:
    return str((pod.raw.get("spec") or {}).get("nodeName") or "")
