"""Reservation: owner pods allocate from the reservations that match them.

PreFilter finds the reservations the pod may use (it is an owner, any reservation-affinity
matches, it tolerates the reservation's taints, the reservation is Available and still has
something to offer) and gives their capacity back to the pod on their nodes: ``Aligned``
adds what is left of the reservation to the node's free capacity; ``Restricted`` only
when the pod fits in what is left, for every resource the reservation holds. A pod with
reservation-affinity is limited to such nodes and never falls back to ordinary capacity.

One accounting rule for filter, score and Reserve: on each node, PreFilter picks the one
reservation the pod would use, Koordinator's way (the lowest non-zero
``reservation-order`` label first, then the one that ends up most allocated, a reservation
the pod overflows counting as empty), among those
the pod fits with (what is left of it plus the node's free capacity, or, Restricted, what
is left of it alone); that one's remainder is what the filter credits and what Reserve
charges. A pod that fits in none of them alone is not credited with their sum. In
preemption's dry runs (kube-scheduler's PreFilter extensions AddPod/RemovePod) an owner
taken off gives its share back to its reservation, which is then chosen again. Score is
Koordinator's: the node holding the lowest order first, then by how full the chosen
reservation would be; PreBind writes the
``reservation-allocated`` annotation, the truth of ownership for the operator and for a
restarted scheduler.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.base import format_time
from berth.api.duration import DurationError, format_duration, parse_duration
from berth.api.reservation import AllocatePolicy, ReservationPhase
from berth.api.reservation import Reservation as ReservationObject
from berth.kube.write import Conflict, api_message
from berth.podresources import Resources
from berth.quota.usage import as_resource_list
from berth.reservation.matching import (
    AffinityError,
    OwnerIndex,
    OwnerScreen,
    PodFacts,
    ReservationAffinity,
    affinity_of,
    exact_match_of,
    exactly_matches,
    is_owner,
    may_own,
    owner_keys,
    owner_screen,
    owners_text,
    tolerates,
)
from berth.reservation.owners import ALLOCATED_ANNOTATION
from berth.reservation.preemption import (
    DEFAULT_TTL,
    PREEMPTOR_LABEL,
    preemption_reservation,
    reservation_name,
    serves_again,
)
from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import HOLDING, Held, template_pod
from berth.scheduler.framework.capacity import padded, unreserved_free
from berth.scheduler.framework.clusterevents import (
    POD,
    RESERVATION,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    SUCCESS,
    Code,
    CycleState,
    Handle,
    Plugin,
    Status,
    unschedulable,
)
from berth.scheduler.placement import ReservationPlacement

logger = log.get(__name__)

NO_MATCH = "no Reservation matches the pod's reservation-affinity"
MAX_VERDICTS = 5
# Koordinator's score of the node holding the lowest-ordered reservation, before the
# scores are normalised to 0-100.
PREFERRED_SCORE = 10 * MAX_NODE_SCORE
# The decision record lists at most this many reservations per pod.
EXPLAINED_RESERVATIONS = 20
# ... and the reservations holding what the pod lacks on at most this many nodes.
EXPLAINED_NODES = 10


ORDER_LABEL = "scheduling.koordinator.sh/reservation-order"
# Story 1 of the design (off by default): a preemptor's freed capacity held by a
# Reservation owned by it, made before any victim is evicted; and that reservation's ttl.
RESERVE_FOR_PREEMPTORS = "reservePreemptedCapacity"
PREEMPTION_TTL = "preemptionReservationTTL"
# Koordinator's ReservationArgs: whether a Reservation may preempt (false, its default, is
# how Berth works).
ENABLE_PREEMPTION = "enablePreemption"


@dataclass
class Usable:
    """The reservation the pod would use on each row, and the one Reserve charged; the
    reservations it may use per row, and the owners a preemption dry run has taken off."""

    by_row: dict[int, Held]
    chosen: Held | None = None
    candidates: dict[int, list[Held]] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    # The pod ignores reservations: what they hold, given back or not, is free to it.
    ignoring: bool = False
    # The Reservation its preemption made, while it holds for it (``made_for``), as the
    # cycle's PreFilter found it.
    made: Held | None = None


def facts(pod: PodInfo) -> PodFacts:
    meta = pod.raw.get("metadata") or {}
    return PodFacts(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        labels=pod.labels,
        annotations=pod.annotations,
        owner_references=tuple(meta.get("ownerReferences") or ()),
        tolerations=pod.tolerations,
    )


def expired_at(held: Held, now: datetime) -> datetime | None:
    """Its expiry, once past: ended, though the operator (behind after a restart, say)
    has not written Failed yet; it takes no owner more."""
    return held.expiry if held.expiry is not None and now >= held.expiry else None


def held_back(
    pod: PodInfo,
    held: Held,
    affinity: ReservationAffinity | None,
    now: datetime,
    *,
    restricted_fit: bool = True,
) -> str:
    """Why the pod may not use this reservation, or "" (the checks of ``usable`` in order;
    without ``restricted_fit``, whether a Restricted one still has room is left out)."""
    reservation = held.reservation
    phase = reservation.status.phase if reservation.status else None
    if phase != ReservationPhase.AVAILABLE:
        return f"phase {phase}"
    if (expiry := expired_at(held, now)) is not None:
        return f"expired at {format_time(expiry)}, not marked Failed yet"
    if held.used_up and not held.promised_to(pod):
        return "allocateOnce and already allocated"
    if not is_owner(reservation, facts(pod)):
        return "not an owner"
    if affinity is not None and not affinity.matches(reservation):
        return "does not match the pod's reservation-affinity"
    if not tolerates(reservation, affinity.tolerations if affinity is not None else ()):
        return "untolerated taint (tolerate it in the reservation-affinity's tolerations)"
    try:
        exact = exact_match_of(pod.annotations)
    except AffinityError as err:
        return str(err)
    if exact and not exactly_matches(pod.requests, held.allocatable, exact):
        return f"exact-match-reservation on {', '.join(exact)}"
    if restricted_fit and not fits_restricted(held, pod.requests):
        return "Restricted and the pod does not fit in what is left"
    return ""


def fits_restricted(held: Held, requests: Resources, gone: Collection[str] = ()) -> bool:
    """An Aligned reservation, or a Restricted one the pod fits in (what is left of it)."""
    if held.reservation.spec.allocate_policy != AllocatePolicy.RESTRICTED:
        return True
    left = held.remaining(gone)
    return all(requests.get(r, 0) <= left[r] for r in left if requests.get(r, 0) > 0)


def order(held: Held) -> int:
    """The ``reservation-order`` label: lower non-zero values (negative ones too) are used
    first; 0 (or none, or not a number) after every ordered one."""
    text = (held.reservation.metadata.labels or {}).get(ORDER_LABEL, "")
    try:
        return int(text)
    except ValueError:
        return 0


def preference(held: Held, requests: Resources, gone: Collection[str]) -> tuple[bool, int, int]:
    """Sort key, best first: ordered before unordered, lower order, then the highest
    ``fullness`` (Koordinator's nomination on a node)."""
    rank = order(held)
    return (rank == 0, rank, -fullness(held, requests, gone))


def fullness(held: Held, requests: Resources, gone: Collection[str] = ()) -> int:
    """Koordinator's score of a reservation for a pod, 0-100: per resource it holds, how
    full it would be with the pod in it, 0 for a resource the pod overflows it on
    (MostAllocated, equal weights)."""
    left = held.remaining(gone)
    holds = {r: total for r, total in held.allocatable.items() if total > 0}
    if not holds:
        return 0
    score = 0
    for resource, total in holds.items():
        used = total - left.get(resource, 0) + requests.get(resource, 0)
        if used <= total:
            score += MAX_NODE_SCORE * used // total
    return score // len(holds)


class Reservation(Plugin):
    name = "Reservation"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.book = handle.reservations
        if args.get(ENABLE_PREEMPTION, False) is not False:
            raise ValueError(
                f"{ENABLE_PREEMPTION}: {json.dumps(args[ENABLE_PREEMPTION])} is not supported: "
                "a Reservation waits for room (or is pre-allocated) and never preempts; "
                "remove it or set false"
            )
        self.reserve_for_preemptors = bool(args.get(RESERVE_FOR_PREEMPTORS, False))
        try:
            ttl = args.get(PREEMPTION_TTL)
            self.preemption_ttl = parse_duration(str(ttl)) if ttl is not None else DEFAULT_TTL
        except DurationError as err:
            raise ValueError(f"{PREEMPTION_TTL}: {err}") from err
        if self.preemption_ttl <= timedelta(0):
            raise ValueError(f"{PREEMPTION_TTL} must be above 0s")
        self.placement = (
            ReservationPlacement(handle.view, handle.reservations, handle.writer)
            if handle.writer is not None
            else None
        )
        # The reservations holding nothing, typed once per version for the decision record:
        # validating each of them on every refused attempt cost a third of the scheduler's
        # time once hundreds had ended. The owner screens of all, once per version too:
        # matching the pod against every one's owners cost a tenth under churn.
        self._typed: dict[str, tuple[str, ReservationObject]] = {}
        self._screens: dict[str, tuple[str, OwnerScreen]] = {}
        self._index: tuple[int, OwnerIndex] | None = None

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (on(RESERVATION, ActionType.ALL), on(POD, ActionType.DELETE))

    def usable(
        self, pod: PodInfo, affinity: ReservationAffinity | None, *, restricted_fit: bool = True
    ) -> list[Held]:
        """The held reservations the pod may use; those its labels cannot own are passed
        over unasked (one in twenty nodes holding one, matching every owner cost the
        installed profile a millisecond a pod at 5000 nodes)."""
        index = self._owner_index(self.handle.view.custom.get(RESERVATION, {}))
        candidates = index.candidates(owner_keys(facts(pod)))
        now = self.handle.clock()
        return [
            h
            for h in self.book.held.values()
            if (h.uid in candidates or h.uid not in index.known)
            and not held_back(pod, h, affinity, now, restricted_fit=restricted_fit)
        ]

    # -- PreFilter / Score ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        if pod.reservation is not None:
            # A pre-allocated reservation is placed whatever its node's pods request: it
            # waits there (phase Waiting) until they leave room.
            state.ignore_requested = bool((pod.reservation.get("spec") or {}).get("preAllocation"))
            return SUCCESS
        if facts(pod).ignores_reservations:
            self._ignore_all(state, nodes)
            state.data[self.name] = Usable({}, ignoring=True)
            return SUCCESS
        try:
            affinity = affinity_of(pod.annotations)
            exact_match_of(pod.annotations)
        except AffinityError as err:
            return unschedulable(self.name, str(err), resolvable=False)
        # A Restricted one the pod does not fit in yet stays a candidate: a preemption dry
        # run may give it back an owner's share.
        candidates: dict[int, list[Held]] = {}
        fitting: set[int] = set()
        for held in self.usable(pod, affinity, restricted_fit=False):
            row = nodes.index.get(held.node)
            if row is not None:
                candidates.setdefault(row, []).append(held)
                if fits_restricted(held, pod.requests):
                    fitting.add(row)
        if affinity is not None and not fitting:
            return unschedulable(self.name, self._no_match(pod, affinity))
        usable = Usable({}, candidates=candidates, made=self.made_for(pod))
        unreserved = unreserved_free(state, nodes)
        for row in candidates:
            self._choose(state, pod, nodes, usable, row, unreserved[row])
        if affinity is not None:
            rows = np.zeros(nodes.size, dtype=bool)
            rows[list(fitting)] = True
            state.limit_nodes(rows, self.name)
        state.data[self.name] = usable
        if usable.made is not None:
            return self._through_made(state, pod, nodes, usable, usable.made)
        return SUCCESS

    def _through_made(
        self, state: CycleState, pod: PodInfo, nodes: NodeTable, usable: Usable, made: Held
    ) -> Status:
        """A preemptor whose own Reservation holds goes on that Reservation's node alone.
        Waiting, it waits, unless another Reservation it owns there takes it now: a victim
        that ran in such a Reservation gives its share back to it, not to the node, so the
        one made for the preemptor would wait for room the preemptor may already use (the
        churn left one Waiting until its node went, its pod refused the while)."""
        row = nodes.index.get(made.node)
        status = made.reservation.status
        if status is None or status.phase != ReservationPhase.AVAILABLE:
            here = usable.by_row.get(row) if row is not None else None
            if here is None or here.uid == made.uid:
                why = waits_for(made) + self._others_there(pod, usable, made, row)
                return unschedulable(self.name, why, resolvable=False)
        if row is not None:
            rows = np.zeros(nodes.size, dtype=bool)
            rows[row] = True
            state.limit_nodes(rows, self.name)
        return SUCCESS

    def _others_there(self, pod: PodInfo, usable: Usable, made: Held, row: int | None) -> str:
        """Why the pod's other Reservations on the made one's node do not take it now, for
        the refusal: a user reading that it waits can tell whether one of its own could."""
        candidates = usable.candidates.get(row, []) if row is not None else []
        now = self.handle.clock()
        pod_facts = facts(pod)
        notes = []
        for held in self.book.on(made.node):
            if held.uid == made.uid or not is_owner(held.reservation, pod_facts):
                continue
            left = ", ".join(f"{k} {v}" for k, v in as_resource_list(held.remaining()).items())
            why = held_back(pod, held, None, now) or (
                f"{left or 'nothing'} left in it is short beside the node's free room"
                if held in candidates
                else "not usable"
            )
            notes.append(f"{held.name}: {why}")
        if not notes:
            return ""
        return f" (its Reservations there: {'; '.join(sorted(notes)[:MAX_VERDICTS])})"

    def made_for(self, pod: PodInfo) -> Held | None:
        """The Reservation a preemption made for this pod, while it holds for it (Waiting
        or Available, not expired, not taken): the pod is placed through it alone. What
        was evicted for the pod is then the pod's, and the Reservation is not left holding
        it for nobody until its ttl, as it would be were the pod bound where other room
        appeared meanwhile (the design's Story 1: the preemptor is scheduled on the node
        with its preempted resources reserved)."""
        uid = self.book.by_name.get(reservation_name(pod.namespace, pod.name, pod.uid))
        held = self.book.held.get(uid) if uid is not None else None
        if held is None or (held.reservation.metadata.labels or {}).get(PREEMPTOR_LABEL) != pod.uid:
            return None
        if expired_at(held, self.handle.clock()) is not None:
            return None
        if held.used_up and not held.promised_to(pod):
            return None
        return held

    def _no_match(self, pod: PodInfo, affinity: ReservationAffinity) -> str:
        """NO_MATCH, with why each reservation was not usable (up to a few of them)."""
        now = self.handle.clock()
        verdicts = sorted(
            f"{held.name}: {held_back(pod, held, affinity, now)}"
            for held in self.book.held.values()
        )
        if not verdicts:
            return NO_MATCH
        shown = "; ".join(verdicts[:MAX_VERDICTS])
        more = f"; and {len(verdicts) - MAX_VERDICTS} more" if len(verdicts) > MAX_VERDICTS else ""
        return f"{NO_MATCH} ({shown}{more})"

    def _ignore_all(self, state: CycleState, nodes: NodeTable) -> None:
        """A pod labelled reservation-ignored schedules as if no reservation existed: what
        they hold is free to it (Koordinator's meaning), and it is nobody's owner."""
        released = np.zeros((nodes.size, len(nodes.columns)), dtype=np.int64)
        for held in self.book.held.values():
            row = nodes.index.get(held.node)
            if row is not None and held.counted is not None:
                released[row] += nodes.vector(held.counted.requests)[: released.shape[1]]
                released[row, nodes.columns["pods"]] += 1
        state.released = released

    def _choose(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeTable,
        usable: Usable,
        row: int,
        unreserved: Ints,
    ) -> None:
        """On one row, the first reservation by preference that the pod fits with (beside
        the row's ``unreserved`` free capacity), and what it gives back there (none when
        the pod fits with none). Through another of its own, what the Reservation made by
        its preemption holds on that node is the pod's too: PreBind deletes it. Counted
        against the pod, it kept a preemptor whose victim gave its share back to one of
        the pod's own Reservations out of both, the made one Waiting for that share."""
        need = nodes.vector(pod.requests)
        pods_column = nodes.columns["pods"]
        need[pods_column] = 1
        width = len(need)
        free = padded(unreserved[None, :], width)[0, :width]
        usable.by_row.pop(row, None)
        given = np.zeros(width, dtype=np.int64)
        made = usable.made
        spare = np.zeros(width, dtype=np.int64)
        if made is not None and made.counted is not None and nodes.index.get(made.node) == row:
            spare = padded(nodes.vector(made.counted.requests)[None, :], width)[0, :width]
            spare[pods_column] += 1
        for held in sorted(
            usable.candidates.get(row, ()), key=lambda h: preference(h, pod.requests, usable.gone)
        ):
            if not fits_restricted(held, pod.requests, usable.gone):
                continue
            offered = nodes.vector(held.remaining(usable.gone))[:width]
            offered[pods_column] += 1  # the slot the reservation keeps for it
            if made is not None and held.uid != made.uid:
                offered = offered + spare
            if bool(((free + offered) >= need)[need > 0].all()):
                usable.by_row[row] = held
                given = offered
                break
        if state.released is None:
            if not given.any():
                return
            state.released = np.zeros((nodes.size, width), dtype=np.int64)
        state.released = padded(state.released, width)
        state.released[row] = padded(given[None, :], state.released.shape[1])[0]

    # -- preemption's dry runs (kube-scheduler's PreFilterExtensions) -----------------------

    def remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        """An owner taken off gives its share back to its reservation: held from everyone
        else, and offered to the pod if it may use that reservation."""
        usable: Usable | None = state.data.get(self.name)
        if usable is None or usable.ignoring or not self._owns_here(other, row):
            return
        usable.gone.add(other.uid)
        self._given_back(state, pod, usable, row)

    def add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        usable: Usable | None = state.data.get(self.name)
        if usable is None or other.uid not in usable.gone:
            return
        usable.gone.discard(other.uid)
        self._given_back(state, pod, usable, row)

    def _owns_here(self, other: PodInfo, row: int) -> bool:
        node = self.handle.view.nodes.names[row]
        return any(other.uid in held.owners for held in self.book.on(node) if not held.used_up)

    def _given_back(self, state: CycleState, pod: PodInfo, usable: Usable, row: int) -> None:
        """The row's reservations as the dry run's owners leave them, and the pod's choice."""
        nodes = self.handle.view.nodes
        back = np.zeros(len(nodes.columns), dtype=np.int64)
        for held in self.book.on(nodes.names[row]):
            back += nodes.vector(held.remaining(usable.gone)) - nodes.vector(held.remaining())
        withheld = state.withheld
        if withheld is None:
            withheld = np.zeros((nodes.size, len(back)), dtype=np.int64)
        state.withheld = padded(withheld, len(back))
        state.withheld[row] = back
        self._choose(state, pod, nodes, usable, row, unreserved_free(state, nodes)[row])

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        """Koordinator's: the node holding the lowest-ordered reservation the pod may use
        scores most (10 times a full reservation), every other node the ``fullness`` of
        the reservation chosen there; normalised to 0-100."""
        usable: Usable | None = state.data.get(self.name)
        raw = np.zeros(len(rows), dtype=np.int64)
        if usable is None or not usable.candidates:
            return raw
        lowest, preferred = 0, -1
        for i, row in enumerate(rows.tolist()):
            ranks = [r for r in map(order, usable.candidates.get(row, ())) if r != 0]
            if ranks and (preferred < 0 or min(ranks) < lowest):
                lowest, preferred = min(ranks), i
            chosen = usable.by_row.get(row)
            if chosen is not None:
                raw[i] = fullness(chosen, pod.requests, usable.gone)
        if preferred >= 0:
            raw[preferred] = PREFERRED_SCORE
        top = int(raw.max()) if len(raw) else 0
        return raw * MAX_NODE_SCORE // top if top else raw

    # -- Reserve / PreBind ------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        usable: Usable | None = state.data.get(self.name)
        row = self.handle.view.nodes.index.get(node)
        if usable is None or row is None or row not in usable.by_row:
            return SUCCESS
        chosen = usable.by_row[row]  # the one the filter credited
        self.book.allocate(chosen, pod)
        usable.chosen = chosen
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        usable: Usable | None = state.data.get(self.name)
        if usable is not None and usable.chosen is not None:
            self.book.unallocate(usable.chosen, pod)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """The annotation that makes the pod its reservation's owner, written before the
        binding. A pod placed outside any reservation loses one left by an earlier attempt
        whose binding never happened (a scheduler stopped between the two): kept, it would
        make the pod an owner of a reservation it never used."""
        usable: Usable | None = state.data.get(self.name)
        chosen = usable.chosen if usable is not None else None
        made = self.made_for(pod)
        if made is not None and (chosen is None or chosen.uid != made.uid):
            # Placed through another Reservation of its own: the one made for it by its
            # preemption would hold for nobody until its ttl.
            assert self.handle.writer is not None
            try:
                await self.handle.writer.delete_reservation(made.name, made.uid)
            except Exception as err:  # its ttl ends it; the binding goes on
                logger.warning(
                    "reservation made for a preemptor not deleted",
                    namespace=pod.namespace,
                    name=pod.name,
                    reservation=made.name,
                    error=str(err),
                )
            else:
                _said(pod, made.name, made.node, "reservation made for a preemptor let go")
        if chosen is None and ALLOCATED_ANNOTATION not in pod.annotations:
            return SUCCESS
        writer = self.handle.writer
        assert writer is not None
        value = None if chosen is None else json.dumps({"name": chosen.name, "uid": chosen.uid})
        try:
            if chosen is not None and chosen.reservation.spec.allocate_once:
                # Recorded on the reservation first: should the pod be deleted before the
                # operator sees it bound, or this scheduler stop, nobody serves it twice.
                owner = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
                version = (chosen.raw.get("metadata") or {}).get("resourceVersion")
                await writer.reservation_status(
                    chosen.name, {"currentOwners": [owner]}, version, still=claimable_by(owner)
                )
            if chosen is not None and (
                chosen.uid not in self.book.held
                or expired_at(chosen, self.handle.clock()) is not None
            ):
                # Ended, expired or deleted while the binding waited its turn: not an
                # owner's now.
                return Status(
                    Code.ERROR, (f"reservation {chosen.name} ended since it was chosen",), self.name
                )
            await writer.annotate(pod, {ALLOCATED_ANNOTATION: value})
        except Exception as err:  # the binding must not go ahead without the annotation
            return Status(Code.ERROR, (f"reservation allocation not written: {err}",), self.name)
        return SUCCESS

    # -- the decision record ------------------------------------------------------------------

    def explain(self, state: CycleState, pod: PodInfo) -> dict[str, Any]:
        """Each reservation the pod could concern (it owns it or names it) and its verdict."""
        pod_facts = facts(pod)
        if pod.reservation is not None or pod_facts.ignores_reservations:
            return {"ignored": True}
        try:
            affinity = affinity_of(pod.annotations)
        except AffinityError as err:
            return {"error": str(err)}
        keys = owner_keys(pod_facts)
        listed = self.handle.view.custom.get(RESERVATION, {})
        index = self._owner_index(listed)
        candidates = index.candidates(keys)

        def concerns(reservation: ReservationObject, uid: str) -> bool:
            if affinity is not None and affinity.matches(reservation):
                return True
            if uid in index.known and uid not in candidates:
                return False
            screen = self._screen_once(reservation)
            return may_own(screen, keys) and is_owner(reservation, pod_facts)

        verdicts = []
        now = self.handle.clock()
        for held in self.book.held.values():
            if not concerns(held.reservation, held.uid):
                continue
            why = held_back(pod, held, affinity, now)
            verdicts.append(
                {
                    "name": held.name,
                    "node": held.node,
                    "usable": not why,
                    "reason": why or "usable",
                    "remaining": as_resource_list(held.remaining()),
                }
            )
        held_uids = {held.uid for held in self.book.held.values()}
        for obj in listed.values():
            uid = (obj.get("metadata") or {}).get("uid")
            if uid in held_uids or (affinity is None and uid not in candidates):
                continue
            reservation = self._typed_once(obj)
            if concerns(reservation, str(uid)):
                phase = reservation.phase.value if reservation.phase else "unset"
                verdicts.append(
                    {
                        "name": reservation.metadata.name,
                        "node": "",
                        "usable": False,
                        "reason": f"phase {phase}: not holding capacity on a node",
                        "remaining": {},
                    }
                )
        if len(self._typed) + len(self._screens) > 4 * len(listed):
            uids = {(obj.get("metadata") or {}).get("uid") for obj in listed.values()}
            self._typed = {uid: typed for uid, typed in self._typed.items() if uid in uids}
            self._screens = {uid: s for uid, s in self._screens.items() if uid in uids}
        verdicts.sort(key=lambda v: (not v["usable"], str(v["name"])))
        return {
            "affinity": None
            if affinity is None
            else {"name": affinity.name, "selector": dict(affinity.selector)},
            "reservations": verdicts[:EXPLAINED_RESERVATIONS],
            "considered": len(verdicts),
            "holding": self._holding(state, pod),
        }

    def _holding(self, state: CycleState, pod: PodInfo) -> list[dict[str, Any]]:
        """Per node where the pod lacks a resource that reservations it does not use hold:
        the node's free capacity after them, and those reservations with their owners
        (``kubectl describe node`` shows no pod holding that room)."""
        usable: Usable | None = state.data.get(self.name)
        nodes = self.handle.view.nodes
        by_node: dict[str, list[Held]] = {}
        for held in self.book.held.values():
            by_node.setdefault(held.node, []).append(held)
        found = []
        for node, helds in sorted(by_node.items()):
            row = nodes.index.get(node)
            if row is None:
                continue
            mine = usable.by_row.get(row) if usable is not None else None
            given = mine.remaining(usable.gone) if mine is not None and usable else {}
            free = {
                r: int(nodes.allocatable[row, col] - nodes.requested[row, col])
                for r, col in nodes.columns.items()
            }
            lacking = {r for r, v in pod.requests.items() if v > free.get(r, 0) + given.get(r, 0)}
            others = [
                h
                for h in helds
                if h is not mine and any(h.remaining().get(r, 0) > 0 for r in lacking)
            ]
            if not others:
                continue
            found.append(
                {
                    "node": node,
                    "free": as_resource_list({r: max(free.get(r, 0), 0) for r in sorted(lacking)}),
                    "reservations": [
                        {
                            "name": h.name,
                            "holds": as_resource_list(h.remaining()),
                            "owners": owners_text(h.reservation),
                        }
                        for h in sorted(others, key=lambda h: h.name)
                    ],
                }
            )
            if len(found) >= EXPLAINED_NODES:
                break
        return found

    def _owner_index(self, listed: dict[str, dict[str, Any]]) -> OwnerIndex:
        """The listed reservations by the labels their owners demand, once per version of
        the list: screening every reservation on each refused attempt cost a tenth of
        the scheduler's time under churn with hundreds of them."""
        version = self.handle.view.custom_versions.get(RESERVATION, 0)
        if self._index is None or self._index[0] != version:
            screens = []
            for obj in listed.values():
                uid = str((obj.get("metadata") or {}).get("uid", ""))
                screens.append((uid, self._screen_once(self._typed_once(obj))))
            self._index = (version, OwnerIndex(screens))
        return self._index[1]

    def _screen_once(self, reservation: ReservationObject) -> OwnerScreen:
        meta = reservation.metadata
        uid, version = str(meta.uid or ""), str(meta.resource_version or "")
        screen = self._screens.get(uid)
        if screen is None or screen[0] != version:
            screen = self._screens[uid] = (version, owner_screen(reservation))
        return screen[1]

    def _typed_once(self, obj: dict[str, Any]) -> ReservationObject:
        meta = obj.get("metadata") or {}
        uid, version = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        typed = self._typed.get(uid)
        if typed is None or typed[0] != version:
            typed = self._typed[uid] = (version, ReservationObject.model_validate(obj))
        return typed[1]

    # -- before eviction (Story 1) -----------------------------------------------------------

    async def before_eviction(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """With ``reservePreemptedCapacity``, hold what the victims free for the preemptor in
        a Reservation of its own, placed (Waiting) before any victim is evicted."""
        if not self.reserve_for_preemptors or pod.reservation is not None:
            return SUCCESS
        writer = self.handle.writer
        assert writer is not None
        assert self.placement is not None
        body = preemption_reservation(
            namespace=pod.namespace,
            name=pod.name,
            uid=pod.uid,
            requests=pod.requests,
            priority=pod.priority,
            scheduler_name=pod.scheduler_name,
            node=node,
            ttl=self.preemption_ttl,
        )
        name = body["metadata"]["name"]
        try:
            created = await self._made_for(body, node)
        except ApiException as err:
            message = f"reservation for the preemptor not created: {api_message(err)}"
            return Status(Code.ERROR, (message,), self.name)
        if created is None:
            _said(pod, name, node, "a preemptor's reservation serves again")
            return SUCCESS
        template = template_pod(created, self.handle.view.priority_classes)
        if not await self.placement.placed(template, node, pre_allocated=True):
            # Never left Pending and unplaced for its ttl: the next attempt makes another.
            await writer.delete_reservation(name, template.uid)
            return Status(Code.ERROR, ("reservation for the preemptor not placed",), self.name)
        writer.event(
            pod.raw,
            "Pod",
            "ReservedForPreemption",
            f"Reservation {name} holds on node {node} what the preemption frees, for this pod",
        )
        writer.event(
            created,
            "Reservation",
            "CreatedForPreemptor",
            f"holds what preempting frees on node {node} for pod {pod.key}; "
            f"it expires after {format_duration(self.preemption_ttl)} if the pod does not come",
            api_version=created.get("apiVersion", ""),
        )
        _said(pod, name, node, "reservation made for a preemptor")
        return SUCCESS

    async def _made_for(self, body: dict[str, Any], node: str) -> dict[str, Any] | None:
        """The preemptor's Reservation as created; when an earlier preemption of the pod
        made one, None if that one serves again as it is, else the one made in its place."""
        writer = self.handle.writer
        assert writer is not None
        try:
            return await writer.create_reservation(body)
        except Conflict:
            pass
        name = body["metadata"]["name"]
        existing = await writer.read_reservation(name)
        if existing is not None:
            if serves_again(existing, node):
                return None
            await writer.delete_reservation(name, str(existing["metadata"].get("uid", "")))
        return await writer.create_reservation(body)


def waits_for(held: Held) -> str:
    """Why a preemptor waits while room may be free elsewhere."""
    return (
        f"waits for Reservation {held.name}, made for it by its preemption, to become "
        f"Available on node {held.node} once the pods preempted there have left"
    )


def _said(pod: PodInfo, reservation: str, node: str, what: str) -> None:
    logger.info(what, namespace=pod.namespace, name=pod.name, reservation=reservation, node=node)


def unclaimed(reservation: dict[str, Any]) -> bool:
    """An allocateOnce reservation may still take an owner: it holds capacity and records
    none (a version the book had not seen yet, changed only by the operator's writes)."""
    status = reservation.get("status") or {}
    return status.get("phase") in {str(p) for p in HOLDING} and not status.get("currentOwners")


def claimable_by(owner: dict[str, str]) -> Callable[[dict[str, Any]], bool]:
    """``unclaimed``, or claimed by this very pod already (recorded by an attempt whose
    binding never happened)."""

    def still(reservation: dict[str, Any]) -> bool:
        status = reservation.get("status") or {}
        recorded = status.get("currentOwners") or []
        mine = len(recorded) == 1 and recorded[0].get("uid") == owner["uid"]
        return unclaimed(reservation) or (mine and status.get("phase") in {str(p) for p in HOLDING})

    return still
