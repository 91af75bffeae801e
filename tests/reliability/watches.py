"""What the checker's looks, a second or more apart, cannot show, from watches: pods
deleted in some namespaces (a pod created, placed and deleted between two looks) and pods
marked as a disruption's target (the mark a later status write may drop), every change of
every node (one cordoned, uncordoned and cordoned again between two), and the
Reservations made for preemptors (one may be made, used and deleted between two)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.reliability.objects import written_by

Obj = dict[str, Any]

PREEMPTOR = "berth.io/preemptor"  # the label of a Reservation made for a preemptor
WATCH_SECONDS = 60  # the server ends each watch after this; it is resumed from its version
RETRY_SECONDS = 0.5


class Departures:
    """A watch per namespace; ``take`` returns the pods deleted since the last take,
    ``take_disrupted`` every version since then that carried a DisruptionTarget
    condition."""

    def __init__(self, api: ApiClient, namespaces: Iterable[str]) -> None:
        self.core = CoreV1Api(api)
        self.namespaces = list(namespaces)
        self._gone: list[Obj] = []
        self._disrupted: list[Obj] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                _watch(functools.partial(self.core.list_namespaced_pod, n), self._on)
            )
            for n in self.namespaces
        ]

    async def stop(self) -> None:
        await _cancel(self._tasks)

    def take(self) -> list[Obj]:
        gone, self._gone = self._gone, []
        return gone

    def take_disrupted(self) -> list[Obj]:
        disrupted, self._disrupted = self._disrupted, []
        return disrupted

    def _on(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self._gone.append(obj)
        conditions = (obj.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "DisruptionTarget" for c in conditions):
            self._disrupted.append(obj)


class PreemptorReservations:
    """A watch of the Reservations; ``take`` returns those made for a preemptor (labelled
    ``berth.io/preemptor``) seen since the last take, as each came."""

    def __init__(self, api: ApiClient) -> None:
        custom = CustomObjectsApi(api)
        self.listing = functools.partial(
            custom.list_cluster_custom_object,
            "scheduling.koordinator.sh",
            "v1alpha1",
            "reservations",
        )
        self._made: list[Obj] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(_watch(self.listing, self._on))]

    async def stop(self) -> None:
        await _cancel(self._tasks)

    def take(self) -> list[Obj]:
        made, self._made = self._made, []
        return made

    def _on(self, kind: str, obj: Obj) -> None:
        if PREEMPTOR in ((obj.get("metadata") or {}).get("labels") or {}):
            self._made.append(obj)


class NodeChanges:
    """A watch of the nodes; ``take`` returns each node as it came since the last take,
    with when it came (None for a deleted node)."""

    def __init__(self, api: ApiClient) -> None:
        self.core = CoreV1Api(api)
        self._changes: list[tuple[float, str, Obj | None]] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(_watch(self.core.list_node, self._on))]

    async def stop(self) -> None:
        await _cancel(self._tasks)

    def take(self) -> list[tuple[float, str, Obj | None]]:
        changes, self._changes = self._changes, []
        return changes

    def _on(self, kind: str, obj: Obj) -> None:
        """Dated when it came, or earlier when the node's own record says it was written
        earlier: the checker's loop may read an event seconds after it came, and a cordon
        ended before a binding would seem to have held past it."""
        name = (obj.get("metadata") or {}).get("name", "")
        at = time.time()
        if kind != "DELETED" and (written := written_by(obj)) is not None:
            at = min(at, written)
        self._changes.append((at, name, None if kind == "DELETED" else obj))


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _watch(listing: Callable[..., Any], on: Callable[[str, Obj], None]) -> None:
    """Watch from now on, resumed from the last version after each server timeout, from
    now again after an expiry (410): what happened meanwhile is lost to it."""
    version: str | None = None
    while True:
        try:
            response = await listing(
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
                        version = None
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        on(event.get("type") or "", obj)
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
