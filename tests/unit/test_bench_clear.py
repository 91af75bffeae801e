"""Clearing a benchmark's pods: a round of deletions longer than the deadline is progress."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from berth.bench import fixture as fixture_module
from berth.bench.fixture import Fixture, FixtureError


class SlowCluster(Fixture):
    """Pods that go ``per_round`` at a time, each round of deletions taking ``round_s``."""

    def __init__(self, pods: int, per_round: int, round_s: float) -> None:
        self.left = [f"p{i}" for i in range(pods)]
        self.per_round = per_round
        self.round_s = round_s
        self.deleted_this_round = 0

    async def _pods(self, namespace: str) -> list[tuple[str, str]]:
        self.deleted_this_round = 0
        return [(name, "Running") for name in self.left] if namespace == "sched-0" else []

    async def delete_pod(self, namespace: str, name: str) -> None:
        if self.deleted_this_round == 0:
            await asyncio.sleep(self.round_s)
        self.deleted_this_round += 1
        if self.deleted_this_round <= self.per_round and name in self.left:
            self.left.remove(name)


NAMESPACES: Sequence[str] = ("sched-0", "sched-1")


async def test_rounds_longer_than_the_deadline_still_clear_every_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fixture_module, "READY_TIMEOUT", 0.05)
    cluster = SlowCluster(pods=6, per_round=2, round_s=0.1)
    await cluster.clear_pods(NAMESPACES)
    assert cluster.left == []


async def test_pods_that_never_go_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixture_module, "READY_TIMEOUT", 0.05)
    cluster = SlowCluster(pods=3, per_round=0, round_s=0.1)
    with pytest.raises(FixtureError, match="3 pods still present"):
        await cluster.clear_pods(NAMESPACES)
