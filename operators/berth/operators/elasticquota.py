"""ElasticQuota operator: ``status.used`` follows the namespace's pods.

Stateless and idempotent: every quota event, and every pod event that changes what a
namespace's pods count, marks the namespace; the operators' worker
(:mod:`berth.operators.worker`) recomputes it from two indices (counted pods' requests,
quotas by namespace) with :func:`berth.quota.status.desired` and patches a quota's status
only when it differs. Quotas are a Kopf index; pods and nodes come from the informers the
operators share (:mod:`berth.operators.cluster`), as Kopf's readiness per object is
quadratic at startup, and nothing is decided before they are listed.

The quota tree is one decision over the whole cluster: a second worker with a single key
recomputes every tree quota's used, request and runtime from three more indices (tree
quotas, live pods, nodes' allocatable) and the namespaces flat quotas govern (their pods
are not the default quota's) with :func:`berth.quota.treestatus.desired_tree`, and writes
status and Koordinator's runtime/request annotations where they differ.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient

from berth import log
from berth.api.elasticquota import GROUP, VERSION
from berth.kube.client import api_client
from berth.kube.write import ELASTIC_QUOTA, ApiWriter
from berth.operators.cluster import UNLISTED_RETRY, Cluster
from berth.operators.index import Index
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker, wall_clock
from berth.podresources import Resources, add, resource_list
from berth.quota.status import PodRequests, QuotaSeen, desired, quota_seen
from berth.quota.tree import is_tree_quota
from berth.quota.treestatus import PodSeen, desired_tree, pod_seen
from berth.quota.usage import requests_if_counted

PLURAL = "elasticquotas"
TREE_MIN_GAP = 0.5
TREE = "quota-tree"
"""The one key of the tree's indices and worker: the tree is decided as a whole."""

logger = log.get(__name__)


def quota_pods(body: Mapping[str, Any]) -> dict[str, PodRequests]:
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    requests = requests_if_counted(body)
    if requests is None or not namespace:
        return {}
    return {namespace: PodRequests(str(meta.get("name", "")), requests)}


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def quotas(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, QuotaSeen]:
    if namespace is None:
        return {}
    return {namespace: quota_seen(name, body)}


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def quota_tree_objects(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {TREE: dict(body)} if is_tree_quota(body) else {}


def quota_tree_pods(body: Mapping[str, Any]) -> dict[str, PodSeen]:
    """Live pods, placed or waiting: a tree quota's request counts the waiting ones too."""
    seen = pod_seen(body)  # None for a pod of no namespace
    return {} if seen is None else {TREE: seen}


def quota_tree_nodes(body: Mapping[str, Any]) -> dict[str, Resources]:
    return {TREE: resource_list((body.get("status") or {}).get("allocatable"))}


class QuotaTree:
    """Decides the quota tree as a whole for its own :class:`Worker`."""

    def __init__(
        self,
        writer: ApiWriter,
        objects: kopf.Index[str, dict[str, Any]],
        seen: kopf.Index[str, QuotaSeen],
        listed: Callable[[], bool],
    ) -> None:
        """``listed``: both pods and nodes are."""
        self.writer = writer
        self.objects = objects
        self.seen = seen
        self.pods = Index(quota_tree_pods)
        self.nodes = Index(quota_tree_nodes)
        self.listed = listed
        self.worker = Worker("elasticquota-tree", self.reconcile)
        self._last = -math.inf

    def exists(self) -> bool:
        return bool(self.objects.get(TREE, ()))

    def pod_changed(self, kind: str, body: dict[str, Any]) -> None:
        if self.pods.observe(kind, body) and self.exists():
            self.worker.mark(TREE)

    def node_changed(self, kind: str, body: dict[str, Any]) -> None:
        """Marks the tree when a node's allocatable changed (or the node came or went)."""
        if self.nodes.observe(kind, body) and self.exists():
            self.worker.mark(TREE)

    async def reconcile(self, key: str) -> datetime | None:
        """The whole tree, at most once every ``TREE_MIN_GAP`` seconds: every pod event in
        the cluster marks it, and under churn deciding it back to back took a tenth of the
        process (the events meanwhile are all answered by the next decision)."""
        if not self.listed():
            return wall_clock() + UNLISTED_RETRY  # pods not listed yet would count as none
        wait = self._last + TREE_MIN_GAP - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last = time.monotonic()
        allocatable: Resources = {}
        for node in self.nodes.get(TREE, ()):
            add(allocatable, node)
        flat = {ns for ns in self.seen if any(not quota.tree for quota in self.seen.get(ns, ()))}
        patches = desired_tree(
            self.objects.get(TREE, ()), self.pods.get(TREE, ()), allocatable, flat
        )
        for patch in patches:
            if patch.annotations:
                body = {"metadata": {"annotations": patch.annotations}}
                await self.writer.patch(ELASTIC_QUOTA, patch.name, body, namespace=patch.namespace)
            if patch.status:
                await self.writer.patch_status(
                    ELASTIC_QUOTA, patch.name, patch.status, namespace=patch.namespace
                )
            logger.info(
                "quota tree status updated",
                namespace=patch.namespace,
                name=patch.name,
                status=patch.status,
                annotations=patch.annotations,
            )
        return None


class Quotas:
    """Decides one namespace's quotas at a time for the :class:`Worker`."""

    def __init__(
        self,
        api: ApiClient,
        seen: kopf.Index[str, QuotaSeen],
        pods_listed: Callable[[], bool],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.seen = seen
        self.pods = Index(quota_pods)
        self.pods_listed = pods_listed
        self.worker = Worker("elasticquota", self.reconcile, key_field="namespace")

    def pod_changed(self, kind: str, body: dict[str, Any]) -> None:
        """Marks the namespace when what its pods count changed."""
        self.worker.mark_all(self.pods.observe(kind, body))

    async def reconcile(self, namespace: str) -> datetime | None:
        if not self.pods_listed():
            return wall_clock() + UNLISTED_RETRY  # pods not listed yet would count as none
        for name, status in desired(
            namespace, self.seen.get(namespace, ()), self.pods.get(namespace, ())
        ).items():
            await self.writer.patch_status(ELASTIC_QUOTA, name, status, namespace=namespace)
            logger.info("quota status updated", namespace=namespace, name=name, status=status)
        return None


@kopf.on.startup(registry=REGISTRY)
async def start_quotas(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views."""
    cluster: Cluster = memo.cluster
    state = Quotas(api_client(memo.configuration), kwargs["quotas"], cluster.pods.listed)
    memo.elasticquotas = state
    tree = QuotaTree(
        state.writer,
        kwargs["quota_tree_objects"],
        kwargs["quotas"],
        lambda: cluster.pods.listed() and cluster.nodes.listed(),
    )
    memo.quota_tree = tree
    cluster.pods.subscribe(state.pod_changed)
    cluster.pods.subscribe(tree.pod_changed)
    cluster.nodes.subscribe(tree.node_changed)
    state.worker.start()
    tree.worker.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_quotas(memo: kopf.Memo, **_: Any) -> None:
    tree: QuotaTree | None = memo.get("quota_tree")
    if tree is not None:
        await tree.worker.stop()
    state: Quotas | None = memo.get("elasticquotas")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def quota_changed(namespace: str | None, memo: Any, **_: Any) -> None:
    if namespace is not None:
        memo.elasticquotas.worker.mark(namespace)
    memo.quota_tree.worker.mark(TREE)  # also when a quota leaves the tree
