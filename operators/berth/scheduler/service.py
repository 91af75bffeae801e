"""The scheduler as a running service: watches feed the event table, the loop schedules.

One loop pops a pod and runs ``schedule_one`` on it; everything it decides from is in the
cluster view, kept by the watches of nodes, pods, PriorityClasses, PodDisruptionBudgets
and Berth's own kinds, each event routed by the event table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    SchedulingV1Api,
    StorageV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api import KINDS, elasticquota
from berth.gang import workload
from berth.health import Heartbeat
from berth.kube import collector, earlylist
from berth.kube.watch import Informer
from berth.kube.write import ELASTIC_QUOTA, ApiWriter, Conflict, NotFound, api_message
from berth.scheduler.assembly import assemble
from berth.scheduler.cache.selectorowners import (
    REPLICA_SET,
    REPLICATION_CONTROLLER,
    SERVICE,
    STATEFUL_SET,
)
from berth.scheduler.config import SchedulerConfiguration
from berth.scheduler.framework.interface import PeriodicPlugin
from berth.scheduler.metrics import SchedulerMetrics
from berth.scheduler.plugins.capacityscheduling import CapacityScheduling
from berth.scheduler.queue.scheduling_queue import SchedulingQueue
from berth.scheduler.schedule_one import ScheduleOne
from berth.scheduler.writer import Writer

logger = log.get(__name__)

LEFTOVER_FLUSH_SECONDS = 30.0


class Scheduler:
    def __init__(
        self,
        api: ApiClient,
        config: SchedulerConfiguration,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.api = ApiWriter(api)
        self.queue = SchedulingQueue(
            config.pod_initial_backoff_seconds,
            config.pod_max_backoff_seconds,
            incoming=None if metrics is None else metrics.observe_incoming,
        )
        connection = config.client_connection
        self.writer = Writer(api, "berth-scheduler", connection.qps, connection.burst)
        parts = assemble(
            config.profiles,
            writer=self.writer,
            queue=self.queue,
            percentage_of_nodes_to_score=config.percentage_of_nodes_to_score,
        )
        assert parts.placement is not None
        self.view = parts.view
        self.profiles = parts.profiles
        self.events = parts.events
        self.placement = parts.placement
        self.schedule_one = ScheduleOne(
            self.profiles, self.view, self.queue, self.writer, self.events, self.placement, metrics
        )
        events = self.events
        core = CoreV1Api(api)
        # Nothing reads the managed fields of nodes and pods, the kinds that grow with
        # the cluster.
        self.informers = [
            Informer("nodes", core.list_node, events.on_node, drop_managed_fields=True),
            Informer(
                "pods",
                core.list_pod_for_all_namespaces,
                self._on_pod,
                drop_managed_fields=True,
                early=earlylist.claim(str(api.configuration.host)),
            ),
            Informer(
                "priorityclasses",
                SchedulingV1Api(api).list_priority_class,
                events.on_priority_class,
            ),
            Informer(
                "poddisruptionbudgets",
                PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces,
                events.on_pdb,
            ),
            *self._owner_informers(api),
            *self._volume_informers(api),
        ]
        # Berth's own kinds: scheduling waits until each is listed (quotas must be known
        # before the first pod is admitted) or found not served, so a cluster without the
        # CRDs (yet) still schedules ordinary pods.
        custom = CustomObjectsApi(api)
        self.custom_informers = [
            Informer(
                kind.kind,
                functools.partial(
                    custom.list_cluster_custom_object, kind.group, kind.version, kind.plural
                ),
                events.on_custom(kind.kind),
            )
            for kind in KINDS
        ]
        # kube-scheduler 1.36's PodGroup: served only with the GenericWorkload feature gate
        # (and its API version enabled); where it is not, the watch says so once and pods
        # cannot name one (the API server drops spec.schedulingGroup).
        self.custom_informers.append(
            Informer(
                workload.VIEW_KIND,
                functools.partial(
                    custom.list_cluster_custom_object,
                    workload.GROUP,
                    workload.VERSION,
                    workload.PLURAL,
                ),
                events.on_custom(workload.VIEW_KIND),
            )
        )
        if metrics is not None:
            for informer in (*self.informers, *self.custom_informers):
                informer.on_delay = functools.partial(metrics.observe_watch_delay, informer.kind)
        self.heartbeat = Heartbeat()

    def _owner_informers(self, api: ApiClient) -> list[Informer]:
        """Namespaces, Services and controllers: what PodTopologySpread's default
        constraints and InterPodAffinity's namespaceSelector read."""
        core, apps, owners = CoreV1Api(api), AppsV1Api(api), self.view.owners
        return [
            Informer("namespaces", core.list_namespace, owners.on_namespace),
            Informer("services", core.list_service_for_all_namespaces, owners.handler(SERVICE)),
            Informer(
                "replicationcontrollers",
                core.list_replication_controller_for_all_namespaces,
                owners.handler(REPLICATION_CONTROLLER),
            ),
            Informer(
                "replicasets",
                apps.list_replica_set_for_all_namespaces,
                owners.handler(REPLICA_SET),
            ),
            Informer(
                "statefulsets",
                apps.list_stateful_set_for_all_namespaces,
                owners.handler(STATEFUL_SET),
            ),
        ]

    def _volume_informers(self, api: ApiClient) -> list[Informer]:
        """What the volume plugins place pods by: volumes, claims, classes, CSI nodes and
        drivers, storage capacities."""
        core, storage, events = CoreV1Api(api), StorageV1Api(api), self.events
        return [
            Informer("persistentvolumes", core.list_persistent_volume, events.on_pv),
            Informer(
                "persistentvolumeclaims",
                core.list_persistent_volume_claim_for_all_namespaces,
                events.on_pvc,
            ),
            Informer("storageclasses", storage.list_storage_class, events.on_storage_class),
            Informer("csinodes", storage.list_csi_node, events.on_csi_node),
            Informer("csidrivers", storage.list_csi_driver, events.on_csi_driver),
            Informer(
                "csistoragecapacities",
                storage.list_csi_storage_capacity_for_all_namespaces,
                events.on_storage_capacity,
            ),
        ]

    def _on_pod(self, event: str, raw: dict[str, Any]) -> None:
        self.events.on_pod(event, raw)
        self.schedule_one.decisions.on_pod(event, raw)
        if event == "DELETED":
            self.writer.forget((raw.get("metadata") or {}).get("uid", ""))

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers) and all(
            i.settled.is_set() for i in self.custom_informers
        )

    async def wait_synced(self) -> None:
        """Until the view holds every node, pod and quota there is (the watches run in ``run``)."""
        await asyncio.gather(
            *(i.synced.wait() for i in self.informers),
            *(i.settled.wait() for i in self.custom_informers),
        )

    # -- the loop ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        watchers = [
            asyncio.create_task(i.run(stop), name=f"watch-{i.kind}")
            for i in [*self.informers, *self.custom_informers]
        ]
        flusher = asyncio.create_task(self._housekeeping(stop))
        events = asyncio.create_task(self.writer.send_events(stop))
        tasks = self.schedule_one.tasks
        making: list[asyncio.Task[None]] = []
        try:
            await self.wait_synced()
            collector.synced()
            logger.info(
                "scheduler view synced",
                nodes=self.view.nodes.count,
                pods=len(self.view.pods),
                profiles=list(self.profiles),
            )
            # Off the scheduling path: the first binding does not wait for these writes.
            making.append(asyncio.create_task(self._make_reserved_quotas()))
            stopping = asyncio.create_task(stop.wait())
            while not stop.is_set():
                self.heartbeat.beat()
                popping = asyncio.create_task(self.queue.pop())
                await asyncio.wait({popping, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not popping.done():
                    popping.cancel()
                    break
                await self.schedule_one(popping.result())
        finally:
            for task in [*watchers, flusher, events, *making, *tasks]:
                task.cancel()
            await asyncio.gather(
                *watchers, flusher, events, *making, *tasks, return_exceptions=True
            )

    async def _make_reserved_quotas(self) -> None:
        """Koordinator's root, default and system ElasticQuotas in CapacityScheduling's
        ``quotaGroupNamespace``, made where no object of their name exists (as its quota
        plugin does at start); a failure is said once and scheduling goes on, the quotas
        being implicit."""
        stored = {
            obj.get("metadata", {}).get("name")
            for obj in self.view.custom.get(elasticquota.CRD.kind, {}).values()
        }
        made: set[tuple[str, str]] = set()
        for profile in self.profiles.values():
            for plugin in profile.framework.instances.values():
                if not isinstance(plugin, CapacityScheduling):
                    continue
                for body in plugin.reserved_quotas():
                    meta = body["metadata"]
                    key = (meta["namespace"], meta["name"])
                    if meta["name"] in stored or key in made:
                        continue
                    made.add(key)
                    await self._make_reserved_quota(body)

    async def _make_reserved_quota(self, body: dict[str, Any]) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            await self.api.create(ELASTIC_QUOTA, body, namespace=namespace)
        except Conflict:
            return  # made meanwhile (by another scheduler, or a user)
        except NotFound:
            logger.error(
                "quotaGroupNamespace does not exist: the quota is not made; create the "
                "namespace and restart Berth, or remove quotaGroupNamespace",
                namespace=namespace,
                name=name,
            )
            return
        except Exception as err:  # in its own task: said here, or lost
            logger.error(
                "making Koordinator's quota failed; it stays implicit",
                namespace=namespace,
                name=name,
                error=api_message(err) if isinstance(err, ApiException) else str(err),
            )
            return
        logger.info(
            "made Koordinator's quota (quotaGroupNamespace)", namespace=namespace, name=name
        )

    def _periodic_check(self, profile: str, plugin: PeriodicPlugin) -> None:
        """A plugin's periodic check: the pods it names go back to be tried."""
        try:
            uids = plugin.retry_now(self.queue.is_unschedulable, self.queue.backed_off)
        except Exception:
            logger.exception("periodic check failed", namespace=None, profile=profile)
            return
        moved = self.queue.requeue(uids, f"{type(plugin).__name__}PeriodicCheck")
        if moved and self.metrics is not None:
            self.metrics.observe_periodic_retries(type(plugin).__name__, moved)

    async def _housekeeping(self, stop: asyncio.Event) -> None:
        """Every second: the pending-pods gauges and waiting reservations; plugins' periodic
        checks at their own period; every 30 s: long-unschedulable pods."""
        last_flush = time.monotonic()
        periodic = [
            (profile.framework.name, plugin)
            for profile in self.profiles.values()
            for plugin in profile.framework.periodic()
            if plugin.period() > 0
        ]
        last_check = {id(plugin): time.monotonic() for _, plugin in periodic}
        freed = self.placement.room_freed
        tick = time.monotonic()
        while not stop.is_set():
            # Waiting reservations are checked as soon as a pod leaves a node, the rest
            # once a second.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), max(0.0, tick + 1.0 - time.monotonic()))
            freed.clear()
            try:
                await self.placement.check_waiting()
            except Exception:
                logger.exception("checking waiting reservations failed", namespace=None)
            if time.monotonic() < tick + 1.0:
                continue
            tick = time.monotonic()
            if self.metrics is not None:
                for queue, count in self.queue.counts().items():
                    self.metrics.set_pending(queue, count)
            for profile, plugin in periodic:
                if time.monotonic() - last_check[id(plugin)] >= plugin.period():
                    last_check[id(plugin)] = time.monotonic()
                    self._periodic_check(profile, plugin)
            if time.monotonic() - last_flush >= LEFTOVER_FLUSH_SECONDS:
                last_flush = time.monotonic()
                self.queue.flush_unschedulable_leftovers()
