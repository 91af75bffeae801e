"""Pods deleted in some namespaces, from a watch: what the checker's once-a-second lists
cannot show (a pod created, placed and deleted between two of them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

Obj = dict[str, Any]

WATCH_SECONDS = 60  # the server ends each watch after this; it is resumed from its version
RETRY_SECONDS = 0.5


class Departures:
    """A watch per namespace; ``take`` returns the pods deleted since the last take."""

    def __init__(self, api: ApiClient, namespaces: Iterable[str]) -> None:
        self.core = CoreV1Api(api)
        self.namespaces = list(namespaces)
        self._gone: list[Obj] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch(n)) for n in self.namespaces]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def take(self) -> list[Obj]:
        gone, self._gone = self._gone, []
        return gone

    async def _watch(self, namespace: str) -> None:
        version: str | None = None
        while True:
            try:
                response = await self.core.list_namespaced_pod(
                    namespace,
                    watch=True,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS,
                    _preload_content=False,
                    resource_version=version or "",  # "": from now on
                )
                async with contextlib.aclosing(_lines(response)) as lines:
                    async for event in lines:
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = None  # expired (410): start again from now
                            break
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") == "DELETED":
                            self._gone.append(obj)
            except (ApiException, aiohttp.ClientError, OSError, TimeoutError, ValueError):
                await asyncio.sleep(RETRY_SECONDS)


async def _lines(response: Any) -> Any:
    """The watch's events, one JSON object per line."""
    try:
        async for line in response.content:
            if line.strip():
                yield json.loads(line)
    finally:
        response.release()
