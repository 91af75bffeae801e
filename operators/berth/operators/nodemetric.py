"""NodeMetric operator: one NodeMetric per Node, its collect policy from ``colocation-config``.

Nodes come from the informer the operators share (:mod:`berth.operators.cluster`), into an
index of what the decision reads of each (its uid and labels); a Node event marks its name
only when that changed, not on every status heartbeat, and the operators' worker
(:mod:`berth.operators.worker`) recomputes it (:func:`berth.slo.lifecycle.desired`) and
writes only what differs. NodeMetrics are followed by an informer of their own, like the
ConfigMap, and mark a name only when what the decision reads (the policy, the owning Node)
changed: every node agent writes its NodeMetric's status once per report interval, and the
operator's own patches come back as events, a thousand at once after a policy change.
Through Kopf, each such event ran two handlers and cost the operator twice what its write
did, in the same event loop as the writes. Nothing is decided before both the Nodes and the
NodeMetrics are listed: a node not listed yet would lose its NodeMetric. The ConfigMap is
watched in the operator's namespace alone (``BERTH_NAMESPACE``, default ``berth-system``),
so the operator needs no cluster-wide read of ConfigMaps; a new valid config recomputes
every node, an invalid one keeps the current policies and is reported by a Warning event on
the ConfigMap.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from berth import log
from berth.api.nodemetric import GROUP, VERSION
from berth.kube.client import api_client
from berth.kube.events import event_body, post_event
from berth.kube.watch import Informer
from berth.kube.write import NODE_METRIC, ApiWriter
from berth.operators.cluster import UNLISTED_RETRY, Cluster
from berth.operators.index import Index
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker, wall_clock
from berth.slo.colocation import CONFIGMAP, ColocationConfig, ColocationConfigError, from_configmap
from berth.slo.lifecycle import MetricIndex, NodeSeen, Verb, desired, node_seen

PLURAL = "nodemetrics"
NAMESPACE_ENV = "BERTH_NAMESPACE"
DEFAULT_NAMESPACE = "berth-system"
COMPONENT = "berth-nodemetric-operator"
INVALID_CONFIG = "InvalidColocationConfig"
CONFIG_SYNC_SECONDS = 30.0
# Patches in flight when one change reaches every NodeMetric (a colocation ConfigMap
# change): with 64 the API server took a thousand in 1.76-1.97 s at the 99th percentile,
# with 16 in 1.83-2.08 s (3 alternating runs each, 1000 nodes, docs/benchmarks.md).
NODEMETRIC_CONCURRENCY = 64

logger = log.get(__name__)


def nodemetric_nodes(body: Mapping[str, Any]) -> dict[str, NodeSeen]:
    return {str(body["metadata"]["name"]): node_seen(body)}


class NodeMetrics:
    """The operator's state (the indices and the latest valid config) and its decisions."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        nodes_listed: Callable[[], bool],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.core: Any = CoreV1Api(api)
        self.namespace = namespace
        self.nodes = Index(nodemetric_nodes)
        self.nodes_listed = nodes_listed
        self.metrics = MetricIndex()
        self._metric_watch = Informer(
            "nodemetrics",
            functools.partial(
                CustomObjectsApi(self.api).list_cluster_custom_object, GROUP, VERSION, PLURAL
            ),
            self._metric_event,
            drop_managed_fields=True,
        )
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
        """Watch the ConfigMap and the NodeMetrics; return once the ConfigMap's first state
        is known (or after a timeout)."""
        self.worker.start()
        call = functools.partial(
            self.core.list_namespaced_config_map,
            self.namespace,
            field_selector=f"metadata.name={CONFIGMAP}",
        )
        informer = Informer("configmaps", call, self._configmap_event)
        for watched in (informer, self._metric_watch):
            self._tasks.append(asyncio.create_task(watched.run(self._stop)))
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

    def node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Node event from the shared informer: its name marked when its uid or labels
        changed (or it came or went)."""
        self.worker.mark_all(self.nodes.observe(kind, obj))

    def _metric_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = self.metrics.observe(kind, obj)
        if name is not None:
            self.worker.mark(name)

    def _configmap_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._latest = None if kind == "DELETED" else obj
        self._changed.set()

    async def _follow(self, informer: Informer) -> None:
        # The first list decides even when it finds no ConfigMap (no event then).
        await informer.synced.wait()
        while True:
            if await self._take_config():
                self.worker.mark_all({*self.nodes.keys(), *self.metrics.seen})
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
        if not (self._metric_watch.settled.is_set() and self.nodes_listed()):
            # Until both are listed, a node would look as if it had no NodeMetric, and a
            # NodeMetric as if its node were gone.
            return wall_clock() + UNLISTED_RETRY
        node = next(iter(self.nodes.get(name, ())), None)
        metric = self.metrics.seen.get(name)
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
async def start_nodemetrics(memo: kopf.Memo, **_: Any) -> None:
    cluster: Cluster = memo.cluster
    state = NodeMetrics(
        api_client(memo.configuration),
        os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE,
        cluster.nodes.listed,
    )
    memo.nodemetrics = state
    cluster.nodes.subscribe(state.node_changed)
    await state.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_nodemetrics(memo: kopf.Memo, **_: Any) -> None:
    state: NodeMetrics | None = memo.get("nodemetrics")
    if state is not None:
        await state.stop()
        await state.api.close()
