"""The scheduler starts deciding only once its view is complete, quotas included."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio.client import ApiClient

from berth.scheduler.service import Scheduler
from tests.integration.cluster import config_for


async def test_waits_for_berth_kinds_to_be_listed_or_found_missing() -> None:
    async with ApiClient() as api:  # never called: the informers are driven by hand
        scheduler = Scheduler(api, config_for("berth-scheduler"))
        for informer in scheduler.informers:
            informer.synced.set()
        waiting = asyncio.create_task(scheduler.wait_synced())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # quotas unknown: no pod may be admitted yet
        assert not scheduler.synced
        for informer in scheduler.custom_informers:
            informer.settled.set()  # listed, or the CRD is not installed
        await asyncio.wait_for(waiting, 1)
        assert scheduler.synced
