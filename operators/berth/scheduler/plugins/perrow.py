"""Per-node facts derived from a node's pods, recomputed only where pods changed.

Pod affinity and topology spread read, for every node, how many of its pods match a
selector, or which of its pods carry affinity terms. Walking every pod of the cluster for
each pod scheduled is the slow path; instead each fact is kept per row with the row's
version (``NodeTable.row_versions``, bumped whenever the row's pods change) and only rows
whose version moved are recomputed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from berth.scheduler.nodetable import Ints, NodeTable
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.reservations import is_reservation

T = TypeVar("T")

# Selectors kept at once: enough for the workloads of a cluster, bounded for memory.
MAX_KEYS = 1024


class PerRow(Generic[T]):
    """Values per row and key, refreshed row by row as the rows' pods change."""

    def __init__(self, empty: T) -> None:
        self.empty = empty
        self._entries: OrderedDict[str, tuple[Ints, list[T]]] = OrderedDict()

    def values(self, nodes: NodeTable, key: str, compute: Callable[[list[PodInfo]], T]) -> list[T]:
        """``compute`` over each present row's pods (reservations left out), by row."""
        size = nodes.size
        versions = nodes.row_versions[:size]
        entry = self._entries.pop(key, None)
        if entry is None:
            seen: Ints = np.full(size, -1, dtype=np.int64)
            values: list[T] = [self.empty] * size
        else:
            seen, values = entry
            if len(seen) < size:
                seen = np.concatenate([seen, np.full(size - len(seen), -1, dtype=np.int64)])
                values = values + [self.empty] * (size - len(values))
        for row in np.flatnonzero(seen[:size] != versions).tolist():
            pods = [p for p in nodes.pods[row].values() if not is_reservation(p)]
            values[row] = compute(pods) if pods else self.empty
        self._entries[key] = (versions.copy(), values)
        if len(self._entries) > MAX_KEYS:
            self._entries.popitem(last=False)
        present = nodes.present
        return [v if present[row] else self.empty for row, v in enumerate(values[:size])]


class PerRowCounts:
    """How many pods of each row match a predicate, per key."""

    def __init__(self) -> None:
        self._rows: PerRow[int] = PerRow(0)

    def counts(self, nodes: NodeTable, key: str, match: Callable[[PodInfo], bool]) -> Ints:
        values = self._rows.values(nodes, key, lambda pods: sum(1 for p in pods if match(p)))
        return np.array(values, dtype=np.int64)
