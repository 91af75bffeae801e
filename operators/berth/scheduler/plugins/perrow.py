"""Per-node facts derived from a node's pods, recomputed only where pods changed.

Pod affinity and topology spread read, for every node, how many of its pods match a
selector, or which terms its pods carry. Walking every pod of the cluster for each pod
scheduled is the slow path; instead each fact is kept per row with the row's version
(``NodeTable.row_versions``, bumped whenever the row's pods, or their labels, termination
or spec, change) and only rows whose version moved are recomputed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import is_reservation

# Selectors kept at once: enough for the workloads of a cluster, bounded for memory.
MAX_KEYS = 1024


def changed_rows(seen: Ints, nodes: NodeTable) -> tuple[Ints, list[int]]:
    """``seen`` (row versions last read) grown to the table, and the rows whose version
    moved since."""
    size = nodes.size
    if len(seen) < size:
        seen = np.concatenate([seen, np.full(size - len(seen), -1, dtype=np.int64)])
    return seen, np.flatnonzero(seen[:size] != nodes.row_versions[:size]).tolist()


def real_pods(nodes: NodeTable, row: int) -> list[PodInfo]:
    """A row's pods without the capacity reservations hold there."""
    return [p for p in nodes.pods[row].values() if not is_reservation(p)]


class PerRowCounts:
    """How many pods of each row match a predicate, per key."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[Ints, Ints]] = OrderedDict()

    def counts(self, nodes: NodeTable, key: str, match: Callable[[PodInfo], bool]) -> Ints:
        """Per row, its pods (reservations left out) that ``match``; 0 on absent rows."""
        size = nodes.size
        entry = self._entries.pop(key, None)
        if entry is None:
            seen: Ints = np.full(size, -1, dtype=np.int64)
            values: Ints = np.zeros(size, dtype=np.int64)
        else:
            seen, values = entry
            if len(values) < size:
                values = np.concatenate([values, np.zeros(size - len(values), dtype=np.int64)])
        seen, rows = changed_rows(seen, nodes)
        for row in rows:
            values[row] = sum(1 for p in real_pods(nodes, row) if match(p))
        seen[:size] = nodes.row_versions[:size]
        self._entries[key] = (seen, values)
        if len(self._entries) > MAX_KEYS:
            self._entries.popitem(last=False)
        result: Ints = np.where(nodes.present[:size], values[:size], 0)
        return result
