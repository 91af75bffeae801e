"""The LowNodeLoad balancer loop: every interval, read the cluster, decide, create jobs.

Each round reads nodes, NodeMetrics, pods and PodMigrationJobs afresh; only the nodes' hot
streaks (the anomaly detectors) are kept between rounds, as in Koordinator. Pods that
already have a running job are counted as leaving their node and are not moved twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from berth import log
from berth.api.duration import parse_duration
from berth.api.nodemetric import GROUP as METRIC_GROUP
from berth.api.nodemetric import VERSION as METRIC_VERSION
from berth.api.nodemetric import NodeMetric
from berth.api.podmigrationjob import TERMINAL_PHASES, PodMigrationJob
from berth.api.reservation import GROUP, VERSION
from berth.descheduler.balance import (
    PROD_PRIORITY,
    Detector,
    Move,
    NodeLoad,
    PodLoad,
    is_hot,
    is_idle,
    observe,
    plan,
    usage_now,
)
from berth.descheduler.config import DeschedulerSettings
from berth.descheduler.fit import fits
from berth.descheduler.lownodeload import LowNodeLoadArgs, Pool
from berth.kube.watch import Informer
from berth.kube.write import POD_MIGRATION_JOB, ApiWriter
from berth.migration.filters import refusal
from berth.podresources import pod_requests, resource_list
from berth.podstate import holds_capacity

__all__ = ["DESCHEDULER_LABEL", "Balancer"]

DESCHEDULER_LABEL: Final = "berth.dev/descheduler"
HOT_NODE_ANNOTATION: Final = "berth.dev/hot-node"
Json = dict[str, Any]
logger = log.get(__name__)


def _kept(_event: str, _obj: Json) -> None:
    """The informers' objects are read from their store at each round."""


async def _settled(informers: tuple[Informer, ...], stop: asyncio.Event) -> None:
    """Until every informer has listed (or found its kind not served), or ``stop``."""
    while not stop.is_set() and not all(i.settled.is_set() for i in informers):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def _custom_informer(custom: Any, group: str, version: str, plural: str) -> Informer:
    call = functools.partial(custom.list_cluster_custom_object, group, version, plural)
    return Informer(plural, call, _kept, drop_managed_fields=True)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Balancer:
    """LowNodeLoad, run every ``interval`` seconds until stopped."""

    def __init__(
        self, api: ApiClient, args: LowNodeLoadArgs, settings: DeschedulerSettings
    ) -> None:
        self.args = args
        self.settings = settings
        core: Any = CoreV1Api(api)
        custom: Any = CustomObjectsApi(api)
        self.writer = ApiWriter(api)
        self.detectors: dict[tuple[str, str], Detector] = {}
        # Watched, as Koordinator's descheduler does: listing every pod at each round (every
        # 2 s in the reliability churn) decoded thousands of pods a second.
        self.nodes = Informer("nodes", core.list_node, _kept, drop_managed_fields=True)
        self.pods = Informer(
            "pods", core.list_pod_for_all_namespaces, _kept, drop_managed_fields=True
        )
        self.metrics = _custom_informer(custom, METRIC_GROUP, METRIC_VERSION, "nodemetrics")
        self.jobs = _custom_informer(custom, GROUP, VERSION, "podmigrationjobs")

    async def run(self, stop: asyncio.Event) -> None:
        informers = (self.nodes, self.pods, self.metrics, self.jobs)
        watching = [asyncio.create_task(i.run(stop), name=f"balancer-{i.kind}") for i in informers]
        try:
            await _settled(informers, stop)
            logger.info("LowNodeLoad balancer started", interval=self.settings.interval_seconds)
            while not stop.is_set():
                if not self.args.paused:
                    try:
                        await self.balance_once(datetime.now(UTC))
                    except Exception:
                        # A failed round is retried at the next interval.
                        logger.exception("LowNodeLoad round failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.interval_seconds)
        finally:
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)

    async def balance_once(self, now: datetime) -> list[Move]:
        nodes = list(self.nodes.known.values())
        pods = list(self.pods.known.values())
        metrics = list(self.metrics.known.values())
        moving = self._moving(list(self.jobs.known.values()))
        by_node: dict[str, list[Json]] = {}
        for pod in pods:
            spec = pod.get("spec") or {}
            if holds_capacity(spec.get("nodeName"), (pod.get("status") or {}).get("phase")):
                by_node.setdefault(str(spec["nodeName"]), []).append(pod)
        reports = {m["metadata"]["name"]: NodeMetric.from_dict(m) for m in metrics}
        moves: list[Move] = []
        for pool in self.args.pools():
            members = [n for n in nodes if self._in_pool(n, pool)]
            moves += await self._balance_pool(pool, members, by_node, reports, moving, now)
        self._forget_unseen(now)
        return moves

    def _moving(self, jobs: list[Json]) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for item in jobs:
            with contextlib.suppress(ValueError):
                job = PodMigrationJob.from_dict(item)
                if job.phase not in TERMINAL_PHASES:
                    out.add((job.spec.pod_ref.namespace or "", job.spec.pod_ref.name or ""))
        return out

    def _in_pool(self, node: Json, pool: Pool) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        selectors = (self.args.node_selector, pool.node_selector)
        return all(s is None or s.matches(labels) for s in selectors)

    def _load(
        self,
        node: Json,
        pods: list[Json],
        report: NodeMetric | None,
        moving: set[tuple[str, str]],
        now: datetime,
    ) -> NodeLoad | None:
        """The node's load from a fresh NodeMetric; ``None`` without one."""
        status = report.status if report is not None else None
        if status is None or status.update_time is None or status.node_metric is None:
            return None
        age = now - status.update_time
        if age > timedelta(seconds=self.args.node_metric_expiration_seconds):
            return None
        usage_map = status.node_metric.node_usage
        reported = {
            (p.namespace or "", p.name or ""): resource_list(
                p.pod_usage.resources if p.pod_usage else None
            )
            for p in status.pods_metric or ()
        }
        staying = [
            pod
            for pod in pods
            if _key(pod) not in moving and not (pod.get("metadata") or {}).get("deletionTimestamp")
        ]
        usage = usage_now(
            resource_list(usage_map.resources if usage_map else None),
            reported,
            {_key(pod) for pod in staying},
        )
        prod = {
            (p.namespace or "", p.name or "")
            for p in status.pods_metric or ()
            if p.priority == PROD_PRIORITY
        }
        loads = [
            PodLoad(
                namespace=_key(pod)[0],
                name=_key(pod)[1],
                usage=reported.get(_key(pod), {}),
                priority=int((pod.get("spec") or {}).get("priority") or 0),
                prod=_key(pod) in prod,
                movable=self._movable(pod),
            )
            for pod in staying
        ]
        allocatable = resource_list((node.get("status") or {}).get("allocatable"))
        return NodeLoad(str(node["metadata"]["name"]), allocatable, usage, tuple(loads))

    def _movable(self, pod: Json) -> bool:
        meta = pod.get("metadata") or {}
        namespaces = self.args.evictable_namespaces
        if namespaces is not None and not namespaces.allows(str(meta.get("namespace"))):
            return False
        selectors = self.args.pod_selectors
        labels = meta.get("labels") or {}
        if selectors and not any(
            s.selector is None or s.selector.matches(labels) for s in selectors
        ):
            return False
        if (pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp"):
            return False
        return refusal(pod, self.settings.migration) is None

    async def _balance_pool(
        self,
        pool: Pool,
        members: list[Json],
        by_node: dict[str, list[Json]],
        reports: dict[str, NodeMetric],
        moving: set[tuple[str, str]],
        now: datetime,
    ) -> list[Move]:
        loads: list[NodeLoad] = []
        nodes: dict[str, Json] = {}
        for node in members:
            name = str(node["metadata"]["name"])
            load = self._load(node, by_node.get(name, []), reports.get(name), moving, now)
            if load is not None:
                loads.append(load)
                nodes[name] = node
        hot: list[NodeLoad] = []
        for load in loads:
            key = (pool.name, load.name)
            detector, anomalous = observe(
                self.detectors.get(key, Detector()), is_hot(load, pool), now, pool.anomaly
            )
            self.detectors[key] = detector
            if anomalous:
                hot.append(load)
        idle = [load for load in loads if is_idle(load, pool)]
        if not hot or not idle or len(idle) <= self.args.number_of_nodes:
            if hot:
                logger.info(
                    "hot nodes, but too few idle nodes to take their pods",
                    pool=pool.name,
                    hot=[n.name for n in hot],
                    idle=[n.name for n in idle],
                    number_of_nodes=self.args.number_of_nodes,
                )
            return []
        pods = {_key(p): p for name in nodes for p in by_node.get(name, [])}
        requested = {name: _requested(by_node.get(name, [])) for name in (n.name for n in idle)}

        def fit(pod: PodLoad) -> bool:
            if not self.args.node_fit:
                return True
            body = pods[(pod.namespace, pod.name)]
            return any(fits(body, nodes[n.name], requested[n.name]) for n in idle)

        moves = plan(hot, idle, pool, fit)
        for move in moves:
            await self._migrate(move, pods[(move.pod.namespace, move.pod.name)], pool)
        for name in {m.node for m in moves}:
            self.detectors[(pool.name, name)] = Detector(seen=now)
        return moves

    async def _migrate(self, move: Move, pod: Json, pool: Pool) -> None:
        meta = pod["metadata"]
        if self.args.dry_run:
            logger.info(
                "dry run: would migrate pod off hot node",
                namespace=meta["namespace"],
                name=meta["name"],
                node=move.node,
                pool=pool.name,
            )
            return
        migration = self.settings.migration
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodMigrationJob",
            "metadata": {
                "generateName": "lownodeload-",
                "labels": {DESCHEDULER_LABEL: "LowNodeLoad"},
                "annotations": {HOT_NODE_ANNOTATION: move.node},
            },
            "spec": {
                "podRef": {
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "mode": str(migration.default_job_mode),
                "ttl": migration.default_job_ttl,
            },
        }
        made = await self.writer.create(POD_MIGRATION_JOB, body)
        logger.info(
            "migrating pod off hot node",
            namespace=meta["namespace"],
            name=meta["name"],
            node=move.node,
            job=made["metadata"]["name"],
            pool=pool.name,
        )

    def _forget_unseen(self, now: datetime) -> None:
        """Drop detectors of nodes not seen for detectorCacheTimeout."""
        timeout = parse_duration(self.args.detector_cache_timeout)
        for key, detector in list(self.detectors.items()):
            if detector.seen is not None and now - detector.seen > timeout:
                del self.detectors[key]


def _requested(pods: list[Json]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in pods:
        for resource, value in pod_requests(pod.get("spec") or {}).items():
            out[resource] = out.get(resource, 0) + value
    return out
