"""The cyclic collector: what the synced view holds is frozen once (in ``berth run``),
and every collection that runs is timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from berth.kube import collector
from berth.kube.watch import Informer
from tests.unit.test_kube_watch import Response, listing, pod


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_what_the_synced_view_holds_is_frozen_once(
    monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    monkeypatch.setattr(collector, "_freezing", False)
    collector.synced()
    assert gc.get_freeze_count() == 0, "not switched on: a test process freezes nothing"
    collector.freeze_when_synced()
    collector.synced()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    held = [[i] for i in range(1000)]  # lists: tracked by the collector
    collector.synced()
    gc.collect(2)
    assert gc.get_freeze_count() == frozen, "once: what is made later is not frozen"
    assert len(held) == 1000


async def test_a_list_leaves_the_collector_as_it_found_it(unfrozen: None) -> None:
    async def pods(**_: Any) -> Response:
        return listing("10", pod("a", "5"))

    await Informer("pods", pods, lambda *_: None)._list()
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


async def test_a_first_list_is_frozen_before_the_collector_is_on_again(
    monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    """Left in the youngest generation, the objects a list made would all be walked by the
    first collection after it."""
    monkeypatch.setattr(collector, "_freezing", True)
    listed: list[dict[str, Any]] = []

    async def pods(**_: Any) -> Response:
        return listing("10", *(pod(f"p{i}", "5") for i in range(2000)))

    await Informer("pods", pods, lambda _, obj: listed.append(obj))._list()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 2000 * 5, "every listed pod's dicts are frozen"
    assert len(listed) == 2000
    collector.synced()
    assert not collector._freezing, "the view synced: later lists are not frozen"


def _count(metrics: collector.CollectionMetrics, generation: str) -> float:
    value = metrics.registry.get_sample_value(
        "berth_gc_collection_duration_seconds_count", {"generation": generation}
    )
    assert value is not None
    return value


def test_each_collection_is_timed_by_generation_until_stopped() -> None:
    metrics = collector.CollectionMetrics()
    metrics.start()
    try:
        before = _count(metrics, "2")
        gc.collect(2)
        assert _count(metrics, "2") == before + 1
        assert metrics.registry.get_sample_value(
            "berth_gc_collection_duration_seconds_sum", {"generation": "2"}
        )
    finally:
        metrics.stop()
    stopped = _count(metrics, "2")
    gc.collect(2)
    assert _count(metrics, "2") == stopped
