"""Reservations in the scheduler's view: what each one holds on its node, and for whom.

An Available or Waiting reservation counts on its node as a pod that requests what the
reservation still holds: its allocatable minus what its owners use (an allocateOnce
reservation holds nothing once one owner is in). Every other pod sees that capacity as
taken, at any priority, and preemption never evicts it. Owners are the pods carrying the
``reservation-allocated`` annotation (from the watch) and the pods this scheduler has just
placed into it (Reserve), so a burst of owners sees the reservation shrink at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth import log
from berth.api.meta import ObjectReference
from berth.api.reservation import Reservation, ReservationPhase
from berth.gang.koordinator import member_keys
from berth.podresources import Resources, resource_list
from berth.reservation.matching import facts_of, is_owner
from berth.reservation.owners import owner_pod
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.view import ClusterView

logger = log.get(__name__)

KIND = "Reservation"
HOLDING = frozenset({ReservationPhase.AVAILABLE, ReservationPhase.WAITING})
PSEUDO_PREFIX = "reservation/"


def template_pod(obj: dict[str, Any], priority_classes: dict[str, dict[str, Any]]) -> PodInfo:
    """The pod a reservation is placed as: its template, named and identified after it."""
    meta = obj.get("metadata") or {}
    template = (obj.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    spec = dict(template.get("spec") or {})
    # Gang keys on the template or on the Reservation itself (which wins, as Koordinator's
    # reserve pod takes both) make it a member of that gang; no other annotation is read.
    gang_labels, gang_annotations = member_keys(
        meta.get("labels") or {},
        {**dict(template_meta.get("annotations") or {}), **dict(meta.get("annotations") or {})},
    )
    if "priority" not in spec and spec.get("priorityClassName") in priority_classes:
        spec["priority"] = priority_classes[spec["priorityClassName"]].get("value", 0)
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta.get("name", ""),
            # Koordinator's reading: the template's namespace, else "default" (so the
            # template's pod (anti-)affinity and spread terms see the pods they name).
            "namespace": template_meta.get("namespace") or "default",
            "uid": meta.get("uid", ""),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": {**dict(template_meta.get("labels") or {}), **gang_labels},
            "annotations": gang_annotations,
        },
        "spec": spec,
        "status": {},
    }
    pod = PodInfo.from_pod(raw)
    pod.node_name = ""  # a pinned template (spec.nodeName) is not bound: NodeName checks it
    pod.reservation = obj
    return pod


@dataclass
class Held:
    """One reservation holding capacity on a node."""

    reservation: Reservation
    raw: dict[str, Any]
    node: str
    allocatable: Resources
    template: PodInfo
    # owner pod uid -> its requests
    owners: dict[str, Resources] = field(default_factory=dict)
    counted: PodInfo | None = None
    spent: bool = False
    """allocateOnce and an owner was seen, even one gone since: it serves nobody else."""
    expiry: datetime | None = None
    """When it expires (``expires``, or creation plus ttl); None if never."""
    awaiting: bool = False
    """The pod it is ``promised`` to still waits for a node, as the view last showed it."""

    @property
    def uid(self) -> str:
        return self.reservation.metadata.uid or ""

    @property
    def name(self) -> str:
        return self.reservation.metadata.name or ""

    @property
    def used_up(self) -> bool:
        """allocateOnce and an owner is in, was in, or is recorded in ``currentOwners``
        (the scheduler records it before binding): nothing more to offer anyone else."""
        status = self.reservation.status
        return self.reservation.spec.allocate_once and (
            bool(self.owners) or self.spent or bool(status and status.current_owners)
        )

    @property
    def promised(self) -> ObjectReference | None:
        """The pod ``currentOwners`` records while no owner is in it or was seen: the
        scheduler records it before the binding, and a scheduler stopped between the two
        leaves it so. It is that pod's still, capacity held, until the pod is bound (into
        it, or elsewhere: the operator then ends it) or gone."""
        status = self.reservation.status
        recorded = (status.current_owners if status else None) or []
        if not self.reservation.spec.allocate_once or self.owners or self.spent:
            return None
        return recorded[0] if len(recorded) == 1 else None

    def promised_to(self, pod: PodInfo) -> bool:
        promised = self.promised
        if promised is None:
            return False
        if promised.uid:
            return promised.uid == pod.uid
        return (promised.namespace, promised.name) == (pod.namespace, pod.name)

    @property
    def holding(self) -> bool:
        """Whether it still holds capacity on its node (for its owners, or for the pod
        promised it while that pod waits)."""
        return not self.used_up or (self.awaiting and self.promised is not None)

    def remaining(self, without: Collection[str] = ()) -> Resources:
        """What it still holds; ``without`` names owners taken off in a preemption dry
        run, whose share is back in it meanwhile."""
        if not self.holding:
            return {}
        left = dict(self.allocatable)
        for uid, requests in self.owners.items():
            if uid in without:
                continue
            for resource, value in requests.items():
                if resource in left:
                    left[resource] = max(0, left[resource] - value)
        return left


@dataclass
class ReservationBook:
    view: ClusterView
    held: dict[str, Held] = field(default_factory=dict)
    # reservation uid -> owner pods placed by this scheduler, not yet seen annotated
    assumed: dict[str, dict[str, Resources]] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)
    # Reservations whose placement this scheduler is writing: held before the write.
    placing: set[str] = field(default_factory=set)
    # name -> (resourceVersion, typed) of reservations no longer held that pods name
    _typed: dict[str, tuple[str, Reservation]] = field(default_factory=dict)

    def outdated(self, event: str, obj: dict[str, Any]) -> bool:
        """Whether a watch event is older than the version the book holds, which this
        scheduler wrote itself: the watch has not caught up with the placement yet. Taken
        as current, the reservation's earlier Pending phase would free its capacity for a
        moment (another pod placed into it) and queue it to be placed again. While the
        placement is being written its version is not known yet: a Pending version is
        older (the operator's first status, written while the scheduler placed it from
        the created version), and the write settles it. An ended one is taken: the write
        will fail over it, and the reservation must leave the queue, not be tried again."""
        uid = (obj.get("metadata") or {}).get("uid", "")
        held = self.held.get(uid)
        if event == "DELETED" or held is None:
            return False
        if uid in self.placing:
            return (obj.get("status") or {}).get("phase") in (None, ReservationPhase.PENDING)
        # The API server's versions are etcd revisions: integers that grow with every write.
        theirs = (obj.get("metadata") or {}).get("resourceVersion") or ""
        ours = (held.raw.get("metadata") or {}).get("resourceVersion") or ""
        return theirs.isdigit() and ours.isdigit() and int(theirs) < int(ours)

    def on_reservation(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        if event == "DELETED":
            self.release(uid)
            return
        try:
            reservation = Reservation.model_validate(obj)
        except ValueError as err:
            logger.warning(
                "reservation not understood", namespace=None, name=meta.get("name"), error=str(err)
            )
            return
        status = reservation.status
        if status is None or status.phase not in HOLDING or not status.node_name:
            self.release(uid)
            return
        self.hold(obj, reservation, status.node_name)

    def on_written(self, obj: dict[str, Any]) -> None:
        """A version this scheduler wrote, as the API server stored it: taken unless the
        watch released the reservation meanwhile (ended, deleted) or brought a newer
        version. Taken then, it would hold capacity no later event releases."""
        uid = (obj.get("metadata") or {}).get("uid", "")
        held = self.held.get(uid)
        if held is None:
            return
        ours = (obj.get("metadata") or {}).get("resourceVersion") or ""
        seen = (held.raw.get("metadata") or {}).get("resourceVersion") or ""
        if ours.isdigit() and seen.isdigit() and int(seen) > int(ours):
            return
        self.on_reservation("MODIFIED", obj)

    def hold(self, obj: dict[str, Any], reservation: Reservation, node: str) -> Held:
        """Count the reservation on its node (again, if it changed)."""
        uid = reservation.metadata.uid or ""
        previous = self.held.get(uid)
        template = template_pod(obj, self.view.priority_classes)
        held = Held(
            reservation=reservation,
            raw=obj,
            node=node,
            allocatable=granted(obj, template),
            template=template,
            owners=previous.owners if previous is not None else self._owners_of(reservation),
            spent=previous is not None and previous.spent,
            expiry=expiry_of(reservation),
        )
        if previous is not None:
            self._uncount(previous)
        self.held[uid] = held
        self.by_name[held.name] = uid
        self._count(held)
        return held

    def release(self, uid: str) -> None:
        held = self.held.pop(uid, None)
        if held is not None:
            self._uncount(held)
            if self.by_name.get(held.name) == uid:
                del self.by_name[held.name]
        self.assumed.pop(uid, None)

    def _owners_of(self, reservation: Reservation) -> dict[str, Resources]:
        owners: dict[str, Resources] = {}
        for pod in self.view.pods.values():
            found = owner_pod(pod.raw)
            if found is None:
                continue
            name, owner = found
            if (
                name == reservation.metadata.name
                and owner.holding
                and (owner.reservation_uid in (None, reservation.metadata.uid))
                and is_owner(reservation, facts_of(pod.raw))
            ):
                owners[pod.uid] = pod.requests
        owners.update(self.assumed.get(reservation.metadata.uid or "", {}))
        return owners

    # -- owners --------------------------------------------------------------------------

    def on_pod(self, kind: str, pod: PodInfo) -> None:
        """Owners come and go with the annotated pods of the watch; a reservation promised
        to a pod holds its capacity while that pod waits."""
        found = owner_pod(pod.raw) if kind != "DELETED" else None
        if kind == "DELETED":  # placed by us and gone before the watch showed it annotated
            for assumed in self.assumed.values():
                assumed.pop(pod.uid, None)
        for held in self.held.values():
            if pod.uid in held.owners and (found is None or not found[1].holding):
                if pod.uid in self.assumed.get(held.uid, {}) and kind != "DELETED":
                    continue  # placed by us a moment ago; the watch has not caught up
                # Deleted or finished: it was an owner. (An annotation taken off a pod
                # placed elsewhere is not an allocation.)
                held.spent = held.spent or kind == "DELETED" or found is not None
                del held.owners[pod.uid]
                self._recount(held)
            elif held.promised is not None and held.promised_to(pod):
                self._recount(held)  # the pod it is promised to came, was bound, or went
        if found is None or not found[1].holding:
            return
        name, owner = found
        uid = owner.reservation_uid or self.by_name.get(name, "")
        target = self.held.get(uid)
        if (
            target is not None
            and pod.uid not in target.owners
            and is_owner(target.reservation, facts_of(pod.raw))
        ):
            target.owners[pod.uid] = pod.requests
            self._recount(target)
        self.assumed.get(uid, {}).pop(pod.uid, None)

    def allocate(self, held: Held, pod: PodInfo) -> None:
        """Reserve: the pod takes its share of the reservation now."""
        current = self.held.get(held.uid)
        if current is None:
            return  # ended since the filter credited it: PreBind's write is refused
        self.assumed.setdefault(held.uid, {})[pod.uid] = pod.requests
        current.owners[pod.uid] = pod.requests
        self._recount(current)

    def unallocate(self, held: Held, pod: PodInfo) -> None:
        """Unreserve. ``held`` is the version the cycle credited; the book may hold a newer
        one by now, or none (the reservation ended meanwhile, which is often why the
        binding failed): counting the cycle's version again would hold the capacity of a
        reservation that no longer exists, for good."""
        self.assumed.get(held.uid, {}).pop(pod.uid, None)
        current = self.held.get(held.uid)
        if current is not None and current.owners.pop(pod.uid, None) is not None:
            self._recount(current)

    # -- counting on the node --------------------------------------------------------------

    def _count(self, held: Held) -> None:
        row = self.view.nodes.index.get(held.node)
        held.awaiting = self._awaits(held)
        remaining = held.remaining()
        if row is None or not held.holding:
            held.counted = None
            return
        counted = dataclasses.replace(
            held.template,
            uid=PSEUDO_PREFIX + held.uid,
            requests=remaining,
            nonzero_cpu=remaining.get("cpu", 0),
            nonzero_memory=remaining.get("memory", 0),
            reservation=held.raw,
            extra={},
        )
        self.view.nodes.add_pod(row, counted)
        held.counted = counted

    def _uncount(self, held: Held) -> None:
        if held.counted is None:
            return
        row = self.view.nodes.index.get(held.node)
        if row is not None:
            self.view.nodes.remove_pod(row, held.counted)
        held.counted = None

    def _recount(self, held: Held) -> None:
        self._uncount(held)
        self._count(held)

    def _awaits(self, held: Held) -> bool:
        """Whether the pod the reservation is promised to is in the view, waiting for a
        node (bound elsewhere, finished or gone, it will never use the reservation)."""
        promised = held.promised
        if promised is None:
            return False
        if promised.uid:
            pod = self.view.pods.get(promised.uid)
        else:
            pod = next(
                (
                    p
                    for p in self.view.pods.values()
                    if (p.namespace, p.name) == (promised.namespace, promised.name)
                ),
                None,
            )
        return pod is not None and not pod.node_name and not pod.terminal and not pod.deleting

    def on_node_added(self, node: str) -> None:
        for held in self.held.values():
            if held.node == node and held.counted is None:
                self._count(held)

    def shields(self, victim: PodInfo, preemptor: PodInfo) -> bool:
        """Whether ``victim`` was placed through a reservation (an owner it carries the
        annotation of) that ``preemptor`` is not an owner of: then it is never the
        preemptor's victim, whatever the reservation's phase, while the reservation exists.
        Its share would go back to a reservation the preemptor may not use, or, once an
        allocateOnce reservation has ended, it still holds what was reserved for it."""
        reservation = self.shield_of(victim)
        return reservation is not None and not is_owner(reservation, facts_of(preemptor.raw))

    def shield_of(self, victim: PodInfo) -> Reservation | None:
        """The existing reservation ``victim`` was placed through and is an owner of, which
        shields it from every preemptor but that reservation's owners; None if none."""
        if not self.held and not self.view.custom.get(KIND):
            return None  # no reservation exists to shield anyone
        # The watch's latest version: the node table may hold the pod as it was assumed,
        # before the binding and the annotation written with it came back.
        current = self.view.pods.get(victim.uid, victim)
        found = owner_pod(current.raw)
        if found is None:
            return None
        name, owner = found
        uid = owner.reservation_uid or self.by_name.get(name, "")
        held = self.held.get(uid)
        if held is not None:
            reservation = held.reservation
        else:
            obj = self.view.custom.get(KIND, {}).get(name)
            if obj is None or (owner.reservation_uid and obj["metadata"].get("uid") != uid):
                return None
            typed = self._typed_once(name, obj)
            if typed is None:
                return None
            reservation = typed
        return reservation if is_owner(reservation, owner.facts) else None

    def _typed_once(self, name: str, obj: dict[str, Any]) -> Reservation | None:
        """The typed reservation, read once per version: ended allocateOnce reservations
        still shield the pods placed through them, and each quota accounting asked it of
        every such pod (a tenth of the process under churn)."""
        version = obj["metadata"].get("resourceVersion") or ""
        cached = self._typed.get(name)
        if version and cached is not None and cached[0] == version:
            return cached[1]
        try:
            reservation = Reservation.model_validate(obj)
        except ValueError:
            return None
        if len(self._typed) > 2 * len(self.view.custom.get(KIND, {})) + 16:
            self._typed.clear()  # of deleted reservations
        self._typed[name] = (version, reservation)
        return reservation

    def on(self, node: str) -> list[Held]:
        return [h for h in self.held.values() if h.node == node]

    def holding_for(self, pod: PodInfo, node: str) -> Resources:
        """What one reservation on ``node`` that ``pod`` owns still holds there: the most
        any of them offers, resource by resource (a pod is placed in one reservation).

        A preemptor's own Reservation already holds the room its victims free, so its
        nomination must not hold that room a second time."""
        if not self.held:
            return {}  # asked for every nominated pod in every attempt: a thousand, often
        facts = None
        best: Resources = {}
        for held in self.held.values():
            if held.node != node or held.used_up:
                continue
            if facts is None:
                facts = facts_of(pod.raw)
            if not is_owner(held.reservation, facts):
                continue
            remaining = held.remaining()
            covered = {r: min(v, remaining.get(r, 0)) for r, v in pod.requests.items()}
            if sum(covered.values()) > sum(best.values()):
                best = covered
        return best


def expiry_of(reservation: Reservation) -> datetime | None:
    try:
        return reservation.expiry_time()
    except ValueError:  # never created: nothing the watch brings
        return None


def granted(obj: dict[str, Any], template: PodInfo) -> Resources:
    """What a placed reservation holds: ``status.allocatable``, granted when it was placed.
    A later edit of its template does not resize it (the node was never checked for the
    new size); the scheduler says so on the reservation."""
    allocatable = (obj.get("status") or {}).get("allocatable")
    return resource_list(allocatable) if allocatable else dict(template.requests)


def resized(held: Held) -> bool:
    """Whether the template now asks for something else than the reservation holds."""
    return held.template.requests != held.allocatable


def is_reservation(pod: PodInfo) -> bool:
    """A reservation's stand-in (its template, or the capacity it holds on a node)."""
    return pod.reservation is not None
