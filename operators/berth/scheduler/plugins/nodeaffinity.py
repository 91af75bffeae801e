"""NodeAffinity: nodeSelector and required node affinity filter; preferred terms score.

``NodeAffinityArgs.addedAffinity`` applies to every pod of the profile, as in
kube-scheduler: its required terms filter first (a node they refuse is told so apart from
the pod's own affinity), its preferred terms add to every pod's score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from pydantic import ValidationError

from berth.api.meta import NodeAffinity as NodeAffinityTerms
from berth.api.meta import NodeSelectorOperator
from berth.scheduler.cache.nodetable import Ints, Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import NODE, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    SUCCESS,
    CycleState,
    Handle,
    Plugin,
    Reason,
    Status,
    Verdict,
    unschedulable,
)
from berth.scheduler.plugins.selectors import labels_match, term_matches

REASON = "node(s) didn't match Pod's node affinity/selector"
ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
CONFLICT = "pod affinity terms conflict"
REQUIRED = "NodeAffinity/required"
ADDED = "NodeAffinity/added"


def required_rows(pod: PodInfo, nodes: NodeTable) -> Mask:
    """Rows matching the pod's nodeSelector and required node affinity (what
    PodTopologySpread's nodeAffinityPolicy Honor reads too); read-only, shared by the pods
    with the same selector and affinity until the nodes' labels change."""
    spec = pod.raw.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    key = orjson.dumps([pod.node_selector, required], option=orjson.OPT_SORT_KEYS)
    return nodes.label_mask((REQUIRED, key), lambda: _required_rows(pod, nodes))


def pinned_names(pod: PodInfo) -> set[str] | None:
    """The node names the pod's required terms pin with metadata.name, when every term
    does (DaemonSets; an empty set: they conflict); None when some term allows any name."""
    if pod.required_affinity is None:
        return None
    names: set[str] = set()
    for term in pod.required_affinity.node_selector_terms:
        pinned: set[str] | None = None
        for field in term.match_fields or ():
            if field.key == "metadata.name" and field.operator is NodeSelectorOperator.IN:
                values = set(field.values or ())
                pinned = values if pinned is None else pinned & values
        if pinned is None:
            return None
        names |= pinned
    return names


def _required_rows(pod: PodInfo, nodes: NodeTable) -> Mask:
    passed = labels_match(nodes, pod.node_selector)
    if pod.required_affinity is not None:
        any_term = np.zeros(nodes.size, dtype=bool)
        for term in pod.required_affinity.node_selector_terms:
            any_term |= term_matches(nodes, term)
        passed &= any_term
    return passed


class NodeAffinity(Plugin):
    name = "NodeAffinity"
    filter_reads_no_pods = True

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        try:
            added = NodeAffinityTerms.model_validate(args.get("addedAffinity") or {})
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"addedAffinity.{where}: {first['msg']}") from err
        required = added.required_during_scheduling_ignored_during_execution
        if required is not None and not required.node_selector_terms:
            raise ValueError(
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
                "must have at least one term"
            )
        self.added_required = required
        self.added_preferred = tuple(
            added.preferred_during_scheduling_ignored_during_execution or ()
        )

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        """Terms that all pin metadata.name narrow the attempt to those nodes (DaemonSets)."""
        names = pinned_names(pod)
        if names is None:
            return SUCCESS
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
        enforced = self._enforced(nodes)
        if not pod.node_selector and pod.required_affinity is None:
            own = enforced
        else:
            own = ~required_rows(pod, nodes) & ~enforced
        reasons = tuple(
            Reason(rows, message, resolvable=False)
            for rows, message in ((enforced, ENFORCED), (own, REASON))
            if rows.any()
        )
        return Verdict(~(enforced | own), reasons)

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        names = pinned_names(pod)
        if names is not None and nodes.names[row] not in names:
            return False
        if self._enforced(nodes)[row]:
            return False
        return (not pod.node_selector and pod.required_affinity is None) or bool(
            required_rows(pod, nodes)[row]
        )

    def _enforced(self, nodes: NodeTable) -> Mask:
        """Rows the profile's addedAffinity refuses (none without one); read-only, kept
        until the nodes' labels change."""

        def refused() -> Mask:
            if self.added_required is None:
                return np.zeros(nodes.size, dtype=bool)
            matched = np.zeros(nodes.size, dtype=bool)
            for term in self.added_required.node_selector_terms:
                matched |= term_matches(nodes, term)
            return ~matched

        return nodes.label_mask((ADDED, id(self)), refused)

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        raw = np.zeros(len(rows), dtype=np.int64)
        for preferred in (*self.added_preferred, *pod.preferred_affinity):
            raw += np.where(term_matches(nodes, preferred.preference)[rows], preferred.weight, 0)
        top = int(raw.max()) if len(raw) else 0
        if top == 0:
            return raw
        return raw * MAX_NODE_SCORE // top
