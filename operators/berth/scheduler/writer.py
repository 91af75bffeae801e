"""Everything the scheduler writes to the API, behind one client-side rate limit.

Bindings, evictions and pod status (PodScheduled, nominatedNodeName) share the
``clientConnection`` qps/burst budget, decisions first: a PodScheduled condition waits
while any of the others does. Events have a budget of the same size of their own
and are sent in the background by a few workers, as kube-scheduler's event broadcaster
does: explaining a decision never delays the next binding. Repeated events
for the same pod and message are folded into one event with a count, like the event
recorder's aggregation, so a pod that stays unschedulable does not flood the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.base import format_time
from berth.gang.workload import with_condition
from berth.kube.client import api_client
from berth.kube.events import event_body
from berth.kube.write import (
    EVENT,
    MERGE,
    POD,
    RESERVATION,
    STRATEGIC,
    WORKLOAD_POD_GROUP,
    ApiWriter,
    Conflict,
    NotFound,
)
from berth.scheduler.cache.podinfo import PREEMPTION_REASON, PodInfo

logger = log.get(__name__)

CONFLICT_RETRIES = 5  # client-go's retry.DefaultRetry steps

# Whether a decision made from an earlier version of a reservation holds for the stored one.
Still = Callable[[dict[str, Any]], bool]
# Events written at once, over a connection pool of their own. kube-scheduler's broadcaster
# writes each in a goroutine of its own, through an events client of its own; two at a time
# fell minutes behind whenever the API server was busy (a PreemptionBasic run had written 459
# of its 5000 events when the last pod bound; a long churn dropped thousands), and 32 over
# the decisions' pool still left a fifth of a backlog's events for after its last binding.
EVENT_WORKERS = 64
EVENT_QUEUE_SIZE = 10000  # beyond this, events are dropped (logged), never decisions


def now() -> str:
    return format_time(datetime.now(UTC))


class TokenBucket:
    """qps tokens a second, up to burst saved; ``take`` waits for one.

    Decisions go first: a write that only explains one (``urgent=False``, a pod's
    PodScheduled condition) waits while any decision waits. A restarted scheduler retries
    every pending pod within seconds and explains each; in first-come order its bindings
    queued behind a thousand conditions and landed many seconds after they were decided,
    on nodes cordoned and reservations ended meanwhile."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()
        # Explanations queue here: one at a time asks for a token, and gives way to any
        # decision that comes while it waits for one.
        self._explaining = asyncio.Lock()
        self._urgent = 0
        self._no_urgent = asyncio.Event()
        self._no_urgent.set()

    async def take(self, *, urgent: bool = True, wanted: Callable[[], bool] | None = None) -> bool:
        """A token; False, with none taken, for an explanation no longer ``wanted`` when its
        turn comes (a newer one for the same pod, or the pod gone)."""
        if not urgent:
            async with self._explaining:
                while True:
                    await self._no_urgent.wait()
                    if wanted is not None and not wanted():
                        return False
                    async with self._lock:
                        if await self._one(yielding=True, wanted=wanted):
                            return True
        self._urgent += 1
        self._no_urgent.clear()
        try:
            async with self._lock:
                await self._one(yielding=False)
        finally:
            self._urgent -= 1
            if not self._urgent:
                self._no_urgent.set()
        return True

    async def _one(self, *, yielding: bool, wanted: Callable[[], bool] | None = None) -> bool:
        """A token taken; False, with none taken, when ``yielding`` and a decision came, or
        what it was for is no longer ``wanted``."""
        while True:
            if (yielding and self._urgent) or (wanted is not None and not wanted()):
                return False
            current = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (current - self.updated) * self.qps)
            self.updated = current
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            await asyncio.sleep((1 - self.tokens) / self.qps)


class Writer:
    def __init__(self, api: ApiClient, component: str, qps: float = 50, burst: int = 100) -> None:
        self.api = ApiWriter(api)
        self._client: ApiClient | None = api
        self._events_api: ApiWriter | None = None  # while send_events runs
        self.component = component
        self.instance = f"{component}-{uuid.uuid4().hex[:8]}"
        self.bucket = TokenBucket(qps, burst)
        self.event_bucket = TokenBucket(qps, burst)
        # uid -> (reason, message) -> (event name, count)
        self._events: dict[str, dict[tuple[str, str], tuple[str, int]]] = {}
        self._conditions: dict[str, str] = {}
        # The latest explanation asked for each pod, while it waits for a token: an older one
        # still waiting is dropped, and so is any for a pod gone. Under churn a pod refused
        # every second queued one write per attempt behind the decisions; they landed up to
        # 90 s late, most saying what a later one said again, many on pods deleted meanwhile.
        self._explaining: dict[str, object] = {}
        # Pods whose binding was asked for (until it fails, or the pod is forgotten): an
        # explanation that waited behind the binding is not written over the bound pod.
        self._binding: set[str] = set()
        # Condition writes on the wire, by pod: a binding waits for its pod's to land.
        self._conditions_sending: dict[str, asyncio.Event] = {}
        self._pending_events: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    async def bind(self, pod: PodInfo, node: str) -> None:
        """Bind the pod; a PodScheduled=False it was explained with before lands first,
        and none queued for it lands after (the API server sets PodScheduled=True)."""
        self._binding.add(pod.uid)
        try:
            await self.bucket.take()
            sending = self._conditions_sending.get(pod.uid)
            if sending is not None:
                await sending.wait()
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            await self.api.create_subresource(
                POD, pod.name, "binding", body, namespace=pod.namespace
            )
        except BaseException:
            self._binding.discard(pod.uid)
            raise
        self._conditions.pop(pod.uid, None)

    async def evict(self, pod: PodInfo) -> None:
        """Evict through the Eviction API (PDBs checked by the API server)."""
        await self.bucket.take()
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        await self.api.create_subresource(POD, pod.name, "eviction", body, namespace=pod.namespace)

    async def _patch_status(self, pod: PodInfo, status: dict[str, Any], content_type: str) -> None:
        await self.bucket.take()
        await self.api.patch_status(
            POD, pod.name, status, namespace=pod.namespace, content_type=content_type
        )

    async def mark_preempted(self, pod: PodInfo, message: str) -> None:
        """The DisruptionTarget condition kube-scheduler sets on a victim before evicting it."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": PREEMPTION_REASON,
            "message": message,
            "lastTransitionTime": now(),
        }
        await self._patch_status(pod, {"conditions": [condition]}, STRATEGIC)

    async def delete(self, pod: PodInfo) -> None:
        await self.bucket.take()
        await self.api.delete(POD, pod.name, namespace=pod.namespace, uid=pod.uid)

    async def unschedulable(self, pod: PodInfo, message: str) -> None:
        """The PodScheduled=False condition, written only when its message changes (also
        from the one a scheduler before this one wrote), after every decision waiting;
        dropped when the pod's binding was asked for while it waited (written after the
        binding, it would say a bound pod is unschedulable), when a newer one for the pod
        came meanwhile, or when the pod is gone. A pod has one on the wire at a time."""
        if self._conditions.get(pod.uid) == message or _explained(pod, message):
            self._conditions[pod.uid] = message
            self._explaining.pop(pod.uid, None)  # what waits would say something older
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now(),
        }
        ticket = self._explaining[pod.uid] = object()
        latest = self._explaining.get
        if not await self.bucket.take(urgent=False, wanted=lambda: latest(pod.uid) is ticket):
            return
        # Two sent together may land in either order, the older message last, and after
        # a binding that waited for the newer one only.
        while (sending := self._conditions_sending.get(pod.uid)) is not None:
            await sending.wait()
            if latest(pod.uid) is not ticket:
                return
        del self._explaining[pod.uid]
        if pod.uid in self._binding:
            return
        sent = self._conditions_sending[pod.uid] = asyncio.Event()
        try:
            await self.api.patch_status(
                POD,
                pod.name,
                {"conditions": [condition]},
                namespace=pod.namespace,
                content_type=STRATEGIC,
            )
        finally:
            sent.set()
            if self._conditions_sending.get(pod.uid) is sent:
                del self._conditions_sending[pod.uid]
        self._conditions[pod.uid] = message

    async def annotate(self, pod: PodInfo, annotations: dict[str, str | None]) -> None:
        """Merge the annotations into the pod's; a None value removes that key."""
        await self.bucket.take()
        await self.api.patch(
            POD, pod.name, {"metadata": {"annotations": annotations}}, namespace=pod.namespace
        )

    async def reservation_status(
        self,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
        still: Still | None = None,
    ) -> dict[str, Any]:
        """A merge patch of a Reservation's status (lists, like conditions, are replaced);
        the reservation as stored after it. With ``resource_version``, refused (409) when
        the reservation changed since the version the decision read: the operator may have
        ended it meanwhile. Refused so, the reservation is read again and the patch made
        over what is stored when ``still`` says the decision holds for it (the operator's
        own writes, its Pending phase or its owner accounting, change nothing of it), up to
        ``CONFLICT_RETRIES`` times, as client-go's RetryOnConflict: the operator writes a
        new reservation's status (Pending, then its owners) while the scheduler places it."""
        version = resource_version
        for attempt in range(CONFLICT_RETRIES):
            await self.bucket.take()
            try:
                return await self.api.patch_status(
                    RESERVATION, name, status, resource_version=version
                )
            except Conflict:
                if still is None or attempt + 1 == CONFLICT_RETRIES:
                    raise
                current = await self.api.read(RESERVATION, name)
                if current is None or not still(current):
                    raise
                version = (current.get("metadata") or {}).get("resourceVersion")
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def pod_group_scheduled(self, group: dict[str, Any], condition: dict[str, Any]) -> None:
        """Set the ``PodGroupScheduled`` condition of a kube-scheduler PodGroup when
        ``with_condition`` says there is something to write."""
        meta = group.get("metadata") or {}
        conditions = (group.get("status") or {}).get("conditions") or []
        updated = with_condition(conditions, condition)
        if updated is None:
            return
        await self.bucket.take()
        await self.api.patch_status(
            WORKLOAD_POD_GROUP,
            meta.get("name") or "",
            {"conditions": updated},
            namespace=meta.get("namespace") or "",
        )

    async def create_reservation(self, body: dict[str, Any]) -> dict[str, Any]:
        await self.bucket.take()
        return await self.api.create(RESERVATION, body)

    async def read_reservation(self, name: str) -> dict[str, Any] | None:
        await self.bucket.take()
        return await self.api.read(RESERVATION, name)

    async def delete_reservation(self, name: str, uid: str) -> None:
        """Delete that very Reservation; already gone (or another of its name) is done."""
        await self.bucket.take()
        with contextlib.suppress(NotFound, Conflict):
            await self.api.delete(RESERVATION, name, uid=uid)

    async def nominate(self, pod: PodInfo, node: str) -> None:
        await self._patch_status(pod, {"nominatedNodeName": node or None}, MERGE)

    def event(
        self,
        obj: dict[str, Any],
        kind: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        api_version: str = "v1",
    ) -> None:
        """Queue an event about an object; it is sent in the background."""
        if self._pending_events.qsize() >= EVENT_QUEUE_SIZE:
            meta = obj.get("metadata") or {}
            logger.warning(
                "event dropped: too many waiting",
                namespace=meta.get("namespace"),
                name=meta.get("name"),
                reason=reason,
            )
            return
        self._pending_events.put_nowait((obj, kind, reason, message, warning, api_version))

    async def send_events(self, stop: asyncio.Event) -> None:
        """The event workers, over a client of their own (no binding waits behind an event
        for a connection); run until ``stop`` is set."""
        own = api_client(self._client.configuration) if self._client is not None else None
        self._events_api = ApiWriter(own) if own is not None else None

        async def worker() -> None:
            while True:
                event = await self._pending_events.get()
                try:
                    await self._send_event(*event)
                except Exception as err:
                    logger.warning("event not sent", reason=event[2], error=repr(err))

        workers = [asyncio.create_task(worker()) for _ in range(EVENT_WORKERS)]
        try:
            await stop.wait()
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._events_api = None
            if own is not None:
                await own.close()

    async def _send_event(
        self,
        obj: dict[str, Any],
        kind: str,
        reason: str,
        message: str,
        warning: bool,
        api_version: str,
    ) -> None:
        """Create the event, or fold it into the previous one when it repeats."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        seen = self._events.setdefault(str(meta.get("uid")), {})
        key = (reason, message)
        timestamp = now()
        api = self._events_api or self.api
        try:
            await self.event_bucket.take()
            previous = seen.get(key)
            if previous is not None:
                name, count = previous
                await api.patch(
                    EVENT,
                    name,
                    {"count": count + 1, "lastTimestamp": timestamp},
                    namespace=namespace,
                )
                seen[key] = (name, count + 1)
                return
            body = event_body(
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                namespace,
                reason,
                message,
                warning=warning,
                component=self.component,
            )
            body["reportingComponent"] = self.component
            body["reportingInstance"] = self.instance
            name = body["metadata"]["name"]
            await api.create(EVENT, body, namespace=namespace)
            seen[key] = (name, 1)
        except ApiException as err:
            # Events explain; they never decide. A lost event is logged, not retried.
            logger.warning(
                "event not recorded",
                namespace=namespace,
                name=meta.get("name"),
                reason=reason,
                status=err.status,
            )

    def forget(self, uid: str) -> None:
        """Drop what is remembered about a pod that is gone."""
        self._conditions.pop(uid, None)
        self._explaining.pop(uid, None)
        self._events.pop(uid, None)
        self._binding.discard(uid)


def _explained(pod: PodInfo, message: str) -> bool:
    """The pod's stored PodScheduled condition already says it is unschedulable so."""
    for condition in (pod.raw.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            said = (condition.get("status"), condition.get("reason"), condition.get("message"))
            return said == ("False", "Unschedulable", message)
    return False
