"""Required terms: the PreFilter's pair counts and the Filter over all nodes.

In kube-scheduler's order, a node fails (1) the pod's required affinity when it lacks a
term's topology label or no pod matching all terms is in its domain (unless no pod in the
cluster matches and the pod matches its own terms: the first of a group), which eviction
cannot fix; (2) the pod's required anti-affinity when a matching pod is in its domain;
(3) the existing pods' required anti-affinity against this pod (the symmetry rule).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from berth.scheduler.framework import Reason, Verdict
from berth.scheduler.nodetable import Mask, NodeTable
from berth.scheduler.plugins.interpodaffinity.common import (
    AffinityIndex,
    Pair,
    add_pairs,
    add_terms,
    rows_in,
)
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.selectorowners import SelectorOwners

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass
class FilterState:
    namespace_labels: Mapping[str, str]
    owners: SelectorOwners
    # Pairs of existing pods' required anti-affinity terms that match the incoming pod.
    existing_anti: Counter[Pair] = field(default_factory=Counter)
    # Pairs of pods matching all of the incoming pod's required affinity terms.
    affinity: Counter[Pair] = field(default_factory=Counter)
    # Pairs of pods matching some of its required anti-affinity terms.
    anti: Counter[Pair] = field(default_factory=Counter)

    def copy(self) -> FilterState:
        return FilterState(
            self.namespace_labels,
            self.owners,
            Counter(self.existing_anti),
            Counter(self.affinity),
            Counter(self.anti),
        )

    def update(
        self, pod: PodInfo, other: PodInfo, node_labels: Mapping[str, str], delta: int
    ) -> None:
        """Count (``delta`` 1) or uncount (-1) ``other`` on a node with these labels."""
        add_terms(
            self.existing_anti,
            other.pod_affinity.required_anti,
            pod,
            self.namespace_labels,
            node_labels,
            delta,
        )
        terms = pod.pod_affinity
        other_ns = self.owners.labels_of(other.namespace)
        if terms.required and all(
            t.matches(other.namespace, other.labels, other_ns) for t in terms.required
        ):
            add_terms(self.affinity, terms.required, other, other_ns, node_labels, delta)
        add_terms(self.anti, terms.required_anti, other, other_ns, node_labels, delta)


def pre_filter(
    pod: PodInfo, nodes: NodeTable, owners: SelectorOwners, index: AffinityIndex
) -> FilterState:
    state = FilterState(owners.labels_of(pod.namespace), owners)
    for row, others in index.with_required_anti(nodes):
        labels = nodes.labels[row]
        for other in others:
            add_terms(
                state.existing_anti,
                other.pod_affinity.required_anti,
                pod,
                state.namespace_labels,
                labels,
                1,
            )
    terms = pod.pod_affinity
    if terms.required:
        add_pairs(
            state.affinity, terms.required, index.matching(nodes, terms.required, owners), nodes
        )
    for term in terms.required_anti:
        add_pairs(state.anti, (term,), index.matching(nodes, (term,), owners), nodes)
    return state


def matches_own_terms(pod: PodInfo, state: FilterState) -> bool:
    terms = pod.pod_affinity.required
    return bool(terms) and all(
        t.matches(pod.namespace, pod.labels, state.namespace_labels) for t in terms
    )


def verdict(pod: PodInfo, state: FilterState, nodes: NodeTable) -> Verdict:
    size = nodes.size
    affinity_failed: Mask = np.zeros(size, dtype=bool)
    required = pod.pod_affinity.required
    if required:
        has_keys: Mask = np.ones(size, dtype=bool)
        pods_exist: Mask = np.ones(size, dtype=bool)
        for term in required:
            codes, _ = nodes.label_codes(term.topology_key)
            has_keys &= codes >= 0
            only_key = Counter(
                {pair: n for pair, n in state.affinity.items() if pair[0] == term.topology_key}
            )
            pods_exist &= rows_in(only_key, nodes)
        first_of_group = not state.affinity and matches_own_terms(pod, state)
        affinity_failed = ~(has_keys & (pods_exist | first_of_group))
    anti_failed = ~affinity_failed & rows_in(state.anti, nodes)
    decided = affinity_failed | anti_failed
    existing_failed = ~decided & rows_in(state.existing_anti, nodes)
    reasons = []
    if affinity_failed.any():
        reasons.append(Reason(affinity_failed, AFFINITY, resolvable=False))
    if anti_failed.any():
        reasons.append(Reason(anti_failed, ANTI_AFFINITY))
    if existing_failed.any():
        reasons.append(Reason(existing_failed, EXISTING_ANTI_AFFINITY))
    return Verdict(~(decided | existing_failed), tuple(reasons))
