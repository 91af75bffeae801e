"""Story 1 of the design: a Reservation that holds what a preemption frees for its preemptor.

"The scheduler can create a reservation for the preempting pods, so the ownership of
preempted resources can be guaranteed." When the switch is on, the scheduler creates
this Reservation before it evicts: owned by the preemptor alone (an ``object`` owner),
``allocateOnce``, pinned to the nominated node, pre-allocated (placed at once, Waiting
until the victims leave, then Available) and with a short ttl, so that capacity freed for a
preemptor that goes away returns when it expires. Reserved capacity is never a non-owner's,
at any priority, so a pod arriving between the eviction and the preemptor's bind cannot
take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

from berth.api.duration import format_duration
from berth.api.reservation import GROUP, VERSION, ReservationPhase
from berth.quota.usage import as_resource_list

PREEMPTOR_LABEL: Final = "berth.io/preemptor"
"""The preemptor's uid, on the Reservation made for it."""
DEFAULT_TTL: Final = timedelta(minutes=2)
MAX_NAME: Final = 253


def reservation_name(namespace: str, name: str, uid: str) -> str:
    """A DNS subdomain naming the pod, unique per pod uid."""
    suffix = f"-{uid[:8]}"
    return f"preempt-{namespace}-{name}"[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def preemption_reservation(
    *,
    namespace: str,
    name: str,
    uid: str,
    requests: Mapping[str, int],
    priority: int,
    scheduler_name: str,
    node: str,
    ttl: timedelta,
) -> dict[str, Any]:
    """The Reservation for one preemptor on the node its victims leave."""
    container = {"name": "preempted", "resources": {"requests": as_resource_list(requests)}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Reservation",
        "metadata": {
            "name": reservation_name(namespace, name, uid),
            "labels": {PREEMPTOR_LABEL: uid},
        },
        "spec": {
            "template": {
                "spec": {
                    "schedulerName": scheduler_name,
                    "nodeName": node,
                    "priority": priority,
                    "containers": [container],
                }
            },
            "owners": [{"object": {"namespace": namespace, "name": name, "uid": uid}}],
            "allocateOnce": True,
            "preAllocation": True,
            "ttl": format_duration(ttl),
        },
    }


def serves_again(existing: Mapping[str, Any], node: str) -> bool:
    """Whether the Reservation made for this preemptor by an earlier preemption serves the
    new one: it holds (Waiting or Available) on the node the new one frees, for nobody
    yet. Otherwise (ended, placed elsewhere, never placed, being deleted) it is replaced:
    a preemptor whose earlier reservation ended must be able to preempt again."""
    meta = existing.get("metadata") or {}
    status = existing.get("status") or {}
    return (
        status.get("phase") in (ReservationPhase.WAITING, ReservationPhase.AVAILABLE)
        and status.get("nodeName") == node
        and not status.get("currentOwners")
        and not meta.get("deletionTimestamp")
    )
