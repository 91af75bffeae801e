"""The Informer's own logic, driven in-process by scripted list and watch answers: the list
then watch from its resourceVersion, bookmarks, 410 Gone (as a watch event and as a
status) answered by a relist that synthesises DELETED for what vanished meanwhile, a
watch that ends resumes where it was, and a failing handler stops nothing."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from berth.api.base import format_time
from berth.kube.earlylist import LIST_PAGE
from berth.kube.watch import Informer


def pod(name: str, version: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, **extra}


class Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class Response:
    """What a raw (``_preload_content=False``) call answers: a status and a body."""

    def __init__(self, status: int, body: bytes, chunks: list[bytes] | None = None) -> None:
        self.status = status
        self.reason = "Gone" if status == 410 else "OK"
        self._body = body
        self.content = Content(chunks if chunks is not None else [body])

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *_: object) -> None:
        pass


def listing(version: str, *items: dict[str, Any], more: str = "") -> Response:
    """A list answer; ``more`` is the continue token of a page that is not the last."""
    meta = {"resourceVersion": version, **({"continue": more} if more else {})}
    return Response(200, orjson.dumps({"metadata": meta, "items": list(items)}))


def stream(*events: tuple[str, dict[str, Any]], split: bool = False) -> Response:
    """A watch answer; ``split`` cuts the lines in odd places, as a network would."""
    text = b"".join(orjson.dumps({"type": t, "object": o}) + b"\n" for t, o in events)
    chunks = [text[i : i + 7] for i in range(0, len(text), 7)] if split else [text]
    return Response(200, text, chunks)


def gone_event() -> tuple[str, dict[str, Any]]:
    return "ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}


@dataclass
class Server:
    """Answers the Informer's calls from a script, recording each call's arguments; when
    the script is done it stops the Informer."""

    stop: asyncio.Event
    lists: list[Response]
    watches: list[Response]
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, **kwargs: Any) -> Response:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            if not self.watches:
                self.stop.set()
                return stream()
            return self.watches.pop(0)
        return self.lists.pop(0)


async def run(
    lists: list[Response], watches: list[Response], *, drop_managed_fields: bool = False
) -> tuple[Informer, Server, list[tuple[str, str, str]]]:
    stop = asyncio.Event()
    server = Server(stop, lists, watches)
    seen: list[tuple[str, str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        seen.append((kind, meta["name"], meta["resourceVersion"]))

    informer = Informer("pods", server, handler, drop_managed_fields=drop_managed_fields)
    await asyncio.wait_for(informer.run(stop), 10)
    return informer, server, seen


async def test_lists_then_watches_from_the_lists_version() -> None:
    informer, server, seen = await run(
        [listing("10", pod("a", "5"), pod("b", "6"))],
        [stream(("ADDED", pod("c", "11")), ("MODIFIED", pod("a", "12")), split=True)],
    )
    assert seen == [
        ("ADDED", "a", "5"),
        ("ADDED", "b", "6"),
        ("ADDED", "c", "11"),
        ("MODIFIED", "a", "12"),
    ]
    assert informer.synced.is_set()
    assert informer.settled.is_set()
    first_watch = server.calls[1]
    assert first_watch["watch"] is True
    assert first_watch["resource_version"] == "10"
    assert first_watch["allow_watch_bookmarks"] is True
    assert set(informer.known) == {"ns/a", "ns/b", "ns/c"}
    assert informer.known["ns/a"]["metadata"]["resourceVersion"] == "12"


async def test_a_watch_that_ends_resumes_from_the_last_version_without_relisting() -> None:
    informer, server, seen = await run(
        [listing("10", pod("a", "5"))],
        [stream(("DELETED", pod("a", "13"))), stream(("ADDED", pod("b", "14")))],
    )
    assert [c.get("resource_version") for c in server.calls] == [None, "10", "13", "14"]
    assert informer.stats.lists == 1
    assert seen[-2:] == [("DELETED", "a", "13"), ("ADDED", "b", "14")]
    assert set(informer.known) == {"ns/b"}


async def test_bookmarks_move_the_version_and_reach_no_handler() -> None:
    informer, server, seen = await run(
        [listing("10")],
        [stream(("BOOKMARK", {"metadata": {"resourceVersion": "50"}})), stream()],
    )
    assert seen == []
    assert server.calls[2]["resource_version"] == "50"
    assert informer.stats.lists == 1


@pytest.mark.parametrize("how", ["watch event", "status"])
async def test_gone_relists_and_synthesises_what_changed_meanwhile(how: str) -> None:
    expired = stream(gone_event()) if how == "watch event" else Response(410, b"{}")
    informer, server, seen = await run(
        [
            listing("10", pod("a", "5"), pod("b", "6")),
            # Meanwhile: a deleted, b changed, c created; none of it was watched.
            listing("40", pod("b", "30"), pod("c", "31")),
        ],
        [expired],
    )
    assert informer.stats.gone == 1
    assert informer.stats.lists == 2
    after = seen[2:]
    assert ("DELETED", "a", "5") in after, "what vanished during the gap is reported"
    assert ("MODIFIED", "b", "30") in after
    assert ("ADDED", "c", "31") in after
    assert len(after) == 3
    assert set(informer.known) == {"ns/b", "ns/c"}
    # The relist is a fresh list (no resourceVersion), and the watch resumes from it.
    assert "resource_version" not in server.calls[2]
    assert server.calls[3]["resource_version"] == "40"


async def test_a_list_comes_in_pages_and_is_dispatched_once_whole() -> None:
    informer, server, seen = await run(
        [
            listing("10", pod("a", "5"), more="page-2"),
            listing("10", pod("b", "6"), more="page-3"),
            listing("10", pod("c", "7")),
        ],
        [stream(("ADDED", pod("d", "11")))],
    )
    assert [c.get("limit") for c in server.calls[:3]] == [LIST_PAGE] * 3
    assert [c.get("_continue") for c in server.calls[:3]] == [None, "page-2", "page-3"]
    assert seen == [("ADDED", n, v) for n, v in (("a", "5"), ("b", "6"), ("c", "7"), ("d", "11"))]
    assert informer.stats.lists == 1
    assert server.calls[3]["resource_version"] == "10"


async def test_the_first_list_is_dispatched_while_the_next_page_is_asked_for() -> None:
    """Page by page on the first list: the server prepares page 2 while page 1 is
    indexed. A relist is dispatched only once every page is in, as one list."""
    stop = asyncio.Event()
    server = Server(
        stop,
        [
            listing("10", pod("a", "5"), more="page-2"),
            listing("10", pod("b", "6")),
            listing("40", pod("a", "5"), more="page-2"),
            listing("40", pod("b", "30"), pod("c", "31")),
        ],
        [stream(gone_event())],
    )
    asked: list[tuple[str, str, int]] = []
    informer = Informer(
        "pods",
        server,
        lambda kind, obj: asked.append((kind, obj["metadata"]["name"], len(server.calls))),
    )
    await asyncio.wait_for(informer.run(stop), 10)
    assert asked[:2] == [("ADDED", "a", 2), ("ADDED", "b", 2)], "page 2 asked before a"
    # The relist (calls 4 and 5): nothing dispatched before its last page; a, unchanged
    # (same resourceVersion), is not dispatched again.
    assert asked[2:] == [("MODIFIED", "b", 5), ("ADDED", "c", 5)]
    assert informer.stats.lists == 2


async def test_an_expired_continue_token_starts_the_list_over() -> None:
    informer, server, seen = await run(
        [
            listing("10", pod("a", "5"), more="page-2"),
            Response(410, b"{}"),
            listing("20", pod("a", "5"), pod("b", "15")),
        ],
        [],
    )
    assert "_continue" not in server.calls[2], "the list starts over from its first page"
    assert seen == [("ADDED", "a", "5"), ("ADDED", "b", "15")], "no page is dispatched twice"
    assert informer.stats.gone == 1
    assert server.calls[3]["resource_version"] == "20"


@pytest.mark.parametrize("drop", [True, False])
async def test_managed_fields_are_dropped_only_when_asked(drop: bool) -> None:
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    listed = pod("a", "5")
    listed["metadata"]["managedFields"] = managed
    watched = pod("b", "11")
    watched["metadata"]["managedFields"] = managed
    informer, _, seen = await run(
        [listing("10", listed)], [stream(("ADDED", watched))], drop_managed_fields=drop
    )
    assert [name for _, name, _ in seen] == ["a", "b"]
    for key in ("ns/a", "ns/b"):
        assert ("managedFields" in informer.known[key]["metadata"]) is not drop


async def test_a_failing_handler_stops_nothing() -> None:
    stop = asyncio.Event()
    server = Server(stop, [listing("10", pod("a", "5"), pod("b", "6"))], [])
    seen: list[str] = []

    def handler(_kind: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "a":
            raise RuntimeError("bug in a consumer")
        seen.append(obj["metadata"]["name"])

    informer = Informer("pods", server, handler)
    await asyncio.wait_for(informer.run(stop), 10)
    assert seen == ["b"]
    assert set(informer.known) == {"ns/a", "ns/b"}


async def test_a_kind_not_served_settles_without_syncing() -> None:
    stop = asyncio.Event()
    answers = [Response(404, b"{}")]

    async def call(**_: Any) -> Response:
        if not answers:
            stop.set()
            return Response(404, b"{}")
        return answers.pop(0)

    informer = Informer("reservations", call, lambda _k, _o: None)
    task = asyncio.create_task(informer.run(stop))
    await asyncio.wait_for(informer.settled.wait(), 10)
    assert not informer.synced.is_set()
    stop.set()
    await asyncio.wait_for(task, 30)


def stamped(name: str, version: str, **times: float) -> dict[str, Any]:
    """A pod with ``creationTimestamp`` or ``deletionTimestamp`` that many seconds ago."""
    obj = pod(name, version)
    for key, ago in times.items():
        obj["metadata"][key] = format_time(datetime.now(UTC) - timedelta(seconds=ago))
    return obj


async def test_the_delay_is_told_for_objects_created_or_deleted_while_watched() -> None:
    """Listed objects and updates say nothing of the watch's delay; an ADDED counts from
    the object's creation, a DELETED from its deletionTimestamp (none without one)."""
    stop = asyncio.Event()
    server = Server(
        stop,
        [listing("10", stamped("old", "5", creationTimestamp=100))],
        [
            stream(
                ("ADDED", stamped("a", "11", creationTimestamp=5)),
                ("MODIFIED", stamped("a", "12", creationTimestamp=9)),
                ("DELETED", stamped("a", "13", deletionTimestamp=2)),
                ("DELETED", pod("b", "14")),
            )
        ],
    )
    delays: list[float] = []
    informer = Informer("pods", server, lambda _kind, _obj: None)
    informer.on_delay = delays.append
    await asyncio.wait_for(informer.run(stop), 10)
    assert len(delays) == 2
    assert 5 <= delays[0] < 7  # whole-second timestamps: up to a second high
    assert 2 <= delays[1] < 4


async def test_the_cyclic_collector_is_off_while_lists_are_read_and_on_again_after() -> None:
    """Two lists overlapping (a pod list and a node list at start-up): the collector stays
    off until the last is done, even when one of them fails part way."""
    collector_on: list[bool] = []
    first_page_read = asyncio.Event()
    second_may_go = asyncio.Event()

    async def slow(**kwargs: Any) -> Response:
        collector_on.append(gc.isenabled())
        if kwargs.get("_continue"):
            await second_may_go.wait()
            return listing("10", pod("b", "6"))
        first_page_read.set()
        return listing("10", pod("a", "5"), more="page-2")

    async def failing(**_: Any) -> Response:
        collector_on.append(gc.isenabled())
        return Response(500, b"{}")

    assert gc.isenabled()
    slow_list = asyncio.create_task(Informer("pods", slow, lambda *_: None)._list())
    await first_page_read.wait()
    assert not gc.isenabled()
    with pytest.raises(ApiException):
        await Informer("nodes", failing, lambda *_: None)._list()
    assert not gc.isenabled(), "the pod list is still reading"
    second_may_go.set()
    await slow_list
    assert gc.isenabled()
    assert collector_on == [False, False, False]
