"""DoNotSchedule constraints: the PreFilter counts per domain and the Filter's skew check.

A node missing a constraint's topology label fails for good; otherwise the pod may go
where matching pods in the node's domain, plus itself if it matches, minus the fewest in
any eligible domain (0 while there are fewer domains than minDomains) stay within maxSkew.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import SpreadConstraint, selects
from berth.scheduler.framework.interface import Reason, Verdict
from berth.scheduler.plugins.perrow import PerRowCounts
from berth.scheduler.plugins.podtopologyspread.common import (
    Counts,
    has_all_keys,
    included,
    label_codes,
    pods_per_row,
)

MISMATCH = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = f"{MISMATCH} (missing required label)"
MAX_INT32 = 2**31 - 1


@dataclass
class DomainCounts:
    """One constraint's matching pods per domain (a label value code) over eligible nodes."""

    constraint: SpreadConstraint
    codes: np.ndarray  # the topology label's value code per row, -1 where absent
    eligible: Mask  # rows whose pods count: all keys present and the inclusion policies
    counts: Counts  # per value code
    domains: Mask  # value codes of eligible rows

    def min_match(self) -> int:
        if not self.domains.any():
            return MAX_INT32
        if int(self.domains.sum()) < self.constraint.min_domains:
            return 0
        return int(self.counts[self.domains].min())

    def copy(self) -> DomainCounts:
        return DomainCounts(
            self.constraint, self.codes, self.eligible, self.counts.copy(), self.domains
        )

    def update(self, pod: PodInfo, other: PodInfo, row: int, delta: int) -> None:
        """A pod counted or uncounted on ``row`` (preemption dry runs, nominated pods)."""
        if row >= len(self.eligible) or not self.eligible[row]:
            return
        if other.namespace != pod.namespace or not selects(self.constraint.selector, other.labels):
            return
        self.counts[self.codes[row]] += delta


@dataclass
class FilterState:
    constraints: list[DomainCounts]

    def copy(self) -> FilterState:
        return FilterState([c.copy() for c in self.constraints])

    def update(self, pod: PodInfo, other: PodInfo, row: int, delta: int) -> None:
        for domain in self.constraints:
            domain.update(pod, other, row, delta)


def pre_filter(
    pod: PodInfo,
    constraints: tuple[SpreadConstraint, ...],
    nodes: NodeTable,
    counter: PerRowCounts,
) -> FilterState:
    codes = label_codes(nodes, constraints)
    with_keys = has_all_keys(nodes, codes)
    state = FilterState([])
    for constraint, column in zip(constraints, codes, strict=True):
        eligible = with_keys & included(pod, constraint, nodes)
        size = int(column.max()) + 1 if len(column) else 0
        per_row = pods_per_row(counter, nodes, constraint.selector, pod.namespace)
        counts = np.bincount(column[eligible], weights=per_row[eligible], minlength=size)
        domains = np.zeros(size, dtype=bool)
        domains[column[eligible]] = True
        state.constraints.append(
            DomainCounts(constraint, column, eligible, counts.astype(np.int64), domains)
        )
    return state


def verdict(pod: PodInfo, state: FilterState, nodes: NodeTable) -> Verdict:
    """Constraints in order: a node is charged to the first it fails."""
    undecided: Mask = np.ones(nodes.size, dtype=bool)
    missing: Mask = np.zeros(nodes.size, dtype=bool)
    skewed: Mask = np.zeros(nodes.size, dtype=bool)
    for domain in state.constraints:
        column = domain.codes[: nodes.size]
        lacks = undecided & (column < 0)
        missing |= lacks
        undecided &= ~lacks
        self_match = 1 if selects(domain.constraint.selector, pod.labels) else 0
        in_domain = domain.counts[np.maximum(column, 0)] if len(domain.counts) else 0
        too_many = undecided & (
            in_domain + self_match - domain.min_match() > domain.constraint.max_skew
        )
        skewed |= too_many
        undecided &= ~too_many
    reasons = []
    if missing.any():
        reasons.append(Reason(missing, MISSING_LABEL, resolvable=False))
    if skewed.any():
        reasons.append(Reason(skewed, MISMATCH))
    return Verdict(~(missing | skewed), tuple(reasons))
