"""One scheduling attempt for one pod, as kube-scheduler's ``ScheduleOne``.

The scheduling cycle runs synchronously (no awaits inside the decision, so the view cannot
change under it): find a node, assume the pod there, run Reserve. The binding cycle runs
in a task of its own, so binding overlaps the next attempts: PreBind, Bind; a failure
unreserves, forgets the pod and sends it back to the queue with backoff. A pod no node
fits goes through PostFilter (preemption) and waits among the unschedulable pods until a
cluster event that may help it. A Reservation's template goes the same way; its binding
is its status, and so is its failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.gang import workload
from berth.kube.write import api_message
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.cycle import Cycle
from berth.scheduler.decisions.ledger import DecisionLedger
from berth.scheduler.decisions.record import of_attempt, of_gang
from berth.scheduler.eventhandlers import EventHandlers
from berth.scheduler.framework.interface import CycleState, PostFilterResult, Status
from berth.scheduler.framework.messages import FitError, fit_message
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.gangpreemption import carry_out
from berth.scheduler.groupcycle import POD_GROUP, POD_GROUP_API, GroupOutcome, schedule_group
from berth.scheduler.metrics import SchedulerMetrics
from berth.scheduler.placement import ReservationPlacement
from berth.scheduler.queue.scheduling_queue import SchedulingQueue
from berth.scheduler.writer import Writer, now

logger = log.get(__name__)


@dataclass
class Profile:
    framework: Framework
    cycle: Cycle


@dataclass
class ScheduleOne:
    profiles: dict[str, Profile]
    view: ClusterView
    queue: SchedulingQueue
    writer: Writer
    events: EventHandlers
    placement: ReservationPlacement
    metrics: SchedulerMetrics | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    decisions: DecisionLedger = field(default_factory=DecisionLedger)

    async def __call__(self, pod: PodInfo) -> None:
        """One attempt for one pod; never raises (a failure goes back to the queue)."""
        current = self.view.pods.get(pod.uid, pod)
        if (
            current.node_name
            or current.uid in self.view.assumed
            or (current.reservation is not None and current.uid in self.events.book.held)
        ):
            self.queue.done(pod.uid)  # bound (or placed) meanwhile, by us or another scheduler
            return
        profile = self.profiles[current.scheduler_name]
        fwk = profile.framework
        state = CycleState()
        started = time.perf_counter()
        if fwk.group is not None:
            outcome = schedule_group(profile.cycle, self.queue, current, time.time())
            if outcome is not None:
                self.group_decided(fwk, outcome, started, time.perf_counter() - started)
                return
        try:
            placement = profile.cycle.schedule(state, current)
        except FitError as fit:
            await self.handle_unschedulable(profile, state, current, fit, started)
            return
        except Exception:
            logger.exception(
                "scheduling attempt failed", namespace=current.namespace, name=current.name
            )
            self.queue.retry(current)
            self._record("error", started, fwk)
            return
        node = placement.node
        self.view.assume(current, node)
        status = fwk.run_reserve(state, current, node)
        if status.ok:
            status = fwk.run_permit(state, current, node)
            if not status.ok:
                fwk.run_unreserve(state, current, node)
        if not status.ok:
            logger.warning(
                "reserve or permit refused",
                namespace=current.namespace,
                name=current.name,
                node=node,
                error=status.message,
            )
            self._forget(current)
            self.queue.retry(current)
            self._record("error", started, fwk)
            return
        self._record("scheduled", started, fwk)
        self._spawn(self.binding_cycle(fwk, state, current, node))

    def group_decided(
        self, fwk: Framework, outcome: GroupOutcome, started: float, algorithm: float
    ) -> None:
        """A gang decided whole: its placed members bind together, the others wait for an
        event that may help, each saying why (and the PodGroup too)."""
        for placed in outcome.placed:
            self._spawn(self.binding_cycle(fwk, placed.state, placed.pod, placed.node))
        if outcome.preemption is not None:
            cycle = self.profiles[fwk.name].cycle
            self._spawn(carry_out(fwk, cycle, outcome.preemption))
        gang = outcome.gang
        until = outcome.wait.until if outcome.wait is not None else None
        for pod, message in outcome.waiting:
            if until is None:
                self.queue.unschedulable(pod, outcome.rejected_by)
            else:  # backed off: an event meanwhile would be lost in the unschedulable area
                self.queue.wait_out(pod, until - time.time())
            if pod.reservation is not None:
                self._spawn(self.placement.unschedulable(pod, message))
            else:
                self._spawn(self._report_unschedulable(pod, message, False))
            if outcome.wait is not None:
                key = gang.title if gang is not None else ""
                nodes = self.view.nodes.count
                self.decisions.record(of_gang(fwk.name, pod, outcome.wait, key, nodes))
        group = None
        api_version = POD_GROUP_API
        if gang is not None and gang.kind == POD_GROUP:
            group = self.view.custom.get(POD_GROUP, {}).get(gang.key)
        elif gang is not None and gang.kind == workload.VIEW_KIND:
            group = self.view.custom.get(workload.VIEW_KIND, {}).get(gang.key)
            api_version = workload.API_VERSION
            if group is not None:
                self._spawn(self._pod_group_scheduled(group, outcome))
        if outcome.wait is not None and group is not None:
            self.writer.event(
                group,
                POD_GROUP,
                outcome.wait.reason,
                outcome.wait.message,
                warning=True,
                api_version=api_version,
            )
        if self.metrics is not None:
            self.metrics.observe_group_attempt(
                "scheduled" if outcome.placed else "unschedulable",
                fwk.name,
                time.perf_counter() - started,
                algorithm,
            )
        logger.info(
            "gang placed" if outcome.placed else "gang waits",
            namespace=gang.namespace if gang is not None else None,
            name=gang.name if gang is not None else None,
            placed=len(outcome.placed),
            reason=outcome.wait.message if outcome.wait is not None else None,
        )

    async def _pod_group_scheduled(self, group: dict[str, Any], outcome: GroupOutcome) -> None:
        """kube-scheduler's PodGroupScheduled condition: True once placed (reason
        Scheduled), else False with the reason Unschedulable and why."""
        if outcome.placed:
            condition = workload.scheduled_condition(True, "Scheduled", "", None, now())
        elif outcome.wait is not None:
            message = outcome.wait.message
            condition = workload.scheduled_condition(False, "Unschedulable", message, None, now())
        else:
            return
        meta = group.get("metadata") or {}
        try:
            await self.writer.pod_group_scheduled(group, condition)
        except ApiException as err:
            logger.warning(
                "PodGroupScheduled not written",
                namespace=meta.get("namespace"),
                name=meta.get("name"),
                error=api_message(err),
            )

    async def binding_cycle(
        self, fwk: Framework, state: CycleState, pod: PodInfo, node: str
    ) -> None:
        status = await self._bind(fwk, state, pod, node)
        # A gang member's failed binding retries into the same hold (still assumed there,
        # its quota still charged) until the gang's wait is up (gang/hold.py).
        hold, tries = state.hold, 0
        while not status.ok and hold is not None and self.view.assumed.get(pod.uid) == node:
            delay = hold.next_try(time.time(), tries)
            if delay is None:
                break
            logger.info(
                "gang member's binding retried",
                namespace=pod.namespace,
                name=pod.name,
                node=node,
                error=status.message,
                retry_in=round(delay, 2),
            )
            await asyncio.sleep(delay)
            tries += 1
            if hold.released:
                break
            status = await self._bind(fwk, state, pod, node)
        if status.ok:
            self.queue.done(pod.uid)
            logger.debug(
                "bound", namespace=pod.namespace, name=pod.name, node=node, priority=pod.priority
            )
            return
        logger.warning(
            "binding failed",
            namespace=pod.namespace,
            name=pod.name,
            node=node,
            error=status.message,
        )
        if hold is not None:
            hold.member_failed()
        fwk.run_unreserve(state, pod, node)
        self._forget(pod)
        self.queue.retry(pod)
        if pod.reservation is None:
            self.writer.event(pod.raw, "Pod", "FailedScheduling", status.message, warning=True)

    async def _bind(self, fwk: Framework, state: CycleState, pod: PodInfo, node: str) -> Status:
        status = await fwk.run_pre_bind(state, pod, node)
        if status.ok:
            status = await fwk.run_bind(state, pod, node)
        return status

    async def handle_unschedulable(
        self, profile: Profile, state: CycleState, pod: PodInfo, fit: FitError, started: float
    ) -> None:
        """PostFilter, then the pod waits for a helpful event and says why on itself."""
        fwk = profile.framework
        results: list[PostFilterResult] = []
        try:
            results = await fwk.run_post_filter(state, pod, fit.diagnosis)
        except Exception:
            logger.exception("post-filter failed", namespace=pod.namespace, name=pod.name)
        result = results[-1] if results else PostFilterResult()
        if self.metrics is not None:
            for attempted in (r for r in results if r.attempted):
                self.metrics.observe_preemption(
                    attempted.victims if attempted.nominated_node else None
                )
        message = fit_message(fit.diagnosis, result.message)
        sent_by = self.queue.sent_by(pod.uid)  # before the queue takes it back
        acting = [r.acting for r in results if r.acting is not None]
        if acting:
            self._spawn(self._after_preemption(pod, acting, fit.diagnosis.plugins))
        else:
            self.queue.unschedulable(pod, fit.diagnosis.plugins)
        unnominate = self._drops_nomination(pod, results)
        self._record("unschedulable", started, fwk)
        logger.info(
            "pod unschedulable",
            namespace=pod.namespace,
            name=pod.name,
            reason=message,
            nominated=result.nominated_node or None,
            sent_by=sent_by,
        )
        if pod.reservation is not None:
            self._spawn(self.placement.unschedulable(pod, message))
        else:
            names = self.view.nodes.names
            self.decisions.record(
                of_attempt(fwk, state, pod, fit.diagnosis, result, message, names)
            )
            self._spawn(self._report_unschedulable(pod, message, unnominate))

    async def _after_preemption(
        self, pod: PodInfo, acting: list[asyncio.Task[None]], plugins: frozenset[str]
    ) -> None:
        """The pod stays in flight while its preemption's API calls run (the victims'
        deletions seen meanwhile are kept for it), then waits as unschedulable; a
        preemption that failed drops its nomination and is tried again after a backoff."""
        outcomes = await asyncio.gather(*acting, return_exceptions=True)
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is None:
            self.queue.unschedulable(pod, plugins)
            return
        logger.warning(
            "preemption failed; the pod is tried again after its backoff",
            namespace=pod.namespace,
            name=pod.name,
            error=str(failed) or type(failed).__name__,
        )
        held = self.view.nominated.pop(pod.uid, None)
        if held is not None:
            self.events.unnominated(pod, held[0])
        self.queue.retry(pod)
        try:
            await self.writer.nominate(pod, "")
        except ApiException as err:
            if err.status != 404:  # gone: nothing to clear
                logger.warning(
                    "nomination not cleared",
                    namespace=pod.namespace,
                    name=pod.name,
                    error=api_message(err),
                )

    def _drops_nomination(self, pod: PodInfo, results: list[PostFilterResult]) -> bool:
        """Drop the pod's nomination when the last PostFilter that set one (ModeOverride)
        left it empty, as kube-scheduler's nominator does; True if the status needs it too.

        A nomination held by a pod that no longer fits anywhere would keep room and quota
        from others, who may hold theirs against it in turn. A pod not eligible to preempt
        (its victims still terminating) keeps its nomination."""
        overriding = [r for r in results if r.override]
        if not overriding or overriding[-1].nominated_node:
            return False
        held = self.view.nominated.pop(pod.uid, None)
        if held is not None:
            self.events.unnominated(pod, held[0])
        return held is not None or bool(pod.nominated_node)

    async def _report_unschedulable(self, pod: PodInfo, message: str, unnominate: bool) -> None:
        self.writer.event(pod.raw, "Pod", "FailedScheduling", message, warning=True)
        try:
            if unnominate:
                await self.writer.nominate(pod, "")
            await self.writer.unschedulable(pod, message)
        except Exception as err:
            logger.info(
                "condition not written", namespace=pod.namespace, name=pod.name, error=str(err)
            )

    def _forget(self, pod: PodInfo) -> None:
        node = self.view.assumed.get(pod.uid)
        if node is not None and self.view.forget(pod):
            self.events.forgotten(pod, node)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _record(self, result: str, started: float, fwk: Framework) -> None:
        if self.metrics is not None:
            self.metrics.observe_attempt(result, fwk.name, time.perf_counter() - started)
