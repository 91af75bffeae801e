"""The PodTopologySpread plugin: PreFilter (+ pod add/remove), Filter, Score, events."""

from __future__ import annotations

from typing import Any

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import SpreadConstraint, selects
from berth.scheduler.framework.clusterevents import NODE, POD, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Handle,
    Plugin,
    Status,
    Verdict,
    skip,
)
from berth.scheduler.plugins.nominated import with_nominated
from berth.scheduler.plugins.perrow import PerRowCounts
from berth.scheduler.plugins.podtopologyspread.common import Defaults
from berth.scheduler.plugins.podtopologyspread.filtering import FilterState, pre_filter, verdict
from berth.scheduler.plugins.podtopologyspread.scoring import normalize, raw_scores


class PodTopologySpread(Plugin):
    name = "PodTopologySpread"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.defaults = Defaults.from_args(args)
        self.counter = PerRowCounts()

    def constraints(self, pod: PodInfo, *, hard: bool) -> tuple[SpreadConstraint, ...]:
        return self.defaults.for_pod(pod, self.handle.view.owners, hard=hard)

    # -- PreFilter / Filter ----------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        hard = self.constraints(pod, hard=True)
        if not hard:
            # No constraint to keep (kube-scheduler's PreFilter answers Skip): neither its
            # Filter nor the dry runs' pod counting runs for this pod.
            return skip(self.name)
        state.data[self.name] = pre_filter(pod, hard, nodes, self.counter)
        return SUCCESS

    def _state(self, state: CycleState) -> FilterState | None:
        found = state.data.get(self.name)
        return found if isinstance(found, FilterState) else None

    def add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        counts = self._state(state)
        if counts is not None:
            counts.update(pod, other, row, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        counts = self._state(state)
        if counts is not None:
            counts.update(pod, other, row, -1)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        if self.name not in state.data:  # a filter run without PreFilter (a dry run)
            self.pre_filter(state, pod, nodes)
        counts = self._state(state)
        if counts is None:
            return Verdict.all(nodes)
        plain = verdict(pod, counts, nodes)
        if not state.nominated_pods:
            return plain

        def counted(row: int, pods: list[PodInfo]) -> Verdict:
            with_pods = counts.copy()
            for other in pods:
                with_pods.update(pod, other, row, 1)
            return verdict(pod, with_pods, nodes)

        return with_nominated(plain, state.nominated_pods, counted)

    # -- Score -----------------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        soft = self.constraints(pod, hard=False)
        if not soft:
            return np.zeros(len(rows), dtype=np.int64)  # kube-scheduler skips the plugin
        require_all = bool(pod.spread) or not self.defaults.system
        raw, ignored = raw_scores(
            pod, soft, nodes, rows, self.counter, require_all_keys=require_all
        )
        return normalize(raw, ignored)

    # -- queueing hints --------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        pod_actions = (
            ActionType.ADD
            | ActionType.UPDATE_POD_LABEL
            | ActionType.UPDATE_POD_TOLERATION
            | ActionType.DELETE
        )
        node_actions = (
            ActionType.ADD
            | ActionType.DELETE
            | ActionType.UPDATE_NODE_LABEL
            | ActionType.UPDATE_NODE_TAINT
        )
        return (
            on(POD, pod_actions, self.after_pod_change),
            on(NODE, node_actions, self.after_node_change),
        )

    def after_pod_change(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> bool:
        """An assigned pod of the same namespace that the constraints select came, went or
        changed labels."""
        changed = [p for p in (old, new) if p is not None]
        if any(not p.node_name or p.namespace != pod.namespace for p in changed):
            return False
        constraints = self.constraints(pod, hard=True) + self.constraints(pod, hard=False)

        def selected(other: PodInfo | None) -> bool:
            return other is not None and any(selects(c.selector, other.labels) for c in constraints)

        if old is not None and new is not None and old.labels == new.labels:
            return False
        return selected(old) or selected(new)

    def after_node_change(
        self, pod: PodInfo, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> bool:
        """A node with the constraints' topology keys came, went or changed those labels
        (or its taints, which nodeTaintsPolicy reads)."""
        constraints = self.constraints(pod, hard=True) + self.constraints(pod, hard=False)
        keys = {c.topology_key for c in constraints}

        def labels(node: dict[str, Any] | None) -> dict[str, str]:
            return dict(((node or {}).get("metadata") or {}).get("labels") or {})

        def taints(node: dict[str, Any] | None) -> Any:
            return ((node or {}).get("spec") or {}).get("taints")

        if old is None or new is None:
            node = old or new
            return all(k in labels(node) for k in keys)
        before, after = labels(old), labels(new)
        if any(before.get(k) != after.get(k) for k in keys):
            return True
        return taints(old) != taints(new) and any(c.honor_node_taints for c in constraints)
