"""Building API clients: one place that knows how Berth reaches the Kubernetes API."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log

logger = log.get(__name__)


async def load_configuration(path: str | None = None, context: str | None = None) -> Configuration:
    """Connection settings from a kubeconfig file.

    With no path: the in-cluster service account when running in a pod, else ``KUBECONFIG``
    or ``~/.kube/config`` as kubectl would.
    """
    configuration = Configuration()
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    return configuration


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
