"""The InterPodAffinity plugin: PreFilter (+ pod add/remove), Filter, Score, events."""

from __future__ import annotations

from typing import Any

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
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
from berth.scheduler.plugins.interpodaffinity.common import AffinityIndex
from berth.scheduler.plugins.interpodaffinity.filtering import FilterState, pre_filter, verdict
from berth.scheduler.plugins.interpodaffinity.scoring import (
    node_scores,
    normalize,
    topology_scores,
)
from berth.scheduler.plugins.nominated import with_nominated

MAX_HARD_WEIGHT = 100


class InterPodAffinity(Plugin):
    name = "InterPodAffinity"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        weight = args.get("hardPodAffinityWeight", 1)
        if not isinstance(weight, int) or not 0 <= weight <= MAX_HARD_WEIGHT:
            raise ValueError(f"hardPodAffinityWeight: not in valid range [0-{MAX_HARD_WEIGHT}]")
        self.hard_weight = weight
        self.ignore_existing_preferred = bool(args.get("ignorePreferredTermsOfExistingPods"))
        self.index = AffinityIndex()

    # -- PreFilter / Filter ----------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        counts = pre_filter(pod, nodes, self.handle.view.owners, self.index)
        terms = pod.pod_affinity
        if not (
            terms.required
            or terms.required_anti
            or not counts.existing_anti.empty()
            or any(
                other.pod_affinity.required_anti
                for pods in state.nominated_pods.values()
                for other in pods
            )
        ):
            # Nothing can refuse it (kube-scheduler's PreFilter answers Skip, and here no
            # nominated pod's anti-affinity either): neither its Filter nor the dry runs'
            # pod counting runs for this pod.
            return skip(self.name)
        state.data[self.name] = counts
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
        counts = self._state(state)
        if counts is None:  # a filter run without PreFilter (a dry run)
            if self.pre_filter(state, pod, nodes).skipped:
                return Verdict.all(nodes)
            counts = self._state(state)
            assert counts is not None
        nominated = state.nominated_pods
        terms = pod.pod_affinity
        if nominated and not (terms.required or terms.required_anti):
            # Without terms of its own, only a nominated pod's required anti-affinity can
            # refuse the pod (FilterState.update counts nothing else): the rows holding
            # none need no second look, which cost a verdict over every node per row.
            # Found once per attempt: a preemption's dry runs filter hundreds of times.
            key = f"{self.name}/nominated"
            kept = state.data.get(key)
            if kept is None or kept[0] is not nominated:
                kept = state.data[key] = (
                    nominated,
                    {
                        row: pods
                        for row, pods in nominated.items()
                        if any(other.pod_affinity.required_anti for other in pods)
                    },
                )
            nominated = kept[1]
        if not (
            terms.required or terms.required_anti or not counts.existing_anti.empty() or nominated
        ):
            return Verdict.all(nodes)
        plain = verdict(pod, counts, nodes)
        if not nominated:
            return plain

        def counted(row: int, pods: list[PodInfo]) -> Verdict:
            with_pods = counts.copy()
            for other in pods:
                with_pods.update(pod, other, row, 1)
            return verdict(pod, with_pods, nodes)

        return with_nominated(plain, nominated, counted)

    # -- Score -----------------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        own = pod.pod_affinity
        if self.ignore_existing_preferred and not (own.preferred or own.preferred_anti):
            return np.zeros(len(rows), dtype=np.int64)
        scores = topology_scores(
            pod,
            nodes,
            self.handle.view.owners,
            self.index,
            hard_weight=self.hard_weight,
            ignore_existing_preferred=self.ignore_existing_preferred,
        )
        if scores.empty():
            return np.zeros(len(rows), dtype=np.int64)
        return normalize(node_scores(scores, nodes, rows))

    # -- queueing hints --------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(
                POD,
                ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE,
                self.after_pod_change,
            ),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL, self.after_node_change),
        )

    def after_pod_change(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> bool:
        """An assigned pod that can satisfy the pod's affinity came (or was relabelled),
        or one its anti-affinity (either way round) was against went."""
        if any(p is not None and not p.node_name for p in (old, new)):
            return False
        owners = self.handle.view.owners
        terms = pod.pod_affinity

        def satisfies_affinity(other: PodInfo) -> bool:
            labels = owners.labels_of(other.namespace)
            return bool(terms.required) and all(
                t.matches(other.namespace, other.labels, labels) for t in terms.required
            )

        def conflicts(other: PodInfo) -> bool:
            other_ns = owners.labels_of(other.namespace)
            pod_ns = owners.labels_of(pod.namespace)
            mine = any(
                t.matches(other.namespace, other.labels, other_ns) for t in terms.required_anti
            )
            theirs = any(
                t.matches(pod.namespace, pod.labels, pod_ns)
                for t in other.pod_affinity.required_anti
            )
            return mine or theirs

        if new is not None and satisfies_affinity(new):
            return True
        if old is not None and new is None:
            return conflicts(old)
        if old is not None and new is not None:
            return conflicts(old) and not conflicts(new)
        return False

    def after_node_change(
        self, pod: PodInfo, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> bool:
        """A node now carrying a topology key of the pod's required terms."""
        terms = pod.pod_affinity
        keys = {t.topology_key for t in (*terms.required, *terms.required_anti)}
        after = ((new or {}).get("metadata") or {}).get("labels") or {}
        before = ((old or {}).get("metadata") or {}).get("labels") or {}
        return any(after.get(k) != before.get(k) for k in keys if k in after)
