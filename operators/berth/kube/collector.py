"""Python's cyclic collector kept out of the scheduling cycle.

A list builds millions of small objects. While it is read the collector is off: each full
collection it would trigger walks every object already held, and the list of 50,000 pods
spent more time in collections than in parsing (11.3 s against 4.8 s with it off). The
objects are JSON trees, freed by reference counting alone.

Once the scheduler's view is synced, what the lists built is frozen (moved out of the
collector's generations): the view is held for the life of the process, and a full
collection walking it in the middle of scheduling stopped the loop for 0.56 s at 1000 nodes
and 10,000 pods. Only that is frozen: freezing what survives each later full collection
too kept a PodMigrationJob from finishing after a restart in one run in four (the cause
was not found), so later collections walk what came since the view was synced. A
frozen object is still freed by reference counting when the view lets it go; only a cycle
among frozen objects would never be collected, and the view's records make none (pods
scheduled, bound and deleted leave no cyclic garbage).

The collections that do run are timed for ``berth_gc_collection_duration_seconds``.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Histogram

_lists_under_way = 0
_was_enabled = False
_freezing = False

BUCKETS: Final = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def freeze_when_synced() -> None:
    """What the scheduler's view holds once synced is frozen (``synced``): switched on for
    the long-lived process (``berth run``), not for a test run's many short views."""
    global _freezing
    _freezing = True


def synced() -> None:
    """The scheduler's view is synced: if switched on, freeze what it holds (once, however
    often it is called)."""
    global _freezing
    if _freezing:
        _freezing = False
        gc.freeze()


@contextlib.contextmanager
def paused_for_list() -> Iterator[None]:
    """The collector off while a list is read, and on again once the last one is done, as
    it was before the first.

    With a freeze still to come, what the lists built is frozen before the collector is on
    again: every object made while it was off is still in the youngest generation, and the
    first allocation after would walk them all (0.15 s at 1000 nodes and 12,000 pods, on
    the way to the first binding) only to move them up a generation."""
    global _lists_under_way, _was_enabled
    if _lists_under_way == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _lists_under_way += 1
    try:
        yield
    finally:
        _lists_under_way -= 1
        if _lists_under_way == 0:
            if _freezing:
                gc.freeze()
            if _was_enabled:
                gc.enable()


class CollectionMetrics:
    """Each collection the cyclic collector makes, timed by generation (2: the whole heap
    not frozen), on a registry of its own for the process's metrics endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.duration = Histogram(
            "berth_gc_collection_duration_seconds",
            "Seconds each collection of Python's cyclic collector took, by generation "
            "(2 walks every object not frozen). The event loop stands still meanwhile.",
            ["generation"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._started = 0.0

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            took = time.perf_counter() - self._started
            self.duration.labels(generation=str(info["generation"])).observe(took)

    def start(self) -> None:
        for generation in range(3):  # every series present from the start
            self.duration.labels(generation=str(generation))
        gc.callbacks.append(self._observe)

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._observe)
