"""Preferred terms: weights summed per (topology key, value), then min-max to 0..100.

Per existing pod: the incoming pod's preferred affinity (+weight) and anti-affinity
(-weight) terms it matches; its own required affinity terms the incoming pod matches
(+hardPodAffinityWeight) and, unless ignorePreferredTermsOfExistingPods, its preferred
ones (+/-weight). The existing pods' terms are read grouped (each distinct term once, with
how many pods on each node hold it), not pod by pod.
"""

from __future__ import annotations

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.selectorowners import SelectorOwners
from berth.scheduler.framework.interface import MAX_NODE_SCORE
from berth.scheduler.plugins.interpodaffinity.common import (
    PREFERRED,
    PREFERRED_ANTI,
    REQUIRED,
    AffinityIndex,
    PairCounts,
)


def topology_scores(
    pod: PodInfo,
    nodes: NodeTable,
    owners: SelectorOwners,
    index: AffinityIndex,
    *,
    hard_weight: int,
    ignore_existing_preferred: bool,
) -> PairCounts:
    own = pod.pod_affinity
    scores = PairCounts(nodes)
    # The pod's preferred terms, over every pod of the cluster.
    for terms, sign in ((own.preferred, 1), (own.preferred_anti, -1)):
        for weighted in terms:
            matching = index.matching(nodes, (weighted.term,), owners)
            scores.add_rows(weighted.term.topology_key, matching * (sign * weighted.weight))
    # The existing pods' terms about this pod.
    pod_ns = owners.labels_of(pod.namespace)
    kinds: list[tuple[str, int]] = []
    if hard_weight > 0:
        kinds.append((REQUIRED, hard_weight))
    if not ignore_existing_preferred:
        kinds += [(PREFERRED, 1), (PREFERRED_ANTI, -1)]
    for kind, factor in kinds:
        for term, per_row in index.existing.held(nodes, kind):
            if term.matches(pod.namespace, pod.labels, pod_ns):
                scores.add_rows(term.topology_key, per_row * factor)
    return scores


def node_scores(scores: PairCounts, nodes: NodeTable, rows: Ints) -> Ints:
    raw = np.zeros(len(rows), dtype=np.int64)
    for key in scores.by_key:
        raw += scores.per_row(key)[rows]
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
