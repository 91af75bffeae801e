"""Who uses a reservation: the pods the scheduler bound into it, and what they request.

The pod annotation ``scheduling.koordinator.sh/reservation-allocated`` (``{"name", "uid"}``),
written by the scheduler at bind, is the truth of ownership. A pod counts as a current
owner while it holds capacity (bound, not finished; :mod:`berth.podstate`); its requests
are :mod:`berth.podresources`' arithmetic, so ``status.allocated`` adds up as the scheduler
counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from berth.api.reservation import Reservation
from berth.podresources import Resources, pod_requests, sum_requests
from berth.podstate import holds_capacity
from berth.reservation.matching import PodFacts, facts_of, is_owner

__all__ = [
    "ALLOCATED_ANNOTATION",
    "OwnerPod",
    "allocated",
    "current_owners",
    "owner_pod",
    "owners_of",
]

ALLOCATED_ANNOTATION: Final = "scheduling.koordinator.sh/reservation-allocated"


@dataclass(frozen=True)
class OwnerPod:
    """A bound pod carrying the annotation, as the operator keeps it."""

    namespace: str
    name: str
    uid: str
    reservation_uid: str | None
    """The reservation uid the annotation names; ``None`` when it names only a name."""
    holding: bool
    """Bound and not finished: it still uses the reservation."""
    spec: Mapping[str, Any]
    facts: PodFacts
    """What owner matching reads of it: the annotation counts only for a real owner."""

    def reference(self) -> dict[str, str]:
        """The ``status.currentOwners`` entry for this pod."""
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}

    def requests(self) -> Resources:
        return pod_requests(self.spec)


def owner_pod(pod: Mapping[str, Any]) -> tuple[str, OwnerPod] | None:
    """(reservation name, owner) for a bound pod with a readable annotation, else None.

    An unreadable annotation (not JSON, no name) makes no owner: the scheduler never writes
    one, and guessing would charge a reservation for a pod it did not place.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    text = (meta.get("annotations") or {}).get(ALLOCATED_ANNOTATION)
    node = spec.get("nodeName")
    if text is None or not node:
        return None
    try:
        target = json.loads(text)
    except ValueError:
        return None
    if not isinstance(target, dict) or not isinstance(target.get("name"), str):
        return None
    uid = target.get("uid")
    owner = OwnerPod(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        reservation_uid=uid if isinstance(uid, str) and uid else None,
        holding=holds_capacity(node, (pod.get("status") or {}).get("phase")),
        spec=spec,
        facts=facts_of(pod),
    )
    return target["name"], owner


def owners_of(reservation: Reservation, pods: Iterable[OwnerPod]) -> list[OwnerPod]:
    """The pods allocated to this reservation (not to an earlier one of the same name) that
    are its owners: an annotation written by hand, or copied from a template onto a pod
    the reservation's ``owners`` do not match, counts for nothing."""
    uid = reservation.metadata.uid
    return [
        pod
        for pod in pods
        if (pod.reservation_uid is None or uid is None or pod.reservation_uid == uid)
        and is_owner(reservation, pod.facts)
    ]


def current_owners(pods: Iterable[OwnerPod]) -> list[dict[str, str]]:
    """``status.currentOwners``: the holding pods, by namespace and name."""
    holding = sorted((p for p in pods if p.holding), key=lambda p: (p.namespace, p.name))
    return [pod.reference() for pod in holding]


def allocated(pods: Iterable[OwnerPod]) -> Resources:
    """The summed requests of the holding pods, in scheduler units."""
    return sum_requests([p.spec for p in pods if p.holding])
