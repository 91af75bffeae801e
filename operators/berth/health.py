"""The HTTP server of `berth run`: liveness and readiness probes and the metrics scrape."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from berth import log

logger = log.get(__name__)

DEFAULT_HOST = "0.0.0.0"
# kube-scheduler's historical insecure port: where Berth's probes and scrapes look.
DEFAULT_PORT = 10251


Check = Callable[[], bool]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP.

    Liveness failing makes the kubelet restart the container (500); readiness failing only
    takes the pod out of Service endpoints (503), e.g. until the informers have synced.
    A check that raises counts as failing.
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        self._host = host
        self._port = port
        self._liveness: dict[str, Check] = {}
        self._readiness: dict[str, Check] = {}
        self._registries: list[CollectorRegistry] = []
        self._routes: dict[str, Handler] = {}
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The port listened on: the one the OS chose when 0 was asked for."""
        return self._port

    def add_liveness(self, name: str, check: Check) -> None:
        self._liveness[name] = check

    def add_readiness(self, name: str, check: Check) -> None:
        self._readiness[name] = check

    def add_registry(self, registry: CollectorRegistry) -> None:
        self._registries.append(registry)

    def add_get(self, path: str, handler: Handler) -> None:
        """A further read-only route (e.g. the scheduler's decision records); before start."""
        self._routes[path] = handler

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        for path, handler in self._routes.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        logger.info("health server listening", host=self._host, port=self._port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            logger.info("health server stopped", port=self._port)

    async def _healthz(self, request: web.Request) -> web.Response:
        return self._report("healthz", self._liveness, request, failed_status=500)

    async def _readyz(self, request: web.Request) -> web.Response:
        return self._report("readyz", self._readiness, request, failed_status=503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = b"".join(generate_latest(registry) for registry in self._registries)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _report(
        self, endpoint: str, checks: dict[str, Check], request: web.Request, failed_status: int
    ) -> web.Response:
        """Kubernetes' health endpoint format: "ok", or one [+]/[-] line per check."""
        results = {name: self._passes(endpoint, name, check) for name, check in checks.items()}
        failed = [name for name, passed in results.items() if not passed]
        if not failed and "verbose" not in request.query:
            return web.Response(text="ok")
        lines = [
            f"[+]{name} ok" if passed else f"[-]{name} failed" for name, passed in results.items()
        ]
        if failed:
            lines.append(f"{endpoint} check failed")
            return web.Response(text="\n".join(lines) + "\n", status=failed_status)
        lines.append(f"{endpoint} check passed")
        return web.Response(text="\n".join(lines) + "\n")

    @staticmethod
    def _passes(endpoint: str, name: str, check: Check) -> bool:
        try:
            return bool(check())
        except Exception as error:
            logger.warning("health check raised", endpoint=endpoint, check=name, error=repr(error))
            return False


class Heartbeat:
    """The last moment a loop went round: the loop calls ``beat()`` each time."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()


class Progress:
    """A liveness check: failing once work has waited ``stall_after`` seconds with no beat.

    The clock starts when a probe first sees work waiting, not at the last beat, so a loop
    that was idle for an hour is not taken for stuck the moment work arrives; a loop stuck
    on an await while work waits fails within ``stall_after`` plus one probe period.
    """

    def __init__(
        self, heartbeat: Heartbeat, waiting: Callable[[], bool], stall_after: float
    ) -> None:
        self._heartbeat = heartbeat
        self._waiting = waiting
        self._stall_after = stall_after
        self._waiting_since: float | None = None

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self._waiting():
            self._waiting_since = None
            return True
        if self._waiting_since is None:
            self._waiting_since = now
        stalled = now - max(self._heartbeat.last, self._waiting_since)
        if stalled >= self._stall_after:
            logger.error("no progress while work waits", seconds=round(stalled, 1))
            return False
        return True
