"""How ``kubectl berth`` reaches the cluster: the kubeconfig as kubectl reads it, the API
server for objects, and the scheduler through the API server's service proxy (so RBAC on
``services/proxy`` decides who may read decision records)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.kube.client import api_client, checked, load_configuration
from berth.kubectl.errors import PluginError

DEFAULT_SCHEDULER_SERVICE = "berth-system/berth-scheduler:http"
# A standby replica behind the Service answers 503; the API server picks an endpoint at
# random per request, so a few tries reach the leader.
STANDBY_RETRIES = 10
STANDBY_PAUSE_SECONDS = 0.2


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: str

    @classmethod
    def parse(cls, text: str) -> ServiceRef:
        namespace, slash, rest = text.partition("/")
        if not slash or not namespace or not rest:
            raise PluginError(f"--scheduler-service {text!r}: expected NAMESPACE/NAME[:PORT]")
        name, _, port = rest.partition(":")
        return cls(namespace, name, port)

    @property
    def proxy_name(self) -> str:
        return f"{self.name}:{self.port}" if self.port else self.name


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (current or chosen) context, as kubectl uses it."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


class Cluster:
    """The API server (and the scheduler behind it) for one command."""

    def __init__(
        self, api: ApiClient, scheduler: ServiceRef, scheduler_url: str | None = None
    ) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.scheduler = scheduler
        # The scheduler's own HTTP address (a `kubectl port-forward`, or a scheduler run
        # outside the cluster), read directly instead of through the service proxy.
        self.scheduler_url = scheduler_url

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None,
        context: str | None,
        scheduler: ServiceRef,
        scheduler_url: str | None = None,
    ) -> Cluster:
        _check_kubeconfig(kubeconfig)
        try:
            configuration = await load_configuration(kubeconfig, context)
        except Exception as err:
            raise PluginError(f"cannot load kubeconfig: {err}") from err
        return cls(api_client(configuration), scheduler, scheduler_url)

    async def close(self) -> None:
        await self.api.close()

    async def call(self, what: str, coroutine: Any) -> dict[str, Any]:
        """A raw API call's JSON body; a failure becomes one clear line."""
        try:
            response = await checked(await coroutine)
            return dict(json.loads(await response.read()))
        except ApiException as err:
            raise PluginError(api_error(what, err)) from err
        except OSError as err:
            raise PluginError(f"cannot reach the API server: {err}") from err

    async def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.call(
            f"pod {namespace}/{name}",
            self.core.read_namespaced_pod(name, namespace, _preload_content=False),
        )

    async def objects(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        if namespace is None:
            call = self.custom.list_cluster_custom_object(
                group, version, plural, _preload_content=False
            )
        else:
            call = self.custom.list_namespaced_custom_object(
                group, version, namespace, plural, _preload_content=False
            )
        return list((await self.call(f"{plural}.{group}", call)).get("items") or [])

    async def pods(self) -> list[dict[str, Any]]:
        listed = await self.call(
            "pods", self.core.list_pod_for_all_namespaces(_preload_content=False)
        )
        return list(listed.get("items") or [])

    async def nodes(self) -> list[dict[str, Any]]:
        listed = await self.call("nodes", self.core.list_node(_preload_content=False))
        return list(listed.get("items") or [])

    async def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, None when it does not exist or may not be read."""
        try:
            return await self.call(
                "configmap",
                self.core.read_namespaced_config_map(name, namespace, _preload_content=False),
            )
        except PluginError:
            return None

    async def decision(self, namespace: str, name: str) -> dict[str, Any]:
        """The pod's decision record from the scheduler; when it has none, its answer
        saying so (``error``) and where the pod waits in its queue (``queued``)."""
        service = self.scheduler
        path = f"debug/pods/{namespace}/{name}"
        if self.scheduler_url is not None:
            return await direct_decision(self.scheduler_url, path)
        for attempt in range(STANDBY_RETRIES):
            try:
                response = await checked(
                    await self.core.connect_get_namespaced_service_proxy_with_path(
                        service.proxy_name, service.namespace, path, _preload_content=False
                    )
                )
                return dict(json.loads(await response.read()))
            except ApiException as err:
                body = _json(err.body)
                if "error" in body and err.status == 404:
                    return body  # the scheduler's own answer: no record (where it waits)
                if "error" in body and err.status == 503 and attempt + 1 < STANDBY_RETRIES:
                    await asyncio.sleep(STANDBY_PAUSE_SECONDS)
                    continue
                raise PluginError(scheduler_error(service, err, body)) from err
            except OSError as err:
                raise PluginError(f"cannot reach the API server: {err}") from err
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _check_kubeconfig(kubeconfig: str | None) -> None:
    """A kubeconfig that is not there is one clear line, before the client's own messages."""
    if kubeconfig is not None:
        if not os.path.isfile(kubeconfig):
            raise PluginError(f"kubeconfig {kubeconfig} not found")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in a pod: its service account
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not any(os.path.isfile(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p):
        raise PluginError(f"no kubeconfig: {paths} not found (set KUBECONFIG or --kubeconfig)")


def _json(body: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(body or b"{}")
    except (ValueError, TypeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def api_error(what: str, err: ApiException) -> str:
    message = _json(err.body).get("message") or err.reason or ""
    if err.status == 404:
        return f"{what} not found"
    if err.status in (401, 403):
        return f"no access to {what}: {message}"
    return f"{what}: {err.status} {message}".strip()


def scheduler_error(service: ServiceRef, err: ApiException, body: dict[str, Any]) -> str:
    where = f"service {service.namespace}/{service.proxy_name}"
    if "error" in body:
        return f"scheduler at {where}: {body['error']}"
    message = body.get("message") or err.reason or ""
    if err.status in (401, 403):
        return f"no access to the scheduler ({where}, services/proxy): {message}"
    if err.status == 404:
        return f"scheduler unreachable: {where} not found ({message})"
    return f"scheduler unreachable through {where}: {message}"


async def direct_decision(url: str, path: str) -> dict[str, Any]:
    """The decision record read from the scheduler's own address (or, with ``error``, its
    answer that it holds none)."""
    target = f"{url.rstrip('/')}/{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(target) as response,
        ):
            body = _json(await response.read())
            if response.status == 404 and "error" in body:
                return body
            if response.status != 200:
                detail = body.get("error") or response.reason
                raise PluginError(f"scheduler at {url} answered {response.status}: {detail}")
            return body
    except aiohttp.ClientError as err:
        raise PluginError(f"scheduler unreachable at {url}: {err}") from err
