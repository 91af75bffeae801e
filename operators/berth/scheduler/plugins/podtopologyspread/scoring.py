"""ScheduleAnyway constraints (or the defaults): fewer matching pods in a node's domains
score higher.

kube-scheduler's arithmetic: per constraint, a node's domain count times
ln(number of domains + 2), plus maxSkew - 1, summed and rounded; then
100 * (max + min - score) / max over the nodes scored (100 for all when max is 0). With the
System defaults a node lacking a topology label still scores on the others; otherwise it
is ignored (score 0).
"""

from __future__ import annotations

import math

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import HOSTNAME, SpreadConstraint
from berth.scheduler.framework.interface import MAX_NODE_SCORE
from berth.scheduler.plugins.perrow import PerRowCounts
from berth.scheduler.plugins.podtopologyspread.common import (
    has_all_keys,
    included,
    label_codes,
    pods_per_row,
)


def raw_scores(
    pod: PodInfo,
    constraints: tuple[SpreadConstraint, ...],
    nodes: NodeTable,
    rows: Ints,
    counter: PerRowCounts,
    *,
    require_all_keys: bool,
) -> tuple[Ints, np.ndarray]:
    """(rounded raw score per scored row, which scored rows are ignored)."""
    codes = label_codes(nodes, constraints)
    with_keys = has_all_keys(nodes, codes)
    ignored = ~with_keys[rows] if require_all_keys else np.zeros(len(rows), dtype=bool)
    kept = rows[~ignored]
    present = np.flatnonzero(nodes.present[: nodes.size])
    counted_rows = present[with_keys[present]] if require_all_keys else present
    score = np.zeros(len(rows), dtype=np.float64)
    for constraint, column in zip(constraints, codes, strict=True):
        per_row = pods_per_row(counter, nodes, constraint.selector, pod.namespace)
        # A node without the label is the domain "" (only possible with the defaults).
        domain_of = np.where(column < 0, int(column.max(initial=-1)) + 1, column)
        if constraint.topology_key == HOSTNAME:
            size = len(kept)
            count = per_row[rows]
        else:
            seen = np.zeros(int(domain_of.max(initial=0)) + 1, dtype=bool)
            seen[domain_of[kept]] = True
            size = int(seen.sum())
            counting = counted_rows[included(pod, constraint, nodes)[counted_rows]]
            counting = counting[seen[domain_of[counting]]]
            totals = np.bincount(
                domain_of[counting], weights=per_row[counting], minlength=len(seen)
            )
            count = totals[domain_of[rows]]
        weight = math.log(size + 2)
        has_label = column[rows] >= 0
        score += np.where(has_label, count * weight + (constraint.max_skew - 1), 0.0)
    # Go's math.Round: halves away from zero (scores are never negative).
    rounded: Ints = np.floor(score + 0.5).astype(np.int64)
    return rounded, ignored


def normalize(raw: Ints, ignored: np.ndarray) -> Ints:
    kept = raw[~ignored]
    if len(kept) == 0:
        return np.zeros(len(raw), dtype=np.int64)
    top, bottom = int(kept.max()), int(kept.min())
    if top == 0:
        scores = np.full(len(raw), MAX_NODE_SCORE, dtype=np.int64)
    else:
        scores = MAX_NODE_SCORE * (top + bottom - raw) // top
    result: Ints = np.where(ignored, 0, scores)
    return result
