"""The scheduler's writes: reservation status over a stale version (retried over what is
stored when the decision still holds, refused when the reservation ended meanwhile), and
decisions before explanations in the shared rate limit."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from berth.kube.write import Conflict
from berth.scheduler.placement import not_ended
from berth.scheduler.writer import TokenBucket, Writer
from tests.unit.scheduler_fixtures import info, pod

Json = dict[str, Any]


class StoredReservation:
    """One reservation as the API server keeps it: a patch naming another version is
    refused with 409."""

    def __init__(self, phase: str) -> None:
        self.obj: Json = {"metadata": {"name": "r", "resourceVersion": "7"}, "status": {}}
        self.obj["status"]["phase"] = phase
        self.patches: list[tuple[Json, str | None]] = []

    async def patch_status(
        self, kind: Any, name: str, status: Json, *, resource_version: str | None = None
    ) -> Json:
        if resource_version not in (None, self.obj["metadata"]["resourceVersion"]):
            raise Conflict(status=409, reason="Conflict")
        self.patches.append((status, resource_version))
        self.obj["status"].update(status)
        return self.obj

    async def read(self, kind: Any, name: str, *, namespace: str | None = None) -> Json:
        return self.obj


def writer_over(stored: StoredReservation) -> Writer:
    writer = Writer(cast(ApiClient, None), "test")
    writer.api = cast(Any, stored)
    return writer


async def test_a_placement_over_an_operator_write_is_made_over_the_stored_version() -> None:
    """The operator wrote Pending after the scheduler read the reservation: the placement
    still holds, and is written over version 7."""
    stored = StoredReservation("Pending")
    placed = {"phase": "Available", "nodeName": "n1"}
    await writer_over(stored).reservation_status("r", placed, "5", still=not_ended)
    assert stored.patches == [(placed, "7")]


async def test_a_placement_of_a_reservation_ended_meanwhile_is_refused() -> None:
    stored = StoredReservation("Failed")
    with pytest.raises(Conflict):
        await writer_over(stored).reservation_status(
            "r", {"phase": "Available"}, "5", still=not_ended
        )
    assert stored.patches == []
    assert stored.obj["status"]["phase"] == "Failed"


async def test_a_decision_takes_the_next_token_before_explanations_queued_earlier() -> None:
    """The budget is spent; ten condition writes wait, then a binding asks: the binding
    has the next token, and the conditions follow in their order."""
    bucket = TokenBucket(qps=200, burst=1)
    await bucket.take()
    order: list[str] = []

    async def take(name: str, urgent: bool) -> None:
        await bucket.take(urgent=urgent)
        order.append(name)

    explaining = [asyncio.create_task(take(f"c{i}", False)) for i in range(10)]
    await asyncio.sleep(0)
    await take("bind", True)
    await asyncio.gather(*explaining)
    assert order == ["bind", *(f"c{i}" for i in range(10))]


async def test_a_condition_already_stored_by_an_earlier_scheduler_is_not_written_again() -> None:
    writes: list[Json] = []

    class Stored:
        async def patch_status(self, kind: Any, name: str, status: Json, **_: Any) -> None:
            writes.append(status)

    writer = Writer(cast(ApiClient, None), "test")
    writer.api = cast(Any, Stored())
    stored = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/3 nodes are available."}  # fmt: skip
    raw = pod("p", "1", "1Gi", conditions=[stored])
    await writer.unschedulable(info(raw), "0/3 nodes are available.")
    assert writes == []
    await writer.unschedulable(info(raw), "0/4 nodes are available.")
    assert [w["conditions"][0]["message"] for w in writes] == ["0/4 nodes are available."]
