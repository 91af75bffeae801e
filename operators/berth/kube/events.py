"""Core v1 Events as Berth's operators post them, so ``kubectl describe`` shows them alike.

Events explain; they never decide: one that is refused is logged, not retried.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.base import format_time
from berth.api.meta import KubeObject
from berth.kube.write import EVENT, ApiWriter

__all__ = [
    "CLUSTER_EVENTS_NAMESPACE",
    "MESSAGE_LIMIT",
    "Told",
    "event_body",
    "post_event",
    "record",
]

MESSAGE_LIMIT: Final = 1024
CLUSTER_EVENTS_NAMESPACE: Final = "default"
"""Where events about cluster-scoped objects go, as the kubelet's events about Nodes do."""

logger = log.get(__name__)


def event_body(
    involved: dict[str, Any],
    namespace: str,
    reason: str,
    message: str,
    *,
    warning: bool,
    component: str,
) -> dict[str, Any]:
    """An Event about ``involved`` (an object reference) in ``namespace``.

    Named as the event recorder names them (object name, then a unique suffix). Events
    about a cluster-scoped object go to ``default``, as the kubelet's events about Nodes do.
    """
    now = format_time(datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved.get('name')}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def post_event(writer: ApiWriter, body: dict[str, Any]) -> None:
    """Create the event; a refusal is logged."""
    namespace = body["metadata"]["namespace"]
    involved = body["involvedObject"]
    try:
        await writer.create(EVENT, body, namespace=namespace)
    except ApiException as err:
        logger.warning(
            "event not recorded",
            namespace=involved.get("namespace"),
            name=involved.get("name"),
            reason=body["reason"],
            status=err.status,
        )


class Told(Protocol):
    """What an event says: an operator's decision names these for its events."""

    @property
    def reason(self) -> str: ...

    @property
    def message(self) -> str: ...

    @property
    def warning(self) -> bool: ...


async def record(
    writer: ApiWriter, obj: KubeObject, events: Iterable[Told], *, component: str
) -> None:
    """Events about a cluster-scoped Berth object (a Reservation, a PodMigrationJob), in
    ``default``, where ``kubectl describe`` finds them."""
    meta = obj.metadata
    involved = {"apiVersion": obj.api_version, "kind": obj.kind, "name": meta.name, "uid": meta.uid}
    for event in events:
        body = event_body(
            involved,
            CLUSTER_EVENTS_NAMESPACE,
            event.reason,
            event.message,
            warning=event.warning,
            component=component,
        )
        await post_event(writer, body)
