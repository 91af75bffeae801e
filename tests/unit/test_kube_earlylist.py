"""The list asked for as ``berth run`` starts: the endpoint read only when it is sure, the
pods informer taking the pages read early and asking the server from the first page the
reader did not read, and pages nobody takes dropped."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from berth.kube import earlylist
from berth.kube.earlylist import EarlyList, Endpoint, endpoint
from berth.kube.watch import Informer
from tests.unit.test_kube_watch import Server, listing, pod, stream

SERVER = "https://api.example:6443"


class Connection:
    def close(self) -> None:
        pass


class ScriptedEarlyList(EarlyList):
    """The reader's thread with the server's answers scripted: a page body by continue
    token (None: the server refused it)."""

    def __init__(self, pages: dict[str, bytes | None]) -> None:
        super().__init__(Endpoint(SERVER, token="t"))
        self.script = pages
        self.asked: list[str] = []

    def _connect(self) -> Any:
        return Connection()

    def _read(self, connection: Any, token: str) -> bytes | None:
        self.asked.append(token)
        return self.script.get(token)


def page(*names: str, more: str = "") -> bytes:
    body: bytes = listing("10", *(pod(n, "5") for n in names), more=more)._body
    return body


async def informed(
    early: EarlyList, lists: list[Any]
) -> tuple[Server, list[tuple[str, str, str]], Informer]:
    stop = asyncio.Event()
    server = Server(stop, lists, [stream()])
    seen: list[tuple[str, str, str]] = []

    def handler(kind: str, obj: dict[str, Any]) -> None:
        seen.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    informer = Informer("pods", server, handler, early=early)
    await asyncio.wait_for(informer.run(stop), 10)
    return server, seen, informer


async def test_the_first_list_is_the_pages_read_early() -> None:
    early = ScriptedEarlyList(
        {"": page("a", more="p2"), "p2": page("b", more="p3"), "p3": page("c")}
    )
    early.start()
    server, seen, informer = await informed(early, [])
    assert [name for _, name, _ in seen] == ["a", "b", "c"]
    assert early.asked == ["", "p2", "p3"]
    assert all(call.get("watch") for call in server.calls), "the server was asked no page"
    assert server.calls[0]["resource_version"] == "10"
    assert informer.early is None, "one list only"
    assert informer.stats.early_pages == 3


async def test_the_server_is_asked_from_the_first_page_the_reader_did_not_read() -> None:
    early = ScriptedEarlyList({"": page("a", more="p2"), "p2": None})
    early.start()
    server, seen, informer = await informed(
        early, [listing("10", pod("b", "5"), more="p3"), listing("10", pod("c", "5"))]
    )
    assert [name for _, name, _ in seen] == ["a", "b", "c"]
    assert early.asked == ["", "p2"]
    assert [call.get("_continue") for call in server.calls[:2]] == ["p2", "p3"]
    assert informer.stats.early_pages == 1


async def test_a_token_the_reader_read_otherwise_sends_the_informer_to_the_server() -> None:
    """The reader takes the first ``"continue"`` before the items; a page where that is
    not the list's own token leaves the early pages for the server's."""
    decoy = b'{"kind":"PodList","note":{"continue":"zz"},' + page("a", more="p2")[1:]
    early = ScriptedEarlyList({"": decoy, "zz": page("x")})
    early.start()
    server, seen, _ = await informed(early, [listing("10", pod("b", "5"))])
    assert [name for _, name, _ in seen] == ["a", "b"], "x, read from another token, is not taken"
    assert server.calls[0].get("_continue") == "p2"
    assert orjson.loads(decoy)["metadata"]["continue"] == "p2"


def test_pages_nobody_takes_are_dropped_and_the_reader_keeps_few_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(earlylist, "CLAIM_SECONDS", 0.5)
    monkeypatch.setattr(EarlyList, "AHEAD", 2)
    early = ScriptedEarlyList(
        {"": page("a", more="p2"), "p2": page("b", more="p3")} | {"p3": page("c")}
    )
    early.start()
    deadline = time.monotonic() + 10
    while early._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not early._thread.is_alive()
    assert early.asked == ["", "p2"], "two pages ahead, none taken: the third is not read"
    assert early._pages == {}


def test_a_claim_is_for_the_server_the_client_names_and_once() -> None:
    early = ScriptedEarlyList({"": page("a")})
    earlylist._early = early
    assert earlylist.claim(f"{SERVER}/") is early
    assert earlylist.claim(SERVER) is None
    other = ScriptedEarlyList({"": page("a")})
    earlylist._early = other
    assert earlylist.claim("https://elsewhere:6443") is None
    assert other._done, "read from another server: dropped"


def kubeconfig(folder: Path, user: dict[str, Any], **cluster: Any) -> Path:
    path = folder / "config"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": f"{SERVER}/", **cluster}}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_bytes(orjson.dumps(config))  # JSON is YAML
    return path


def test_a_kubeconfigs_certificate_is_read_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "admin.crt").write_bytes(b"CERT")
    (tmp_path / "pki" / "admin.key").write_bytes(b"KEY")
    path = kubeconfig(
        tmp_path,
        {"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
        **{"certificate-authority-data": base64.b64encode(b"CA").decode()},
    )
    where = endpoint(str(path), {})
    assert where == Endpoint(SERVER, ca_data=b"CA", cert_data=b"CERT\nKEY")
    assert endpoint(None, {"KUBECONFIG": str(path)}) == where


@pytest.mark.parametrize(
    ("user", "environ", "why"),
    [
        ({"exec": {"command": "aws"}}, {}, "an exec plugin"),
        ({"token": "t", "as": "someone"}, {}, "impersonation"),
        ({"token": "t"}, {"HTTPS_PROXY": "http://proxy:3128"}, "a proxy"),
        ({}, {}, "no credentials"),
    ],
)
def test_nothing_is_asked_early_when_the_client_could_connect_otherwise(
    tmp_path: Path, user: dict[str, Any], environ: dict[str, str], why: str
) -> None:
    assert endpoint(str(kubeconfig(tmp_path, user)), environ) is None, why


def test_several_kubeconfigs_or_a_missing_service_account_ask_nothing(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path, {"token": "t"})
    assert endpoint(None, {"KUBECONFIG": f"{one}:{one}"}) is None
    assert endpoint(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    assert endpoint(str(tmp_path / "absent"), {}) is None


def test_only_berth_run_with_its_scheduler_asks_early(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path, {"token": "t"}))
    for argv in (
        ["bench", f"--kubeconfig={path}"],
        ["run", "--no-scheduler", f"--kubeconfig={path}"],
    ):
        earlylist.start(argv, {})
        assert earlylist._early is None, argv
    assert earlylist._flag(["run", "--kubeconfig", path], "--kubeconfig") == path
