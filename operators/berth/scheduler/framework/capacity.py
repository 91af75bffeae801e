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


def free_at(state: CycleState, nodes: NodeTable, row: int, returned: Ints | None = None) -> Ints:
    """``free_capacity``'s row ``row`` alone, computed for that row only; with
    ``returned`` (by column), as if pods requesting that much had left the row."""
    width = nodes.allocatable.shape[1]
    free: Ints = nodes.allocatable[row].copy()
    if state.ignore_requested:
        return free
    free -= nodes.requested[row]
    if returned is not None:
        free += returned
    if state.withheld is not None:
        free -= _row(state.withheld, row, width)
    if state.nominated is not None:
        free = np.maximum(free - _row(state.nominated, row, width), np.minimum(free, 0))
    if state.released is not None:
        free += _row(state.released, row, width)
    return free


def _row(table: Ints, row: int, width: int) -> Ints:
    out: Ints = padded(table[row : row + 1], width)[0]
    return out
