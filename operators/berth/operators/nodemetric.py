"""NodeMetric operator: one NodeMetric per Node, its collect policy from ``colocation-config``.

Nodes and NodeMetrics are Kopf indices; every event of either marks that one name, and the
operators' worker (:mod:`berth.operators.worker`) recomputes it
(:func:`berth.slo.lifecycle.desired`) and writes only what differs. The ConfigMap is
watched in the operator's namespace alone (``BERTH_NAMESPACE``, default ``berth-system``),
so the operator needs no cluster-wide read of ConfigMaps; a new valid config recomputes
every node, an invalid one keeps the current policies and is reported by a Warning event on
the ConfigMap.
"""

from __future__ import annotations

import asyncio
import functools
import os
from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth import log
from berth.api.nodemetric import GROUP, VERSION
from berth.kube.client import api_client
from berth.kube.events import event_body, post_event
from berth.kube.watch import Informer
from berth.kube.write import NODE_METRIC, ApiWriter
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker
from berth.slo.colocation import CONFIGMAP, ColocationConfig, ColocationConfigError, from_configmap
from berth.slo.lifecycle import MetricSeen, NodeSeen, Verb, desired, metric_seen, node_seen

PLURAL = "nodemetrics"
NAMESPACE_ENV = "BERTH_NAMESPACE"
DEFAULT_NAMESPACE = "berth-system"
COMPONENT = "berth-nodemetric-operator"
INVALID_CONFIG = "InvalidColocationConfig"
CONFIG_SYNC_SECONDS = 30.0
NODEMETRIC_CONCURRENCY = 16

logger = log.get(__name__)


@kopf.index("nodes", registry=REGISTRY)
async def nodemetric_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeSeen]:
    return {name: node_seen(body)}


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def nodemetric_specs(name: str, body: kopf.Body, **_: Any) -> dict[str, MetricSeen]:
    return {name: metric_seen(body)}


class NodeMetrics:
    """The operator's state (the indices and the latest valid config) and its decisions."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        nodes: kopf.Index[str, NodeSeen],
        metrics: kopf.Index[str, MetricSeen],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.core: Any = CoreV1Api(api)
        self.namespace = namespace
        self.nodes = nodes
        self.metrics = metrics
        # None until a valid config is known: existing policies are then left as they are.
        self.config: ColocationConfig | None = None
        self._latest: dict[str, Any] | None = None
        self._handled: tuple[str, str] | None = None  # (uid, resourceVersion) adopted last
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # One NodeMetric per decision and none depends on another: a collect-policy change
        # reaches a thousand of them in about a second, not one round trip after another.
        self.worker = Worker("nodemetric", self.reconcile, concurrency=NODEMETRIC_CONCURRENCY)

    async def start(self) -> None:
        """Watch the ConfigMap; return once its first state is known (or after a timeout)."""
        self.worker.start()
        call = functools.partial(
            self.core.list_namespaced_config_map,
            self.namespace,
            field_selector=f"metadata.name={CONFIGMAP}",
        )
        informer = Informer("configmaps", call, self._configmap_event)
        self._tasks.append(asyncio.create_task(informer.run(self._stop)))
        try:
            await asyncio.wait_for(informer.synced.wait(), CONFIG_SYNC_SECONDS)
        except TimeoutError:
            logger.error(
                "colocation config not readable yet; NodeMetric policies are kept as they are",
                namespace=self.namespace,
                name=CONFIGMAP,
            )
        else:
            await self._take_config()
        self._tasks.append(asyncio.create_task(self._follow(informer)))

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.worker.stop()

    def _configmap_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._latest = None if kind == "DELETED" else obj
        self._changed.set()

    async def _follow(self, informer: Informer) -> None:
        # The first list decides even when it finds no ConfigMap (no event then).
        await informer.synced.wait()
        while True:
            if await self._take_config():
                self.worker.mark_all({*self.nodes.keys(), *self.metrics.keys()})
            await self._changed.wait()
            self._changed.clear()

    async def _take_config(self) -> bool:
        """Adopt the ConfigMap's latest state; True when the config changed."""
        meta = (self._latest or {}).get("metadata") or {}
        version = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
        if version == self._handled:
            return False
        self._handled = version
        try:
            config = from_configmap(self._latest)
        except ColocationConfigError as err:
            logger.error(
                "invalid colocation config; NodeMetric policies kept",
                namespace=self.namespace,
                name=CONFIGMAP,
                error=str(err),
            )
            await self._warn(meta, str(err))
            return False
        if config == self.config:
            return False
        self.config = config
        logger.info("colocation config applied", namespace=self.namespace, name=CONFIGMAP)
        return True

    async def _warn(self, meta: dict[str, Any], message: str) -> None:
        """A Warning event on the ConfigMap, where ``kubectl describe`` shows it."""
        involved = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": self.namespace,
            "name": CONFIGMAP,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        body = event_body(
            involved,
            self.namespace,
            INVALID_CONFIG,
            f"{message[:900]}; NodeMetric policies are kept as they were",
            warning=True,
            component=COMPONENT,
        )
        await post_event(self.writer, body)

    async def reconcile(self, name: str) -> datetime | None:
        node = next(iter(self.nodes.get(name, ())), None)
        metric = next(iter(self.metrics.get(name, ())), None)
        change = desired(name, node, metric, self.config)
        if change is None:
            return None
        # Already created or already gone (Conflict, NotFound): the index lags the API, and
        # the worker leaves the object to its next watch event.
        if change.verb is Verb.CREATE:
            await self.writer.create(NODE_METRIC, change.body or {})
        elif change.verb is Verb.PATCH:
            await self.writer.patch(NODE_METRIC, name, change.body or {})
        else:
            await self.writer.delete(NODE_METRIC, name)
        spec = (change.body or {}).get("spec")
        logger.info("nodemetric written", name=name, verb=str(change.verb), spec=spec)
        return None


@kopf.on.startup(registry=REGISTRY)
async def start_nodemetrics(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views."""
    state = NodeMetrics(
        api_client(memo.configuration),
        os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE,
        kwargs["nodemetric_nodes"],
        kwargs["nodemetric_specs"],
    )
    memo.nodemetrics = state
    await state.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_nodemetrics(memo: kopf.Memo, **_: Any) -> None:
    state: NodeMetrics | None = memo.get("nodemetrics")
    if state is not None:
        await state.stop()
        await state.api.close()


@kopf.on.event("nodes", registry=REGISTRY)
async def node_changed(name: str, memo: Any, **_: Any) -> None:
    memo.nodemetrics.worker.mark(name)


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def nodemetric_changed(name: str, memo: Any, **_: Any) -> None:
    memo.nodemetrics.worker.mark(name)
