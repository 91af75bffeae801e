"""What a node has free for a pod in this attempt: one rule for every plugin that asks.

Allocatable minus what the node's pods (and reservations) request; minus what nominated
preemptors of at least the pod's priority hold there, which takes only unreserved capacity
and never what a reservation gives back; minus what a preemption dry run's victims gave
back to their reservations; plus what a reservation gives back to its owner.
"""

from __future__ import annotations

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.framework.interface import CycleState


def unreserved_free(state: CycleState, nodes: NodeTable) -> Ints:
    """Per row and column: free capacity no reservation gives back, after nominated holds."""
    free = nodes.allocatable[: nodes.size] - nodes.requested[: nodes.size]
    if state.withheld is not None:
        free = free - _widened(state.withheld, free)
    if state.nominated is not None:
        free = np.maximum(free - _widened(state.nominated, free), np.minimum(free, 0))
    return free


def free_capacity(state: CycleState, nodes: NodeTable) -> Ints:
    """Per row and column: what the pod may use (everything allocatable for a
    pre-allocated reservation, which waits for room instead)."""
    if state.ignore_requested:
        return nodes.allocatable[: nodes.size].copy()
    free = unreserved_free(state, nodes)
    if state.released is not None:
        free = free + _widened(state.released, free)
    return free


def _widened(table: Ints, like: Ints) -> Ints:
    return padded(table, like.shape[1])[: like.shape[0]]


def padded(table: Ints, width: int) -> Ints:
    """A per-row table built before a resource was first seen, padded to ``width`` columns."""
    if table.shape[1] < width:
        return np.pad(table, ((0, 0), (0, width - table.shape[1])))
    return table


# The cycle state's entry for free_at's parts of each row asked about in this attempt.
ROW_PARTS_KEY = "capacity/row-parts"
RowParts = tuple[list[int], list[int], list[int] | None, list[int] | None]


def free_at(
    state: CycleState,
    nodes: NodeTable,
    row: int,
    cols: tuple[int, ...],
    returned: list[int] | None = None,
) -> list[int]:
    """``free_capacity``'s row ``row`` alone, for the columns ``cols``; with ``returned``
    (one amount per column of ``cols``), as if pods requesting that much had left the row.
    Plain integers, the row's parts read once per attempt while its pods stay: a
    preemption's dry runs ask about hundreds of rows an attempt, a few columns each."""
    allocatable, used, held, released = _parts_at(state, nodes, row, cols)
    if state.ignore_requested:
        return list(allocatable)
    free = [a - u for a, u in zip(allocatable, used, strict=True)]
    if returned is not None:
        free = [f + r for f, r in zip(free, returned, strict=True)]
    if held is not None:
        free = [max(f - h, min(f, 0)) for f, h in zip(free, held, strict=True)]
    if released is not None:
        free = [f + r for f, r in zip(free, released, strict=True)]
    return free


def _parts_at(state: CycleState, nodes: NodeTable, row: int, cols: tuple[int, ...]) -> RowParts:
    """(allocatable, requested and withheld, held by nominated preemptors, given back by
    reservations) of the row's columns ``cols``. Kept for the attempt, until the row
    changes, when no PreFilter extension may change what is withheld or given back as a
    dry run takes pods off (the dry runs then name their victims instead)."""
    cache: dict[int, tuple[int, tuple[int, ...], RowParts]] = state.data.setdefault(
        ROW_PARTS_KEY, {}
    )
    version = nodes.row_versions.item(row)
    found = cache.get(row)
    if found is not None and found[0] == version and found[1] is cols:
        return found[2]
    # Plain reads of a few cells: fancy indexing and tolist cost more than the row is worth.
    allocatable, requested = nodes.allocatable, nodes.requested
    used = [requested.item(row, c) for c in cols]
    if state.withheld is not None:
        used = [u + _cell(state.withheld, row, c) for u, c in zip(used, cols, strict=True)]
    nominated, released = state.nominated, state.released
    parts: RowParts = (
        [allocatable.item(row, c) for c in cols],
        used,
        None if nominated is None else [_cell(nominated, row, c) for c in cols],
        None if released is None else [_cell(released, row, c) for c in cols],
    )
    if state.judges_without:
        cache[row] = (version, cols, parts)
    return parts


def _cell(table: Ints, row: int, col: int) -> int:
    """A per-row table's cell; 0 in a column it was built without (see ``padded``)."""
    return table.item(row, col) if col < table.shape[1] else 0
