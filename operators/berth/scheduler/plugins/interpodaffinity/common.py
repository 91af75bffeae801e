"""Pairs (topology key, value), and the per-node index of pods the plugin reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from berth.scheduler.nodetable import Ints, Mask, NodeTable
from berth.scheduler.plugins.perrow import PerRow, PerRowCounts
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.podterms import AffinityTerm
from berth.scheduler.selectorowners import SelectorOwners

Pair = tuple[str, str]
Pods = tuple[PodInfo, ...]


class AffinityIndex:
    """kube-scheduler's NodeInfo lists (pods with affinity, pods with required
    anti-affinity) and per-node counts of pods matching terms, kept across cycles and
    refreshed only on nodes whose pods changed. Terminating pods count, as there."""

    def __init__(self) -> None:
        self._lists: PerRow[Pods] = PerRow(())
        self._counts = PerRowCounts()

    def _with(self, nodes: NodeTable, key: str, keep: bool) -> list[tuple[int, Pods]]:
        def pick(pods: list[PodInfo]) -> Pods:
            if keep:
                return tuple(p for p in pods if p.pod_affinity.required_anti)
            return tuple(p for p in pods if not p.pod_affinity.empty)

        values = self._lists.values(nodes, key, pick)
        return [(row, pods) for row, pods in enumerate(values) if pods]

    def with_required_anti(self, nodes: NodeTable) -> list[tuple[int, Pods]]:
        return self._with(nodes, "required-anti", True)

    def with_affinity(self, nodes: NodeTable) -> list[tuple[int, Pods]]:
        return self._with(nodes, "any-affinity", False)

    def matching(
        self, nodes: NodeTable, terms: tuple[AffinityTerm, ...], owners: SelectorOwners
    ) -> Ints:
        """Per row, the pods matching every one of ``terms``."""

        def match(pod: PodInfo) -> bool:
            labels = owners.labels_of(pod.namespace)
            return all(t.matches(pod.namespace, pod.labels, labels) for t in terms)

        key = f"{owners.namespace_version}/{terms!r}"
        return self._counts.counts(nodes, key, match)


def add_pairs(
    counts: Counter[Pair], terms: tuple[AffinityTerm, ...], per_row: Ints, nodes: NodeTable
) -> None:
    """Add each row's number to the pair (term key, the row's value) of every term."""
    for term in terms:
        codes, vocabulary = nodes.label_codes(term.topology_key)
        kept = (codes >= 0) & (per_row != 0)
        if not kept.any():
            continue
        totals = np.bincount(codes[kept], weights=per_row[kept], minlength=len(vocabulary))
        for value, code in vocabulary.items():
            if totals[code]:
                counts[(term.topology_key, value)] += int(totals[code])


def add_terms(
    counts: Counter[Pair],
    terms: tuple[AffinityTerm, ...],
    target: PodInfo,
    namespace_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
    delta: int,
) -> None:
    """Count ``delta`` on the node's pair for every term ``target`` matches."""
    for term in terms:
        value = node_labels.get(term.topology_key)
        if value is not None and term.matches(target.namespace, target.labels, namespace_labels):
            pair = (term.topology_key, value)
            counts[pair] += delta
            if counts[pair] == 0:
                del counts[pair]


def rows_in(counts: Counter[Pair], nodes: NodeTable) -> Mask:
    """Rows whose label value of some counted key has a positive count."""
    by_key: dict[str, list[str]] = {}
    for (key, value), count in counts.items():
        if count > 0:
            by_key.setdefault(key, []).append(value)
    hit: Mask = np.zeros(nodes.size, dtype=bool)
    for key, values in by_key.items():
        codes, vocabulary = nodes.label_codes(key)
        wanted = [vocabulary[v] for v in values if v in vocabulary]
        if wanted:
            hit |= np.isin(codes, wanted)
    return hit
