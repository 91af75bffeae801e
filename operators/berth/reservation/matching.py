"""Which reservations a pod may allocate from: owners, reservation-affinity, ignored pods.

Koordinator's rules. Owners: entries are ORed, the parts set in one entry ANDed (object,
controller, labelSelector). A pod labelled ``scheduling.koordinator.sh/reservation-ignored:
"true"`` schedules as if no reservation existed: it is no reservation's owner, and the
capacity reservations hold is free to it. A pod annotated with
``scheduling.koordinator.sh/reservation-affinity`` may only run in a reservation that
matches it (``name``, ``reservationSelector`` labels, and any of
``requiredDuringSchedulingIgnoredDuringExecution.reservationSelectorTerms``), and never
falls back to ordinary capacity; the affinity's ``tolerations`` are what tolerate a
reservation's taints (and ``unschedulable``, read as the taint
``node.kubernetes.io/unschedulable:NoSchedule``). ``exact-match-reservation`` limits a pod
to reservations whose allocatable equals its requests for the named resources.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from berth.api.meta import (
    NodeSelectorOperator,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
)
from berth.api.reservation import Reservation, ReservationOwner

AFFINITY_ANNOTATION = "scheduling.koordinator.sh/reservation-affinity"
EXACT_MATCH_ANNOTATION = "scheduling.koordinator.sh/exact-match-reservation"
IGNORED_LABEL = "scheduling.koordinator.sh/reservation-ignored"
# What ``spec.unschedulable`` of a reservation is tolerated as.
UNSCHEDULABLE_TAINT = Taint.model_validate(
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
)
_INTEGER = re.compile(r"[+-]?[0-9]+")


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
        """Koordinator reads the label only."""
        return self.labels.get(IGNORED_LABEL) == "true"


def facts_of(pod: Mapping[str, Any]) -> PodFacts:
    """A pod object's facts for matching."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return PodFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        owner_references=tuple(meta.get("ownerReferences") or ()),
        tolerations=tuple(Toleration.model_validate(t) for t in spec.get("tolerations") or ()),
    )


def _requirement_holds(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    values = req.values or []
    if op is NodeSelectorOperator.IN:
        return value is not None and value in values
    if op is NodeSelectorOperator.NOT_IN:
        return value is None or value not in values
    if op is NodeSelectorOperator.EXISTS:
        return value is not None
    if op is NodeSelectorOperator.DOES_NOT_EXIST:
        return value is None
    if value is None or len(values) != 1 or not _INTEGER.fullmatch(value):
        return False
    if not _INTEGER.fullmatch(values[0]):
        return False
    if op is NodeSelectorOperator.GT:
        return int(value) > int(values[0])
    return int(value) < int(values[0])


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], name: str) -> bool:
    """A node selector term over a reservation's labels (and ``metadata.name`` fields);
    an empty term matches nothing, as for nodes."""
    expressions = term.match_expressions or []
    fields = term.match_fields or []
    if not expressions and not fields:
        return False
    return all(_requirement_holds(r, labels.get(r.key)) for r in expressions) and all(
        r.key == "metadata.name"
        and r.operator in (NodeSelectorOperator.IN, NodeSelectorOperator.NOT_IN)
        and _requirement_holds(r, name)
        for r in fields
    )


@dataclass(frozen=True)
class ReservationAffinity:
    name: str | None = None
    selector: Mapping[str, str] = field(default_factory=dict)
    terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def matches(self, reservation: Reservation) -> bool:
        name = reservation.metadata.name or ""
        if self.name and name != self.name:
            return False
        labels = reservation.metadata.labels or {}
        if not all(labels.get(k) == v for k, v in self.selector.items()):
            return False
        return not self.terms or any(term_matches(t, labels, name) for t in self.terms)


class AffinityError(ValueError):
    """The reservation-affinity (or exact-match) annotation cannot be read."""


def _json_object(annotations: Mapping[str, str], key: str) -> dict[str, Any] | None:
    text = annotations.get(key)
    if text is None:
        return None
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError as err:
        raise AffinityError(f"annotation {key} is not JSON: {err}") from err
    if not isinstance(parsed, dict):
        raise AffinityError(f"annotation {key} must be a JSON object")
    return parsed


AFFINITY_FIELDS = frozenset(
    {"name", "reservationSelector", "requiredDuringSchedulingIgnoredDuringExecution", "tolerations"}
)


def affinity_of(annotations: Mapping[str, str]) -> ReservationAffinity | None:
    parsed = _json_object(annotations, AFFINITY_ANNOTATION)
    if parsed is None:
        return None
    unknown = sorted(set(parsed) - AFFINITY_FIELDS)
    if unknown:
        raise AffinityError(
            f"{AFFINITY_ANNOTATION}: unknown field(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(AFFINITY_FIELDS))})"
        )
    selector = parsed.get("reservationSelector") or {}
    if not isinstance(selector, dict):
        raise AffinityError(f"{AFFINITY_ANNOTATION}: reservationSelector must be an object")
    required = parsed.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    try:
        terms = tuple(
            NodeSelectorTerm.model_validate(t)
            for t in (required.get("reservationSelectorTerms") or [])
        )
        tolerations = tuple(Toleration.model_validate(t) for t in parsed.get("tolerations") or [])
    except (ValidationError, AttributeError, TypeError) as err:
        raise AffinityError(f"{AFFINITY_ANNOTATION}: {err}") from err
    name = parsed.get("name")
    return ReservationAffinity(
        str(name) if name else None,
        {str(k): str(v) for k, v in selector.items()},
        terms,
        tolerations,
    )


def exact_match_of(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The resources ``exact-match-reservation`` names (none: no constraint)."""
    parsed = _json_object(annotations, EXACT_MATCH_ANNOTATION)
    if not parsed:
        return ()
    names = parsed.get("resourceNames") or []
    if not isinstance(names, list):
        raise AffinityError(f"{EXACT_MATCH_ANNOTATION}: resourceNames must be a list")
    return tuple(str(n) for n in names)


def exactly_matches(
    requests: Mapping[str, int], allocatable: Mapping[str, int], names: tuple[str, ...]
) -> bool:
    """Koordinator's ExactMatchReservation: for every named resource, the pod asks exactly
    what the reservation holds, or neither has it."""
    for resource in names:
        if (resource in requests) != (resource in allocatable):
            return False
        if resource in requests and requests[resource] != allocatable[resource]:
            return False
    return True


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


def owners_text(reservation: Reservation) -> str:
    """Its owners for people: ``pods labelled app=web; pod ns/p`` (entries ORed)."""
    entries = []
    for owner in reservation.spec.owners:
        parts = []
        if owner.object is not None:
            ref = owner.object
            named = "/".join(p for p in (ref.namespace, ref.name) if p) or f"uid {ref.uid}"
            parts.append(f"pod {named}")
        if owner.controller is not None:
            parts.append(f"pods of {owner.controller.kind} {owner.controller.name}")
        selector = owner.label_selector
        if selector is not None:
            terms = [f"{k}={v}" for k, v in sorted((selector.match_labels or {}).items())]
            terms += [
                f"{r.key} {r.operator.value} {','.join(r.values or ())}".rstrip()
                for r in selector.match_expressions or ()
            ]
            parts.append(f"pods labelled {', '.join(terms)}" if terms else "any pod")
        entries.append(" and ".join(parts))
    return "; ".join(entries) or "no owner"


OwnerKey = tuple[str, str]
"""A fact an owner entry may demand of a pod: a label ``(key, value)``, or one of the pod's
identity (``UID``, ``NAME``, ``NAMESPACE``, ``CONTROLLER`` with the value)."""
UID: Final = "\0uid"
NAME: Final = "\0name"
NAMESPACE: Final = "\0namespace"
CONTROLLER: Final = "\0controller"

OwnerScreen = tuple[frozenset[OwnerKey] | None, ...]
"""Per owner entry, the keys it surely demands (its selector's ``matchLabels``, its object
reference's and controller's fields), None when it demands none of them."""


def owner_screen(reservation: Reservation) -> OwnerScreen:
    """What each owner entry demands of a pod's keys (:func:`owner_keys`), for
    :func:`may_own`."""
    return tuple(_demanded(owner) or None for owner in reservation.spec.owners)


def _demanded(owner: ReservationOwner) -> frozenset[OwnerKey]:
    keys: set[OwnerKey] = set()
    if owner.object is not None:
        ref = owner.object
        keys |= {(k, v) for k, v in ((UID, ref.uid), (NAME, ref.name)) if v}
        if ref.namespace:
            keys.add((NAMESPACE, ref.namespace))
    if owner.controller is not None:
        wanted = owner.controller
        keys.add((CONTROLLER, f"{wanted.kind}/{wanted.name}"))
        if wanted.namespace:
            keys.add((NAMESPACE, wanted.namespace))
    if owner.label_selector is not None and owner.label_selector.match_labels:
        keys |= set(owner.label_selector.match_labels.items())
    return frozenset(keys)


def owner_keys(pod: PodFacts) -> frozenset[OwnerKey]:
    """The pod's labels and identity, as owner entries demand them."""
    keys: set[OwnerKey] = set(pod.labels.items())
    keys |= {(UID, pod.uid), (NAME, pod.name), (NAMESPACE, pod.namespace)}
    for ref in pod.owner_references:
        if ref.get("controller"):
            keys.add((CONTROLLER, f"{ref.get('kind')}/{ref.get('name')}"))
    return frozenset(keys)


def may_own(screen: OwnerScreen, keys: frozenset[OwnerKey]) -> bool:
    """False when the pod's keys lack what every owner entry demands: it is no owner.
    A set comparison per entry, so a pod can be screened against a thousand reservations
    in each attempt; True only says :func:`is_owner` must decide."""
    return any(demanded is None or demanded <= keys for demanded in screen)


# Which demanded key an entry is filed under: the one fewest pods have.
_SELECTIVE = {UID: 0, NAME: 1, CONTROLLER: 2, NAMESPACE: 4}


def _filed_under(demanded: frozenset[OwnerKey]) -> OwnerKey:
    return min(demanded, key=lambda k: (_SELECTIVE.get(k[0], 3), k))


class OwnerIndex:
    """The reservations a pod may own, found from its keys instead of asking each one:
    every owner entry that demands keys is filed under one of them (the most selective:
    a preemptor's reservation under its pod's uid or name, not under its namespace), so
    a reservation the pod could own is among those filed under a key the pod has. Those
    with an entry that demands none are candidates for every pod."""

    def __init__(self, screens: Iterable[tuple[str, OwnerScreen]]) -> None:
        self.known: set[str] = set()
        self.everyone: set[str] = set()
        self.by_key: dict[OwnerKey, set[str]] = {}
        for uid, screen in screens:
            self.known.add(uid)
            for demanded in screen:
                if demanded is None:
                    self.everyone.add(uid)
                else:
                    self.by_key.setdefault(_filed_under(demanded), set()).add(uid)

    def candidates(self, keys: Iterable[OwnerKey]) -> set[str]:
        """A superset of the known reservations :func:`may_own` passes for these keys."""
        found = set(self.everyone)
        for key in keys:
            found |= self.by_key.get(key, set())
        return found


def tolerates(reservation: Reservation, tolerations: tuple[Toleration, ...]) -> bool:
    """The reservation-affinity's tolerations tolerate every NoSchedule/NoExecute taint of
    the reservation, and its ``unschedulable`` (as Koordinator, a pod's own tolerations
    are for nodes, not reservations)."""
    taints = list(reservation.spec.taints or ())
    if reservation.spec.unschedulable:
        taints.append(UNSCHEDULABLE_TAINT)
    for taint in taints:
        if str(taint.effect) == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return True
