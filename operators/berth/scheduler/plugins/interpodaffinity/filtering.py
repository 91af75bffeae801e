"""Required terms: the PreFilter's pair counts and the Filter over all nodes.

In kube-scheduler's order, a node fails (1) the pod's required affinity when it lacks a
term's topology label or no pod matching all terms is in its domain (unless no pod in the
cluster matches and the pod matches its own terms: the first of a group), which eviction
cannot fix; (2) the pod's required anti-affinity when a matching pod is in its domain;
(3) the existing pods' required anti-affinity against this pod (the symmetry rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import AffinityTerm
from berth.scheduler.cache.selectorowners import SelectorOwners
from berth.scheduler.framework.interface import Reason, Verdict
from berth.scheduler.plugins.interpodaffinity.common import (
    REQUIRED_ANTI,
    AffinityIndex,
    PairCounts,
)

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass
class FilterState:
    namespace_labels: Mapping[str, str]
    owners: SelectorOwners
    nodes: NodeTable
    # Pairs of existing pods' required anti-affinity terms that match the incoming pod.
    existing_anti: PairCounts = field(init=False)
    # Pairs of pods matching all of the incoming pod's required affinity terms.
    affinity: PairCounts = field(init=False)
    # Pairs of pods matching some of its required anti-affinity terms.
    anti: PairCounts = field(init=False)

    def __post_init__(self) -> None:
        self.existing_anti = PairCounts(self.nodes)
        self.affinity = PairCounts(self.nodes)
        self.anti = PairCounts(self.nodes)

    def copy(self) -> FilterState:
        copied = FilterState(self.namespace_labels, self.owners, self.nodes)
        copied.existing_anti = self.existing_anti.copy()
        copied.affinity = self.affinity.copy()
        copied.anti = self.anti.copy()
        return copied

    def update(self, pod: PodInfo, other: PodInfo, row: int, delta: int) -> None:
        """Count (``delta`` 1) or uncount (-1) ``other`` on ``row``."""
        _add_matching(
            self.existing_anti,
            other.pod_affinity.required_anti,
            pod,
            self.namespace_labels,
            row,
            delta,
        )
        terms = pod.pod_affinity
        other_ns = self.owners.labels_of(other.namespace)
        if terms.required and all(
            t.matches(other.namespace, other.labels, other_ns) for t in terms.required
        ):
            _add_matching(self.affinity, terms.required, other, other_ns, row, delta)
        _add_matching(self.anti, terms.required_anti, other, other_ns, row, delta)


def _add_matching(
    counts: PairCounts,
    terms: tuple[AffinityTerm, ...],
    target: PodInfo,
    namespace_labels: Mapping[str, str],
    row: int,
    delta: int,
) -> None:
    """Count ``delta`` on the row's pair for every term ``target`` matches."""
    for term in terms:
        if term.matches(target.namespace, target.labels, namespace_labels):
            counts.add_row(term.topology_key, row, delta)


def pre_filter(
    pod: PodInfo, nodes: NodeTable, owners: SelectorOwners, index: AffinityIndex
) -> FilterState:
    state = FilterState(owners.labels_of(pod.namespace), owners, nodes)
    for term, holders in index.existing.held(nodes, REQUIRED_ANTI):
        if term.matches(pod.namespace, pod.labels, state.namespace_labels):
            state.existing_anti.add_rows(term.topology_key, holders)
    terms = pod.pod_affinity
    if terms.required:
        matching = index.matching(nodes, terms.required, owners)
        for term in terms.required:
            state.affinity.add_rows(term.topology_key, matching)
    for term in terms.required_anti:
        state.anti.add_rows(term.topology_key, index.matching(nodes, (term,), owners))
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
            pods_exist &= state.affinity.positive(term.topology_key)
        first_of_group = state.affinity.empty() and matches_own_terms(pod, state)
        affinity_failed = ~(has_keys & (pods_exist | first_of_group))
    anti_failed = ~affinity_failed & state.anti.any_positive()
    decided = affinity_failed | anti_failed
    existing_failed = ~decided & state.existing_anti.any_positive()
    reasons = []
    if affinity_failed.any():
        reasons.append(Reason(affinity_failed, AFFINITY, resolvable=False))
    if anti_failed.any():
        reasons.append(Reason(anti_failed, ANTI_AFFINITY))
    if existing_failed.any():
        reasons.append(Reason(existing_failed, EXISTING_ANTI_AFFINITY))
    return Verdict(~(decided | existing_failed), tuple(reasons))
