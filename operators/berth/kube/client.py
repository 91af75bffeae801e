"""Building API clients: one place that knows how Berth reaches the Kubernetes API."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import os
import platform
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, VersionApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.version import package_version

logger = log.get(__name__)


class ConnectError(RuntimeError):
    """The API server cannot be found or reached; the message is one line saying what,
    where, and what to do."""


async def load_configuration(path: str | None = None, context: str | None = None) -> Configuration:
    """Connection settings from a kubeconfig file.

    With no path: the in-cluster service account when running in a pod, else ``KUBECONFIG``
    or ``~/.kube/config`` as kubectl would. ConnectError when there are none to be had.
    """
    configuration = Configuration()
    in_cluster = path is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration
            )
    except (config.ConfigException, OSError) as err:
        raise _unusable(path, in_cluster, err) from None
    return configuration


def _unusable(path: str | None, in_cluster: bool, err: Exception) -> ConnectError:
    """Which configuration could not be used, and why: a kubeconfig that is not there is
    said so, not as the client's complaint about its missing keys."""
    where = "the pod's service account"
    reason = _one_line(err)
    if not in_cluster:
        where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
        files = [os.path.expanduser(p) for p in where.split(os.pathsep) if p]
        if not any(os.path.isfile(f) for f in files):
            reason = "no such file"
    return ConnectError(
        f"no usable Kubernetes client configuration ({where}): {reason}; pass "
        "--kubeconfig, set KUBECONFIG, or run in a pod with a service account"
    )


# How long a component waits for its API server before giving up, and the waits between
# tries: about what kube components allow for theirs at start.
CONNECT_BUDGET_SECONDS = 30.0
CONNECT_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)
CONNECT_ATTEMPT_SECONDS = 5.0


async def wait_for_api(api: ApiClient, budget: float | None = None) -> None:
    """Return once the API server answers ``GET /version``, trying again with backoff for
    up to ``budget`` seconds (default CONNECT_BUDGET_SECONDS); then ConnectError, rather
    than a traceback from the first component that calls it."""
    budget = CONNECT_BUDGET_SECONDS if budget is None else budget
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    server = api.configuration.host
    for attempt in itertools.count():
        try:
            version = VersionApi(api).get_code(
                _preload_content=False, _request_timeout=CONNECT_ATTEMPT_SECONDS
            )
            await succeeded(version)
            return
        except ApiException as err:
            if err.status and err.status < 500:
                return  # it answered: a refusal is for the component to report
            reason = f"HTTP {err.status} {err.reason}"
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            reason = _one_line(err)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise ConnectError(
                f"cannot reach the Kubernetes API server at {server} (tried for {budget:.0f}s): "
                f"{reason}; check that it is running and that --kubeconfig, KUBECONFIG or the "
                "pod's service account points at it"
            )
        pause = min(CONNECT_BACKOFF[min(attempt, len(CONNECT_BACKOFF) - 1)], remaining)
        logger.warning("API server not reachable yet", server=server, error=reason, retry_in=pause)
        await asyncio.sleep(pause)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


async def client_from_kubeconfig(path: str | None = None, context: str | None = None) -> ApiClient:
    """An API client for the cluster a kubeconfig (or the pod's service account) names."""
    return api_client(await load_configuration(path, context))


READ_BUFSIZE = 2**21  # as the client's own session: watch events can be large

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


def api_client(configuration: Configuration) -> ApiClient:
    """An API client that skips the proxy and netrc look-ups when no proxy is configured.

    The client's HTTP session looks both up in a worker thread on every request
    (``trust_env``); for a scheduler making thousands of requests to one API server that
    costs about a tenth of its throughput. With a proxy variable set, it is left as it is.
    """
    client = FencedApiClient(configuration)
    client.user_agent = user_agent()
    if not any(os.environ.get(name) for name in PROXY_VARIABLES):
        session = client.rest_client.pool_manager
        client.rest_client.pool_manager = aiohttp.ClientSession(
            connector=session.connector,
            connector_owner=True,
            trust_env=False,
            read_bufsize=READ_BUFSIZE,
        )
        session.detach()  # the connector now belongs to the new session
    return client


@functools.cache
def user_agent() -> str:
    """``berth/<version> (<os>/<arch>)``, as kube components name themselves: the API
    server records the part before the slash as the field manager of every write (in
    ``managedFields``) and shows the whole in its audit log, so Berth's writes are
    Berth's and not the generated client's."""
    system = platform.system().lower()
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"berth/{package_version()} ({system}/{machine})"


async def checked(response: Any) -> Any:
    """Raise ApiException for an error status of a raw (``_preload_content=False``) call.

    The client returns raw responses as they are, error statuses included; every raw call
    in Berth goes through here so a refused request is never taken for a done one.
    """
    if response.status >= 400:
        body = await response.read()
        response.release()
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body
        raise error
    return response


async def succeeded(call: Awaitable[Any]) -> bytes:
    """Await a raw write and return its body; raises ApiException for an error status.

    Reading the body hands the connection back to the pool, which a raw response that is
    left alone would hold on to.
    """
    response = await checked(await call)
    body: bytes = await response.read()
    response.release()
    return body


# Whether writes may go out from the current task and the tasks it starts: set by a
# leader for its work, so every write it makes is checked against a fresh lease.
_WRITE_FENCE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "write_fence", default=None
)
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class NotLeading(ApiException):
    """A write refused before it was sent: the lease behind it is no longer fresh."""


def fence_writes(allowed: Callable[[], bool]) -> None:
    """From here on, in this task and every task it starts, a write goes out only while
    ``allowed()`` holds (a leader's fresh-lease check).

    A leader that was paused (SIGSTOP, a long GC, a frozen VM) past its lease wakes up
    believing it leads; its first write after waking is refused here, whichever call site
    makes it, before the elector has even noticed.
    """
    _WRITE_FENCE.set(allowed)


class FencedApiClient(ApiClient):
    """An ApiClient whose every request passes the write fence, if one is set."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        allowed = _WRITE_FENCE.get()
        if method not in READ_METHODS and allowed is not None and not allowed():
            logger.warning("write refused: the lease is not fresh", method=method, url=url)
            error = NotLeading(status=503, reason="lease not held: write refused")
            error.body = b""
            raise error
        return super().request(method, url, *args, **kwargs)
