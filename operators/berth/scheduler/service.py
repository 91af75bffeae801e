"""The scheduler as a running service: watches feed the view, the loop schedules pods.

One loop pops a pod, runs the profile's cycle synchronously (no awaits inside the decision,
so the view cannot change under it), assumes the pod on the chosen node and hands the
binding to a task of its own, so binding overlaps the next cycles. A failed binding
forgets the pod and sends it back to the queue with backoff.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    SchedulingV1Api,
)

from berth import log
from berth.api import KINDS
from berth.kube.watch import Informer
from berth.scheduler.config import SchedulerConfiguration
from berth.scheduler.cycle import Cycle
from berth.scheduler.framework import CycleState, Handle, PostFilterResult
from berth.scheduler.messages import FitError, fit_message
from berth.scheduler.metrics import SchedulerMetrics
from berth.scheduler.placement import ReservationPlacement
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.queue import SchedulingQueue
from berth.scheduler.registry import ProfilePlugins, resolve
from berth.scheduler.reservations import KIND as RESERVATION
from berth.scheduler.reservations import is_reservation
from berth.scheduler.selectorowners import (
    REPLICA_SET,
    REPLICATION_CONTROLLER,
    SERVICE,
    STATEFUL_SET,
)
from berth.scheduler.view import ClusterView
from berth.scheduler.writer import Writer

logger = log.get(__name__)

LEFTOVER_FLUSH_SECONDS = 30.0


@dataclass
class Profile:
    plugins: ProfilePlugins
    cycle: Cycle


class Scheduler:
    def __init__(
        self,
        api: ApiClient,
        config: SchedulerConfiguration,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.view = ClusterView()
        self.queue = SchedulingQueue(
            config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds
        )
        connection = config.client_connection
        self.writer = Writer(api, "berth-scheduler", connection.qps, connection.burst)
        self.profiles: dict[str, Profile] = {}
        for profile in config.profiles:
            handle = Handle(self.view, profile.scheduler_name, self.writer)
            plugins = resolve(profile, handle)
            cycle = Cycle(plugins, self.view, config.percentage_of_nodes_to_score)
            handle.reasons_at = cycle.reasons_at
            self.profiles[profile.scheduler_name] = Profile(plugins, cycle)
        self.placement = ReservationPlacement(
            self.view,
            self.queue,
            self.writer,
            default_scheduler=config.profiles[0].scheduler_name,
            schedulers=frozenset(self.profiles),
        )
        self.view.custom_listeners.setdefault(RESERVATION, []).append(self.placement.on_reservation)
        self.view.listeners.append(lambda event, _pod: self.queue.move_all(event))
        self.view.pod_listeners.append(self._on_pod)
        core = CoreV1Api(api)
        self.informers = [
            Informer("nodes", core.list_node, self.view.on_node),
            Informer("pods", core.list_pod_for_all_namespaces, self.view.on_pod),
            Informer(
                "priorityclasses",
                SchedulingV1Api(api).list_priority_class,
                self.view.on_priority_class,
            ),
            Informer(
                "poddisruptionbudgets",
                PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces,
                self.view.on_pdb,
            ),
            *self._owner_informers(api),
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
                self.view.on_custom(kind.kind),
            )
            for kind in KINDS
        ]
        self._tasks: set[asyncio.Task[Any]] = set()

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

    # -- intake ------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: PodInfo) -> None:
        if kind == "DELETED":
            self.queue.delete(pod.uid)
            self.writer.forget(pod.uid)
            return
        profile = self.profiles.get(pod.scheduler_name)
        pending = not pod.node_name and not pod.terminal and not pod.deleting
        if profile is None or not pending:
            self.queue.delete(pod.uid)
            return
        if pod.uid in self.view.assumed:
            return
        gated = any(not p.pre_enqueue(pod).ok for p in profile.plugins.at("preEnqueue"))
        self.queue.add(pod, gated=gated)

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
        try:
            await self.wait_synced()
            logger.info(
                "scheduler view synced",
                nodes=self.view.nodes.count,
                pods=len(self.view.pods),
                profiles=list(self.profiles),
            )
            stopping = asyncio.create_task(stop.wait())
            while not stop.is_set():
                popping = asyncio.create_task(self.queue.pop())
                await asyncio.wait({popping, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not popping.done():
                    popping.cancel()
                    break
                await self.schedule_one(popping.result())
        finally:
            for task in [*watchers, flusher, events, *self._tasks]:
                task.cancel()
            await asyncio.gather(*watchers, flusher, events, *self._tasks, return_exceptions=True)

    async def _housekeeping(self, stop: asyncio.Event) -> None:
        """Every second: the pending-pods gauges; every 30 s: long-unschedulable pods."""
        last_flush = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(1.0)
            if self.metrics is not None:
                for queue, count in self.queue.counts().items():
                    self.metrics.set_pending(queue, count)
            try:
                await self.placement.check_waiting()
            except Exception:
                logger.exception("checking waiting reservations failed", namespace=None)
            if time.monotonic() - last_flush >= LEFTOVER_FLUSH_SECONDS:
                last_flush = time.monotonic()
                self.queue.flush_unschedulable_leftovers()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def schedule_one(self, pod: PodInfo) -> None:
        """One attempt for one pod; never raises (a failure goes back to the queue)."""
        current = self.view.pods.get(pod.uid, pod)
        if current.node_name or current.uid in self.view.assumed:
            self.queue.done(pod.uid)
            return
        profile = self.profiles[current.scheduler_name]
        state = CycleState()
        started = time.perf_counter()
        if is_reservation(current):
            await self._place_reservation(profile, state, current, started)
            return
        try:
            placement = profile.cycle.schedule(state, current)
        except FitError as fit:
            await self._unschedulable(profile, state, current, fit, started)
            return
        except Exception:
            logger.exception(
                "scheduling attempt failed", namespace=current.namespace, name=current.name
            )
            self.queue.retry(current)
            self._record("error", started, profile)
            return
        node = placement.node
        self.view.assume(current, node)
        reserved: list[Any] = []
        for plugin in profile.plugins.at("reserve"):
            status = plugin.reserve(state, current, node)
            if not status.ok:
                for done in reversed(reserved):
                    done.unreserve(state, current, node)
                self.view.forget(current)
                self.queue.retry(current)
                self._record("error", started, profile)
                return
            reserved.append(plugin)
        self._record("scheduled", started, profile)
        self._spawn(self._bind(profile, state, current, node, reserved))

    async def _place_reservation(
        self, profile: Profile, state: CycleState, pod: PodInfo, started: float
    ) -> None:
        """A reservation goes through the same cycle; its outcome is written to its status."""
        spec = pod.extra[RESERVATION].get("spec") or {}
        pre_allocated = bool(spec.get("preAllocation"))
        state.ignore_requested = pre_allocated
        try:
            placement = profile.cycle.schedule(state, pod)
        except FitError as fit:
            self.queue.unschedulable(pod)
            self._record("unschedulable", started, profile)
            await self.placement.unschedulable(pod, fit_message(fit.diagnosis))
            return
        except Exception:
            logger.exception("placing a reservation failed", namespace=None, name=pod.name)
            self.queue.retry(pod)
            self._record("error", started, profile)
            return
        self._record("scheduled", started, profile)
        if await self.placement.placed(pod, placement.node, pre_allocated):
            self.queue.done(pod.uid)
        else:
            self.queue.retry(pod)

    async def _unschedulable(
        self, profile: Profile, state: CycleState, pod: PodInfo, fit: FitError, started: float
    ) -> None:
        result = PostFilterResult()
        try:
            for plugin in profile.plugins.at("postFilter"):
                result = await plugin.post_filter(state, pod, fit.diagnosis)
                if self.metrics is not None and result.attempted:
                    self.metrics.observe_preemption(
                        result.victims if result.nominated_node else None
                    )
                if result.nominated_node:
                    break
        except Exception:
            logger.exception("post-filter failed", namespace=pod.namespace, name=pod.name)
        message = fit_message(fit.diagnosis, result.message)
        self.queue.unschedulable(pod)
        self._record("unschedulable", started, profile)
        logger.info(
            "pod unschedulable",
            namespace=pod.namespace,
            name=pod.name,
            reason=message,
            nominated=result.nominated_node or None,
        )
        self._spawn(self._report_unschedulable(pod, message))

    async def _report_unschedulable(self, pod: PodInfo, message: str) -> None:
        self.writer.event(pod.raw, "Pod", "FailedScheduling", message, warning=True)
        try:
            await self.writer.unschedulable(pod, message)
        except Exception as err:
            logger.info(
                "condition not written", namespace=pod.namespace, name=pod.name, error=str(err)
            )

    async def _bind(
        self, profile: Profile, state: CycleState, pod: PodInfo, node: str, reserved: list[Any]
    ) -> None:
        status = None
        for plugin in profile.plugins.at("preBind"):
            status = await plugin.pre_bind(state, pod, node)
            if not status.ok:
                break
        if status is None or status.ok:
            for plugin in profile.plugins.at("bind"):
                status = await plugin.bind(state, pod, node)
                break
        if status is not None and status.ok:
            self.queue.done(pod.uid)
            logger.debug("bound", namespace=pod.namespace, name=pod.name, node=node)
            self.writer.event(
                pod.raw, "Pod", "Scheduled", f"Successfully assigned {pod.key} to {node}"
            )
            return
        message = status.message if status is not None else "no bind plugin"
        logger.warning(
            "binding failed", namespace=pod.namespace, name=pod.name, node=node, error=message
        )
        for plugin in reversed(reserved):
            plugin.unreserve(state, pod, node)
        self.view.forget(pod)
        self.queue.retry(pod)
        self.writer.event(pod.raw, "Pod", "FailedScheduling", message, warning=True)

    def _record(self, result: str, started: float, profile: Profile) -> None:
        if self.metrics is not None:
            name = profile.plugins.profile.scheduler_name
            self.metrics.observe_attempt(result, name, time.perf_counter() - started)
