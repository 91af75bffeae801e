"""NodeMetric helpers shared by the operator and agent tests: reading them, test nodes."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes
from tests.support import eventually

GROUP, VERSION, PLURAL = "slo.koordinator.sh", "v1alpha1", "nodemetrics"


@contextlib.asynccontextmanager
async def made_nodes(api: ApiClient, prefix: str) -> AsyncIterator[Nodes]:
    """kwok nodes with a fresh name prefix, deleted when the block ends."""
    nodes = Nodes(api, f"{prefix}-{uuid.uuid4().hex[:6]}")
    try:
        yield nodes
    finally:
        await nodes.delete_all()


class Metrics:
    """Reads NodeMetrics; remembers the last one seen for failure messages."""

    def __init__(self, api: ApiClient) -> None:
        self.custom = CustomObjectsApi(api)
        self.last: dict[str, Any] = {}

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.custom.get_cluster_custom_object(
                GROUP, VERSION, PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        self.last[name] = obj
        return obj

    async def policy(self, name: str) -> dict[str, Any] | None:
        obj = await self.get(name)
        return None if obj is None else obj["spec"]["metricCollectPolicy"]

    async def wait_policy(self, name: str, expected: dict[str, Any]) -> None:
        async def current() -> bool:
            return await self.policy(name) == expected

        try:
            await eventually(current, within=30)
        except AssertionError as err:
            seen = (self.last.get(name) or {}).get("spec")
            raise AssertionError(f"{name}: spec {seen} != {expected}") from err

    async def wait_status(
        self, name: str, check: Callable[[dict[str, Any]], bool], within: float = 30
    ) -> dict[str, Any]:
        """The first status of NodeMetric ``name`` that passes ``check``."""

        async def passes() -> bool:
            obj = await self.get(name)
            return obj is not None and check(obj.get("status") or {})

        try:
            await eventually(passes, within)
        except AssertionError as err:
            seen = (self.last.get(name) or {}).get("status")
            raise AssertionError(f"{name}: status {seen} never passed the check") from err
        return dict(self.last[name]["status"])
