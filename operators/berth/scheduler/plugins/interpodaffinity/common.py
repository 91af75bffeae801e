"""Counts per (topology key, value), and the per-node index of pods the plugin reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from berth.scheduler.cache.nodetable import Ints, Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import AffinityTerm, PodAffinity
from berth.scheduler.cache.selectorowners import SelectorOwners
from berth.scheduler.plugins.perrow import PerRowCounts, changed_rows, real_pods

# The kinds of terms existing pods hold, as kube-scheduler's scoring and the symmetry
# rule read them.
REQUIRED = "required"
REQUIRED_ANTI = "required-anti"
PREFERRED = "preferred"
PREFERRED_ANTI = "preferred-anti"


class PairCounts:
    """A number per (topology key, value): kube-scheduler's topologyToMatchedTermCount.

    Kept as one array per key over the key's value codes (``NodeTable.label_codes``), so
    that reading it for every node is one numpy index. Valid for one scheduling cycle:
    codes are renumbered when nodes' labels change, which never happens within one.
    """

    def __init__(self, nodes: NodeTable) -> None:
        self.nodes = nodes
        self.by_key: dict[str, Ints] = {}

    def _array(self, key: str) -> tuple[np.ndarray, Ints]:
        codes, vocabulary = self.nodes.label_codes(key)
        counts = self.by_key.get(key)
        if counts is None:
            counts = self.by_key[key] = np.zeros(len(vocabulary), dtype=np.int64)
        return codes, counts

    def add_rows(self, key: str, per_row: Ints) -> None:
        """Add each row's number to its value of ``key`` (rows without the label: none)."""
        codes, counts = self._array(key)
        kept = (codes >= 0) & (per_row[: len(codes)] != 0)
        if kept.any():
            totals = np.bincount(codes[kept], weights=per_row[: len(codes)][kept])
            counts[: len(totals)] += totals.astype(np.int64)

    def add_row(self, key: str, row: int, delta: int) -> None:
        """Add ``delta`` to one row's value of ``key``, if it has the label."""
        codes, counts = self._array(key)
        if row < len(codes) and codes[row] >= 0:
            counts[codes[row]] += delta

    def per_row(self, key: str) -> Ints:
        """Each row's count for its value of ``key`` (0 where it lacks the label)."""
        codes, _ = self.nodes.label_codes(key)
        counts = self.by_key.get(key)
        if counts is None:
            return np.zeros(len(codes), dtype=np.int64)
        result: Ints = np.where(codes >= 0, counts[np.maximum(codes, 0)], 0)
        return result

    def positive(self, key: str) -> Mask:
        """Rows whose value of ``key`` has a positive count."""
        return self.per_row(key) > 0

    def any_positive(self) -> Mask:
        """Rows whose value of some key has a positive count."""
        hit: Mask = np.zeros(self.nodes.size, dtype=bool)
        for key in self.by_key:
            hit |= self.positive(key)
        return hit

    def empty(self) -> bool:
        return not any(counts.any() for counts in self.by_key.values())

    def copy(self) -> PairCounts:
        copied = PairCounts(self.nodes)
        copied.by_key = {key: counts.copy() for key, counts in self.by_key.items()}
        return copied


@dataclass
class HeldTerm:
    """One distinct term existing pods hold, and per row how many of them (or the sum of
    their weights) hold it."""

    term: AffinityTerm
    per_row: Ints
    holders: int = 0


def _held(affinity: PodAffinity) -> list[tuple[str, AffinityTerm, int]]:
    """(kind, term, weight) for each term a pod holds."""
    return [
        *((REQUIRED, t, 1) for t in affinity.required),
        *((REQUIRED_ANTI, t, 1) for t in affinity.required_anti),
        *((PREFERRED, w.term, w.weight) for w in affinity.preferred),
        *((PREFERRED_ANTI, w.term, w.weight) for w in affinity.preferred_anti),
    ]


class ExistingTerms:
    """The affinity terms of the pods on the nodes, grouped: identical terms (as parsed,
    namespaces resolved) are one entry with a count per row. What kube-scheduler walks
    pod by pod (NodeInfo's PodsWithAffinity, PodsWithRequiredAntiAffinity) is then read
    once per distinct term. Refreshed pod by pod on rows whose pods changed; terminating
    pods count, as there."""

    def __init__(self) -> None:
        self._seen: Ints = np.zeros(0, dtype=np.int64)
        # Per row: uid -> (the pod's parsed terms, its entries: (kind, key, weight)).
        self._rows: list[dict[str, tuple[PodAffinity, list[tuple[str, str, int]]]]] = []
        self._terms: dict[str, dict[str, HeldTerm]] = {
            kind: {} for kind in (REQUIRED, REQUIRED_ANTI, PREFERRED, PREFERRED_ANTI)
        }

    def _refresh(self, nodes: NodeTable) -> None:
        self._seen, rows = changed_rows(self._seen, nodes)
        size = nodes.size
        if len(self._rows) < size:
            self._rows.extend({} for _ in range(size - len(self._rows)))
        for row in rows:
            held = self._rows[row]
            pods = {p.uid: p for p in real_pods(nodes, row) if not p.pod_affinity.empty}
            for uid in [uid for uid in held if uid not in pods]:
                self._count(row, held.pop(uid)[1], -1)
            for uid, pod in pods.items():
                before = held.get(uid)
                if before is not None and before[0] is pod.pod_affinity:
                    continue
                if before is not None:
                    self._count(row, before[1], -1)
                entries = self._enter(pod.pod_affinity, size)
                held[uid] = (pod.pod_affinity, entries)
                self._count(row, entries, 1)
        self._seen[:size] = nodes.row_versions[:size]

    def _enter(self, affinity: PodAffinity, size: int) -> list[tuple[str, str, int]]:
        entries = []
        for kind, term, weight in _held(affinity):
            key = repr(term)
            if key not in self._terms[kind]:
                self._terms[kind][key] = HeldTerm(term, np.zeros(size, dtype=np.int64))
            entries.append((kind, key, weight))
        return entries

    def _count(self, row: int, entries: list[tuple[str, str, int]], sign: int) -> None:
        for kind, key, weight in entries:
            held = self._terms[kind][key]
            if row >= len(held.per_row):
                grown = max(row + 1, 2 * len(held.per_row))
                held.per_row = np.concatenate(
                    [held.per_row, np.zeros(grown - len(held.per_row), dtype=np.int64)]
                )
            held.per_row[row] += sign * weight
            held.holders += sign
            if held.holders == 0:
                del self._terms[kind][key]

    def held(self, nodes: NodeTable, kind: str) -> Iterator[tuple[AffinityTerm, Ints]]:
        """Each distinct term of ``kind`` existing pods hold, with per row (over the
        present ones) how many hold it or, for preferred terms, the sum of their weights."""
        self._refresh(nodes)
        size = nodes.size
        present = nodes.present[:size]
        for entry in list(self._terms[kind].values()):
            per_row = np.zeros(size, dtype=np.int64)
            length = min(size, len(entry.per_row))
            per_row[:length] = entry.per_row[:length]
            yield entry.term, np.where(present, per_row, 0)


class AffinityIndex:
    """What the plugin reads of the pods on the nodes, kept across cycles: the terms they
    hold, and per node how many match a set of terms."""

    def __init__(self) -> None:
        self.existing = ExistingTerms()
        self._counts = PerRowCounts()

    def matching(
        self, nodes: NodeTable, terms: tuple[AffinityTerm, ...], owners: SelectorOwners
    ) -> Ints:
        """Per row, the pods matching every one of ``terms``."""

        def match(pod: PodInfo) -> bool:
            labels = owners.labels_of(pod.namespace)
            return all(t.matches(pod.namespace, pod.labels, labels) for t in terms)

        key = f"{owners.namespace_version}/{terms!r}"
        return self._counts.counts(nodes, key, match)
