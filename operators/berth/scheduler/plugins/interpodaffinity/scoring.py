"""Preferred terms: weights summed per (topology key, value), then min-max to 0..100.

Per existing pod: the incoming pod's preferred affinity (+weight) and anti-affinity
(-weight) terms it matches; its own required affinity terms the incoming pod matches
(+hardPodAffinityWeight) and, unless ignorePreferredTermsOfExistingPods, its preferred
ones (+/-weight). All nodes' pods are walked when the incoming pod has preferred terms,
else only pods with affinity of their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from berth.scheduler.framework import MAX_NODE_SCORE
from berth.scheduler.nodetable import Ints, NodeTable
from berth.scheduler.plugins.interpodaffinity.common import (
    AffinityIndex,
    Pair,
    add_pairs,
    add_terms,
)
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.podterms import WeightedAffinityTerm
from berth.scheduler.selectorowners import SelectorOwners


def _weighted(
    counts: Counter[Pair],
    terms: tuple[WeightedAffinityTerm, ...],
    target: PodInfo,
    namespace_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
    sign: int,
) -> None:
    for weighted in terms:
        add_terms(
            counts, (weighted.term,), target, namespace_labels, node_labels, sign * weighted.weight
        )


def topology_scores(
    pod: PodInfo,
    nodes: NodeTable,
    owners: SelectorOwners,
    index: AffinityIndex,
    *,
    hard_weight: int,
    ignore_existing_preferred: bool,
) -> Counter[Pair]:
    own = pod.pod_affinity
    scores: Counter[Pair] = Counter()
    # The pod's preferred terms, over every pod of the cluster.
    for terms, sign in ((own.preferred, 1), (own.preferred_anti, -1)):
        for weighted in terms:
            matching = index.matching(nodes, (weighted.term,), owners)
            add_pairs(scores, (weighted.term,), matching * (sign * weighted.weight), nodes)
    # The existing pods' terms about this pod.
    pod_ns = owners.labels_of(pod.namespace)
    for row, others in index.with_affinity(nodes):
        labels = nodes.labels[row]
        for other in others:
            theirs = other.pod_affinity
            if hard_weight > 0:
                add_terms(scores, theirs.required, pod, pod_ns, labels, hard_weight)
            if not ignore_existing_preferred:
                _weighted(scores, theirs.preferred, pod, pod_ns, labels, 1)
                _weighted(scores, theirs.preferred_anti, pod, pod_ns, labels, -1)
    return scores


def node_scores(scores: Counter[Pair], nodes: NodeTable, rows: Ints) -> Ints:
    raw = np.zeros(len(rows), dtype=np.int64)
    for (key, value), weight in scores.items():
        codes, vocabulary = nodes.label_codes(key)
        code = vocabulary.get(value)
        if code is not None and weight:
            raw += np.where(codes[rows] == code, weight, 0)
    return raw


def normalize(raw: Ints) -> Ints:
    if len(raw) == 0:
        return raw
    low, high = int(raw.min()), int(raw.max())
    if high - low <= 0:
        return np.zeros(len(raw), dtype=np.int64)
    fractions = (raw - low).astype(np.float64) / float(high - low)
    result: Ints = (float(MAX_NODE_SCORE) * fractions).astype(np.int64)
    return result
