"""The scheduler's reservation status writes over a stale version: retried over what is
stored when the decision still holds, refused when the reservation ended meanwhile."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from berth.kube.write import Conflict
from berth.scheduler.placement import not_ended
from berth.scheduler.writer import Writer

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
