"""An API server that cannot be reached: a bounded retry with backoff, then one line that
says what, where and what to do, instead of a traceback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.incluster_config import SERVICE_TOKEN_FILENAME

from berth import run as berth_run
from berth.cli import main
from berth.health import HealthServer
from berth.kube import client
from berth.kube.client import ConnectError, api_client, wait_for_api
from berth.scheduler import config as scheduler_config


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def configuration(server: str) -> Configuration:
    configured = Configuration()
    configured.host = server
    return configured


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "CONNECT_BACKOFF", (0.01, 0.02))
    monkeypatch.setattr(client, "CONNECT_BUDGET_SECONDS", 0.3)


class Server:
    """An API server answering /version with the statuses given, then 200."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.hits = 0
        self.url = ""
        self.agents: list[str] = []

    async def version(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.agents.append(request.headers.get("User-Agent", ""))
        status = self.statuses.pop(0) if self.statuses else 200
        return web.json_response({"gitVersion": "v1.36.3"}, status=status)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = Server()
    app = web.Application()
    app.router.add_get("/version/", server.version)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.url = "http://127.0.0.1:{}".format(*runner.addresses[0][1:2])
    yield server
    await runner.cleanup()


async def test_an_unreachable_server_is_named_in_one_line_after_the_retries() -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    async with api_client(configuration(server)) as api:
        with pytest.raises(ConnectError) as raised:
            await wait_for_api(api)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot reach the Kubernetes API server at {server} (tried for 0s)")
    assert "Cannot connect to host" in message
    assert message.endswith(
        "check that it is running and that --kubeconfig, KUBECONFIG or the "
        "pod's service account points at it"
    )


async def test_a_server_that_answers_after_errors_is_waited_for(server: Server) -> None:
    server.statuses += [503, 500]
    async with api_client(configuration(server.url)) as api:
        await wait_for_api(api)
    assert server.hits == 3


async def test_a_refusal_is_an_answer(server: Server) -> None:
    server.statuses.append(401)
    async with api_client(configuration(server.url)) as api:
        await wait_for_api(api)
    assert server.hits == 1


async def test_requests_name_berth_as_their_agent(server: Server) -> None:
    """The API server names a write's field manager after the agent's first word: Berth's
    writes must show as Berth's, not as the generated client's ``OpenAPI-Generator``."""
    async with api_client(configuration(server.url)) as api:
        await wait_for_api(api)
    agent = server.agents[0]
    assert agent.split("/")[0] == "berth"
    assert agent == client.user_agent()
    assert "(linux/" in agent


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


def test_berth_run_says_the_server_is_unreachable_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    argv = ["run", f"--kubeconfig={kubeconfig(tmp_path, server)}", "--health-address=127.0.0.1:0"]
    assert main(argv) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert errors[-1].startswith(
        f"berth: error: cannot reach the Kubernetes API server at {server}"
    )
    assert "Traceback" not in capsys.readouterr().err


def test_berth_agent_without_a_kubeconfig_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    assert main(["agent", "--node-name=n1", f"--kubeconfig={missing}"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        f"berth: error: no usable Kubernetes client configuration ({missing}): no such file; "
    )
    assert last.endswith(
        "pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account"
    )


@pytest.mark.skipif(Path(SERVICE_TOKEN_FILENAME).exists(), reason="runs in a pod with a token")
def test_in_a_pod_without_a_token_the_service_account_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    assert main(["agent", "--node-name=n1"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        "berth: error: no usable Kubernetes client configuration (the pod's service account): "
    )


async def test_berth_run_is_alive_but_not_ready_while_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The liveness probe must not restart it before it can say why it gives up, and no
    Service may send it traffic meanwhile."""
    started: list[HealthServer] = []
    serving_health = asyncio.Event()

    class Recorded(HealthServer):
        async def start(self) -> None:
            await super().start()
            started.append(self)
            serving_health.set()

    monkeypatch.setattr(berth_run, "HealthServer", Recorded)
    monkeypatch.setattr(client, "CONNECT_BUDGET_SECONDS", 3.0)
    options = berth_run.RunOptions(
        kubeconfig=kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}"),
        health_address="127.0.0.1:0",
    )
    serving = asyncio.create_task(berth_run.serve(options, scheduler_config.load(None)))
    await asyncio.wait_for(serving_health.wait(), 10)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{started[0].port}") as http:
        async with http.get("/healthz") as alive:
            assert alive.status == 200
        async with http.get("/readyz") as ready:
            assert ready.status == 503
            assert "API server reached" in await ready.text()
    with pytest.raises(ConnectError):
        await serving
