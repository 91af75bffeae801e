"""Pods and nodes, followed once for every operator in the process.

The kinds that grow with the cluster are not watched through Kopf: until Kopf has seen
every object of an indexed kind once, each new object's readiness wakes every object
waiting, which at 5000 nodes kept the operators from deciding anything for minutes. One
informer per kind (:class:`berth.kube.watch.Informer`: pages, then a watch, a relist on
410) hands each event to every operator that subscribed; each keeps its own
:class:`berth.operators.index.Index` and marks what changed for its worker. An operator
decides nothing that reads a kind before that kind is listed (:meth:`Followed.listed`):
its ``reconcile`` returns :data:`UNLISTED_RETRY` instead, so that an object not listed yet
never reads as gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth import log
from berth.kube.watch import Handler, Informer, ListCall

__all__ = ["UNLISTED_RETRY", "Cluster", "Followed"]

UNLISTED_RETRY = timedelta(seconds=1)
"""When a decision put off until its informers have listed is tried again."""

logger = log.get(__name__)


class Followed:
    """One kind's informer, its events handed to every subscriber in turn."""

    def __init__(self, kind: str, call: ListCall) -> None:
        # No operator reads managed fields: a third to a half of a pod or a node.
        self.informer = Informer(kind, call, self._dispatch, drop_managed_fields=True)
        self._subscribers: list[Handler] = []

    def listed(self) -> bool:
        """Every object of the kind seen once: an absence now means the object is gone."""
        return self.informer.synced.is_set()

    def subscribe(self, handler: Handler) -> None:
        """Hand ``handler`` every event from now on, after an ADDED for each object already
        seen: a subscriber that comes late (an operator starts after the informer) misses
        nothing."""
        for obj in list(self.informer.known.values()):
            self._call(handler, "ADDED", obj)
        self._subscribers.append(handler)

    def _dispatch(self, kind: str, obj: dict[str, Any]) -> None:
        for handler in self._subscribers:
            self._call(handler, kind, obj)

    def _call(self, handler: Handler, kind: str, obj: dict[str, Any]) -> None:
        # One operator's failure must not keep the event from the others.
        try:
            handler(kind, obj)
        except Exception:
            meta: Mapping[str, Any] = obj.get("metadata") or {}
            logger.exception(
                "event not handled",
                kind=self.informer.kind,
                change=kind,
                namespace=meta.get("namespace"),
                name=meta.get("name"),
            )


class Cluster:
    """The pod and node informers the operators share."""

    def __init__(self, api: ApiClient) -> None:
        core = CoreV1Api(api)
        self.pods = Followed("pods", core.list_pod_for_all_namespaces)
        self.nodes = Followed("nodes", core.list_node)

    async def run(self, stop: asyncio.Event) -> None:
        """List and watch both kinds until ``stop`` is set (or the task is cancelled)."""
        await asyncio.gather(self.pods.informer.run(stop), self.nodes.informer.run(stop))
