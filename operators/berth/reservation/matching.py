"""Which reservations a pod may allocate from: owners, reservation-affinity, ignored pods.

Owners: entries are ORed, the parts set in one entry ANDed (object, controller,
labelSelector). A pod labelled ``scheduling.koordinator.sh/reservation-ignored: "true"``
never uses reservations. A pod annotated with ``scheduling.koordinator.sh/reservation-affinity``
may only run in a reservation that matches it (by name and/or by the reservation's
labels), and never falls back to ordinary capacity.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from berth.api.meta import Toleration
from berth.api.reservation import Reservation, ReservationOwner

AFFINITY_ANNOTATION = "scheduling.koordinator.sh/reservation-affinity"
IGNORED_LABEL = "scheduling.koordinator.sh/reservation-ignored"


@dataclass(frozen=True)
class PodFacts:
    """What owner matching reads of a pod."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_references: tuple[Mapping[str, Any], ...]
    tolerations: tuple[Toleration, ...]

    @property
    def ignores_reservations(self) -> bool:
        return (
            self.labels.get(IGNORED_LABEL) == "true"
            or self.annotations.get(IGNORED_LABEL) == "true"
        )


@dataclass(frozen=True)
class ReservationAffinity:
    name: str | None
    selector: Mapping[str, str]

    def matches(self, reservation: Reservation) -> bool:
        if self.name and reservation.metadata.name != self.name:
            return False
        labels = reservation.metadata.labels or {}
        return all(labels.get(k) == v for k, v in self.selector.items())


class AffinityError(ValueError):
    """The reservation-affinity annotation cannot be read."""


def affinity_of(annotations: Mapping[str, str]) -> ReservationAffinity | None:
    text = annotations.get(AFFINITY_ANNOTATION)
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError as err:
        raise AffinityError(f"annotation {AFFINITY_ANNOTATION} is not JSON: {err}") from err
    if not isinstance(parsed, dict):
        raise AffinityError(f"annotation {AFFINITY_ANNOTATION} must be a JSON object")
    selector = parsed.get("reservationSelector") or {}
    if not isinstance(selector, dict):
        raise AffinityError(f"{AFFINITY_ANNOTATION}: reservationSelector must be an object")
    name = parsed.get("name")
    return ReservationAffinity(
        str(name) if name else None, {str(k): str(v) for k, v in selector.items()}
    )


def _entry_matches(owner: ReservationOwner, pod: PodFacts) -> bool:
    if owner.object is not None:
        ref = owner.object
        if ref.uid and ref.uid != pod.uid:
            return False
        if ref.name and ref.name != pod.name:
            return False
        if ref.namespace and ref.namespace != pod.namespace:
            return False
    if owner.controller is not None:
        wanted = owner.controller
        if wanted.namespace and wanted.namespace != pod.namespace:
            return False
        if not any(
            ref.get("controller")
            and ref.get("kind") == wanted.kind
            and ref.get("name") == wanted.name
            and (not wanted.uid or ref.get("uid") == wanted.uid)
            for ref in pod.owner_references
        ):
            return False
    return owner.label_selector is None or owner.label_selector.matches(pod.labels)


def is_owner(reservation: Reservation, pod: PodFacts) -> bool:
    return any(_entry_matches(owner, pod) for owner in reservation.spec.owners)


def tolerates(reservation: Reservation, pod: PodFacts) -> bool:
    """The pod tolerates every NoSchedule/NoExecute taint of the reservation."""
    for taint in reservation.spec.taints or ():
        if str(taint.effect) == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return False
    return True
