"""NodeAffinity: nodeSelector and required node affinity filter; preferred terms score."""

from __future__ import annotations

import numpy as np

from berth.api.meta import NodeSelectorOperator
from berth.scheduler.clusterevents import NODE, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework import (
    MAX_NODE_SCORE,
    SUCCESS,
    CycleState,
    Plugin,
    Status,
    Verdict,
    unschedulable,
)
from berth.scheduler.nodetable import Ints, Mask, NodeTable
from berth.scheduler.plugins.selectors import labels_match, term_matches
from berth.scheduler.podinfo import PodInfo

REASON = "node(s) didn't match Pod's node affinity/selector"
CONFLICT = "pod affinity terms conflict"


def required_rows(pod: PodInfo, nodes: NodeTable) -> Mask:
    """Rows matching the pod's nodeSelector and required node affinity (what
    PodTopologySpread's nodeAffinityPolicy Honor reads too)."""
    passed = labels_match(nodes, pod.node_selector)
    if pod.required_affinity is not None:
        any_term = np.zeros(nodes.size, dtype=bool)
        for term in pod.required_affinity.node_selector_terms:
            any_term |= term_matches(nodes, term)
        passed &= any_term
    return passed


class NodeAffinity(Plugin):
    name = "NodeAffinity"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        """Terms that all pin metadata.name narrow the attempt to those nodes (DaemonSets)."""
        if pod.required_affinity is None:
            return SUCCESS
        names: set[str] = set()
        for term in pod.required_affinity.node_selector_terms:
            pinned: set[str] | None = None
            for field in term.match_fields or ():
                if field.key == "metadata.name" and field.operator is NodeSelectorOperator.IN:
                    values = set(field.values or ())
                    pinned = values if pinned is None else pinned & values
            if pinned is None:
                return SUCCESS  # some term allows any node name
            names |= pinned
        if not names:
            return unschedulable(self.name, CONFLICT, resolvable=False)
        rows = np.zeros(nodes.size, dtype=bool)
        for name in names:
            row = nodes.index.get(name)
            if row is not None:
                rows[row] = True
        state.limit_nodes(rows, self.name)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        if not pod.node_selector and pod.required_affinity is None:
            return Verdict.all(nodes)
        return Verdict.failing(nodes, ~required_rows(pod, nodes), REASON, resolvable=False)

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        raw = np.zeros(len(rows), dtype=np.int64)
        for preferred in pod.preferred_affinity:
            raw += np.where(term_matches(nodes, preferred.preference)[rows], preferred.weight, 0)
        top = int(raw.max()) if len(raw) else 0
        if top == 0:
            return raw
        return raw * MAX_NODE_SCORE // top
