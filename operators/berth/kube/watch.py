"""List, then watch from the list's resourceVersion; relist on 410 Gone; follow bookmarks.

Objects arrive as plain dicts straight from the JSON (no client model classes: they cost
more than the scheduling itself). A relist reports objects that vanished meanwhile as
DELETED, so consumers see one consistent stream whatever happened to the connection.

A list comes in pages, so that the body of a large list (tens of thousands of pods) is never
held whole beside the objects parsed from it; an informer whose consumers never read
``metadata.managedFields`` drops them as objects arrive (kube-scheduler's informers do the
same): on a pod or a node they are a third to a half of the object.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.base import epoch_seconds
from berth.kube.client import checked
from berth.kube.collector import paused_for_list
from berth.kube.earlylist import LIST_PAGE, EarlyList

logger = log.get(__name__)

# A list/watch call of kubernetes-asyncio (e.g. CoreV1Api.list_pod_for_all_namespaces)
# bound to its positional arguments; called with keyword arguments only.
ListCall = Callable[..., Awaitable[Any]]
Handler = Callable[[str, dict[str, Any]], None]
# Told, for each object created or deleted while watched, how many seconds passed between
# its creation (or deletion) and its event being handled.
DelayObserver = Callable[[float], None]

WATCH_TIMEOUT_SECONDS = 300
RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    gone: int = 0
    events: int = 0
    # Pages of the first list taken from those asked for as the process started.
    early_pages: int = 0


class Gone(Exception):
    """The resourceVersion is too old (HTTP 410): the only way on is a fresh list."""


def _version(obj: dict[str, Any]) -> str:
    """Its resourceVersion: the same on a relist, the object has not changed."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _drop_managed_fields(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class Informer:
    """Keeps a consumer in step with one kind of object."""

    def __init__(
        self,
        kind: str,
        call: ListCall,
        handler: Handler,
        *,
        drop_managed_fields: bool = False,
        early: EarlyList | None = None,
    ) -> None:
        self.kind = kind
        self.call = call
        self.handler = handler
        self.drop_managed_fields = drop_managed_fields
        # The first list's pages, asked for as the process started (berth.kube.earlylist).
        self.early = early
        self.known: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        # Listed, or the server answered that it does not serve the kind (a CRD not
        # installed): either way the consumer knows all there is to know for now.
        self.settled = asyncio.Event()
        self.stats = WatchStats()
        self.resource_version = ""
        self.on_delay: DelayObserver | None = None

    async def run(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                if not self.resource_version:
                    await self._list()
                await self._watch(stop)
                failures = 0
            except Gone:
                self.stats.gone += 1
                logger.info("watch expired, relisting", kind=self.kind)
                self.resource_version = ""
            except asyncio.CancelledError:
                raise
            except ApiException as err:
                if err.status == 410:
                    self.stats.gone += 1
                    logger.info("watch expired, relisting", kind=self.kind)
                    self.resource_version = ""
                    continue
                failures += 1
                if err.status == 404:
                    self.settled.set()
                if err.status == 404 and failures > 1:
                    # Not served (a CRD not installed yet): keep trying, quietly.
                    await self._wait(stop, RETRY_SECONDS[-1])
                    continue
                await self._pause(stop, failures, err)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
                failures += 1
                await self._pause(stop, failures, err)

    async def _pause(self, stop: asyncio.Event, failures: int, err: BaseException) -> None:
        delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1]
        logger.warning("list/watch failed, retrying", kind=self.kind, error=str(err), delay=delay)
        await self._wait(stop, delay)

    @staticmethod
    async def _wait(stop: asyncio.Event, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)

    async def _list(self) -> None:
        """Every page; the changes dispatched as one list would have been.

        The pages are one snapshot (the server keeps the first page's resourceVersion); an
        expired continue token answers 410 and the list starts over. The first list is
        dispatched page by page while the server prepares the next one (nothing is decided
        before the view is synced): a large cluster's view is built in the time the slower
        of the two takes, not in the sum of both. A relist is applied at once, so that a
        view already in use never holds half of one snapshot."""
        with paused_for_list():
            await self._read_and_dispatch()

    async def _page(self, token: str) -> dict[str, Any]:
        if self.early is not None:
            read = await asyncio.wrap_future(self.early.page(token))
            if read is not None:
                page, following = read
                early_body: dict[str, Any] = orjson.loads(page)
                if ((early_body.get("metadata") or {}).get("continue") or "") != following:
                    self._drop_early()  # the reader went on from another token
                self.stats.early_pages += 1
                return early_body
            self._drop_early()
        paging: dict[str, Any] = {"limit": LIST_PAGE}
        if token:
            paging["_continue"] = token
        response = await checked(await self.call(_preload_content=False, **paging))
        body: dict[str, Any] = orjson.loads(await response.read())
        return body

    def _drop_early(self) -> None:
        if self.early is not None:
            self.early.close()
            self.early = None

    async def _read_and_dispatch(self) -> None:
        first = not self.known and not self.synced.is_set()
        if not first:
            self._drop_early()
        offered = self.early is not None
        pages = 0
        items: list[dict[str, Any]] = []
        coming: asyncio.Task[dict[str, Any]] | None = asyncio.ensure_future(self._page(""))
        try:
            while coming is not None:
                body = await coming
                pages += 1
                meta = body.get("metadata") or {}
                token = meta.get("continue") or ""
                coming = asyncio.ensure_future(self._page(token)) if token else None
                if coming is not None:
                    await asyncio.sleep(0)  # the request on its way before the page is read
                page = body.get("items") or []
                if self.drop_managed_fields:
                    for item in page:
                        _drop_managed_fields(item)
                if first:
                    for item in page:
                        self._dispatch("ADDED", item)
                else:
                    items.extend(page)
        finally:
            self._drop_early()  # one list only: a relist asks the server
            if coming is not None and not coming.done():
                coming.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await coming
        self.stats.lists += 1
        if offered:
            logger.info(
                "first list read from the pages asked for at start",
                kind=self.kind,
                pages=pages,
                read_early=self.stats.early_pages,
            )
        if not first:
            listed: dict[str, dict[str, Any]] = {}
            for item in items:
                listed[object_key(item)] = item
            for key in list(self.known):
                if key not in listed:
                    self._dispatch("DELETED", self.known[key])
            for item in items:
                known = self.known.get(object_key(item))
                if known is None:
                    self._dispatch("ADDED", item)
                elif _version(known) != _version(item) or not _version(item):
                    self._dispatch("MODIFIED", item)
        self.resource_version = meta.get("resourceVersion", "")
        self.synced.set()
        self.settled.set()

    async def _watch(self, stop: asyncio.Event) -> None:
        self.stats.watches += 1
        response = await checked(
            await self.call(
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _preload_content=False,
            )
        )
        async with response:
            async for line in _lines(response):
                if stop.is_set():
                    return
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ValueError(f"watch error: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = version
                if kind == "BOOKMARK":
                    continue
                if self.drop_managed_fields:
                    _drop_managed_fields(obj)
                if self.on_delay is not None:
                    self._observe_delay(str(kind), obj, self.on_delay)
                self._dispatch(str(kind), obj)

    @staticmethod
    def _observe_delay(kind: str, obj: dict[str, Any], observe: DelayObserver) -> None:
        """How far behind the API server this watch runs, from the times the server
        wrote: an object's creation for ADDED, its ``deletionTimestamp`` for DELETED (the
        request plus the grace period). Both are whole seconds: up to a second high."""
        meta = obj.get("metadata") or {}
        if kind == "ADDED":
            stamp = epoch_seconds(meta.get("creationTimestamp"))
        elif kind == "DELETED":
            stamp = epoch_seconds(meta.get("deletionTimestamp"))
        else:
            return
        if stamp is not None:
            observe(max(0.0, time.time() - stamp))

    def _dispatch(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = obj
        self.stats.events += 1
        try:
            self.handler(kind, obj)
        except Exception:
            logger.exception("handler failed", kind=self.kind, key=key)
