"""DefaultBinder: POST the pod's Binding subresource."""

from __future__ import annotations

import json

from kubernetes_asyncio.client.exceptions import ApiException

from berth.scheduler.framework import SUCCESS, Code, CycleState, Plugin, Status
from berth.scheduler.podinfo import PodInfo


def api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or b"{}").get("message") or err.reason)
    except (TypeError, ValueError):
        return str(err.reason)


class DefaultBinder(Plugin):
    name = "DefaultBinder"

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        assert self.handle.writer is not None
        try:
            await self.handle.writer.bind(pod, node)
        except ApiException as err:
            return Status(Code.ERROR, (f"binding rejected: {api_message(err)}",), self.name)
        return SUCCESS
