"""A gang's preemption: when the group cycle cannot place a gang, its members are placed
again on the same snapshot, and a member that fits nowhere takes victims as a single pod
would (each preempting plugin's ``VictimPolicy`` through the shared evaluator: lower
priority, disruption budgets, quota rules, reserved capacity), the victims' gangs taken
whole. The victims leave the snapshot as they are chosen, so the members after see the
room. The gang preempts only if its quorum is placed that way; the simulation is then
taken back whole, the members nominated to their nodes, and out of the cycle
(``carry_out``): a Reservation per member when the Reservation plugin holds preempted
capacity, then the evictions, then the nominations written. When the victims are gone
the group cycle places the gang whole, each member on its nominated node first.

The choices themselves (which option, whole gangs, the messages) are ``berth.gang.preemption``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol, runtime_checkable

from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.gang.group import Gang
from berth.gang.placement import Placed, Refused, place_all_or_nothing
from berth.gang.preemption import (
    Option,
    Victim,
    choose,
    evicted_for,
    not_enough,
    preempting,
    still_leaving,
    whole_gangs,
)
from berth.kube.write import NotFound, api_message
from berth.scheduler.cache.nodetable import Ints
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import is_reservation
from berth.scheduler.cycle import Cycle
from berth.scheduler.framework.interface import CycleState, Diagnosis, GroupMembers
from berth.scheduler.framework.messages import FitError, histogram_text
from berth.scheduler.framework.preemption import Evaluator, VictimPolicy, start_time
from berth.scheduler.framework.runtime import Framework

logger = log.get(__name__)

NOT_LOWER = "a gang preempts only pods of lower priority than its members"


@runtime_checkable
class Preempting(Protocol):
    """A PostFilter plugin that preempts through the shared evaluator."""

    evaluator: Evaluator

    def victim_policy(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[Ints, VictimPolicy, str] | str: ...


@dataclass(frozen=True)
class Eviction:
    """One victim, the member it makes room for (on ``node``), and the rule that took it."""

    pod: PodInfo
    fact: Victim
    member: PodInfo
    node: str
    evaluator: Evaluator
    policy: VictimPolicy
    message: str


@dataclass(frozen=True)
class GangPreemption:
    """The decision: where each member placed goes, and every pod evicted for them."""

    gang: Gang
    nominated: tuple[tuple[PodInfo, str], ...]
    evictions: tuple[Eviction, ...]
    message: str


def plan(cycle: Cycle, members: GroupMembers, needed: int) -> GangPreemption | str:
    """The gang's preemption, or why it does not preempt (a message its members show)."""
    fwk = cycle.framework
    view = fwk.view
    gang = members.gang
    never = next(
        (
            m
            for m in members.pending
            if (m.raw.get("spec") or {}).get("preemptionPolicy") == "Never"
        ),
        None,
    )
    if never is not None:
        return f"preemption: not eligible due to preemptionPolicy=Never ({never.key})"
    leaving = [
        view.pods[uid].key
        for uid in cycle.preempting.get(gang.key, ())
        if uid in view.pods and not view.pods[uid].terminal
    ] or _terminating_where_nominated(fwk, members)
    if leaving:
        return still_leaving(gang.title, leaving)
    cycle.preempting.pop(gang.key, None)
    preemptors = [p for p in fwk.post_filter if isinstance(p, Preempting)]
    if not preemptors:
        return "preemption: no plugin of the profile preempts"
    held = {m.uid: view.nominated[m.uid] for m in members.pending if m.uid in view.nominated}
    search = _Search(cycle, preemptors)
    try:
        result = place_all_or_nothing(members.pending, needed, search.place, search.undo)
        placed = list(result.placed)
        evictions = tuple(search.chosen)
        if result.committed:
            for each in reversed(placed):
                search.undo(each)
    finally:
        view.nominated.update(held)  # assume drops a nomination: the dry run keeps them
    if not result.committed:
        first = result.refused[0] if result.refused else None
        why = f"{first.member.key}: {first.reason}" if first is not None else ""
        return not_enough(gang.title, len(placed), needed, why)
    if not evictions:
        return ""  # it fits as it is now: the next attempt places it
    nominated = tuple((p.member, p.node) for p in placed)
    message = preempting(
        gang.title, [e.fact for e in evictions], {m.key: node for m, node in nominated}
    )
    return GangPreemption(gang, nominated, evictions, message)


def _terminating_where_nominated(fwk: Framework, members: GroupMembers) -> list[str]:
    """Pods being preempted on the members' nominated nodes, of lower priority than the
    member: what an earlier preemption of the gang may still be freeing (kube-scheduler's
    eligibility rule; it holds after a restart, when the scheduler's own note is gone)."""
    view = fwk.view
    found: list[str] = []
    for member in members.pending:
        held = view.nominated.get(member.uid)
        node = held[0] if held is not None else member.nominated_node
        for other in view.pods_on(node) if node else ():
            if other.preempted and other.priority < member.priority and other.key not in found:
                found.append(other.key)
    return found


class _Search:
    """The members placed one after another on the view, victims taken off as chosen."""

    def __init__(self, cycle: Cycle, preemptors: Sequence[Preempting]) -> None:
        self.cycle = cycle
        self.fwk = cycle.framework
        self.view = self.fwk.view
        self.preemptors = preemptors
        self.states: dict[str, CycleState] = {}
        self.removed: dict[str, list[Eviction]] = {}
        self.chosen: list[Eviction] = []

    def place(self, member: PodInfo) -> str | Refused[PodInfo]:
        """Where the member goes, its victims (if any) taken off the view; or why nowhere.
        A failure refuses the member (``place_all_or_nothing`` then takes the others back)."""
        try:
            return self._place(member)
        except Exception:
            logger.exception(
                "member's preemption attempt failed", namespace=member.namespace, name=member.name
            )
            if member.uid in self.states:
                self.fwk.run_unreserve(
                    self.states.pop(member.uid), member, self.view.assumed[member.uid]
                )
            self.view.forget(member)
            self._put_back(member)
            return Refused(member, "the scheduler failed")

    def _place(self, member: PodInfo) -> str | Refused[PodInfo]:
        state = CycleState()
        try:
            node = self.cycle.schedule(state, member).node
        except FitError as fit:
            found = self._preempt_for(state, member, fit.diagnosis)
            if isinstance(found, str):
                return Refused(member, found)
            self._take_off(member, found)
            state = CycleState()
            try:
                node = self.cycle.schedule(state, member).node
            except FitError as still:
                self._put_back(member)
                return Refused(member, str(still))
        self.view.assume(member, node)
        status = self.fwk.run_reserve(state, member, node)
        if not status.ok:
            self.view.forget(member)
            self._put_back(member)
            return Refused(member, status.message)
        self.states[member.uid] = state
        return node

    def undo(self, placed: Placed[PodInfo]) -> None:
        member = placed.member
        self.fwk.run_unreserve(self.states.pop(member.uid), member, placed.node)
        self.view.forget(member)
        self._put_back(member)

    def _take_off(self, member: PodInfo, evictions: list[Eviction]) -> None:
        nodes = self.view.nodes
        for eviction in evictions:
            nodes.remove_pod(nodes.index[eviction.fact.node], eviction.pod)
        self.removed[member.uid] = evictions
        self.chosen.extend(evictions)

    def _put_back(self, member: PodInfo) -> None:
        nodes = self.view.nodes
        for eviction in self.removed.pop(member.uid, []):
            nodes.add_pod(nodes.index[eviction.fact.node], eviction.pod)
            self.chosen.remove(eviction)

    def _preempt_for(
        self, state: CycleState, member: PodInfo, diagnosis: Diagnosis
    ) -> list[Eviction] | str:
        """The victims that make room for one member, by the first plugin that finds some."""
        reasons: list[str] = []
        for plugin in self.preemptors:
            got = plugin.victim_policy(state, member, diagnosis)
            if isinstance(got, str):
                reasons.extend([got] if got else [])
                continue
            rows, policy, message = got
            evaluator = plugin.evaluator
            candidates, histogram = evaluator.find_candidates(
                state, member, rows, diagnosis.nodes, policy
            )
            taken = {e.fact.uid for e in self.chosen}
            rule = _Rule(self.fwk, member, policy)
            options: list[Option] = []
            for candidate in candidates:
                facts = [rule.fact(v) for v in candidate.victims]
                if any(v.priority >= member.priority for v in facts):
                    histogram[NOT_LOWER] += 1  # a quota's reclaim: a gang takes only lower
                    continue
                whole = whole_gangs(facts, rule.running(candidate.victims), rule.evictable)
                if isinstance(whole, str):
                    histogram[whole] += 1
                    continue
                fresh = tuple(v for v in whole if v.uid not in taken)
                options.append(Option(candidate.node, fresh))
            violations = partial(self._violations, evaluator)
            best = choose(options, [e.fact for e in self.chosen], violations)
            if best is None:
                text = histogram_text(histogram)
                reasons.append(f"preemption: 0/{diagnosis.nodes} nodes are available: {text}.")
                continue
            return [
                Eviction(rule.pods[v.uid], v, member, best.node, evaluator, policy, message)
                for v in best.victims
            ]
        return reasons[0] if reasons else "preemption: no plugin could preempt for it"

    def _violations(self, evaluator: Evaluator, victims: Sequence[Victim]) -> int:
        """How many of the victims their disruption budgets do not allow to go."""
        pods = [self.view.pods[v.uid] for v in victims if v.uid in self.view.pods]
        return len(evaluator.split_by_pdb(pods)[0])


class _Rule:
    """One member's view of the victims: their facts, their gangs, and which may go."""

    def __init__(self, fwk: Framework, member: PodInfo, policy: VictimPolicy) -> None:
        self.fwk = fwk
        self.view = fwk.view
        self.member = member
        self.policy = policy
        self.pods: dict[str, PodInfo] = {}
        self.gang_of: dict[str, str] = {}
        self._allowed: dict[int, set[str]] = {}

    def fact(self, pod: PodInfo) -> Victim:
        self.pods[pod.uid] = pod
        node = pod.node_name or self.view.assumed.get(pod.uid, "")
        gang = self.gang_of.get(pod.uid)
        if gang is None and self.fwk.group is not None:
            found = self.fwk.group.running_gang(pod)
            gang = found[0] if found is not None else None
        return Victim(pod.uid, pod.key, node, pod.priority, start_time(pod), gang)

    def running(self, victims: Sequence[PodInfo]) -> dict[str, list[Victim]]:
        """The running members of each victim's gang."""
        group = self.fwk.group
        found: dict[str, list[Victim]] = {}
        for victim in victims if group is not None else ():
            assert group is not None
            gang = group.running_gang(victim)
            if gang is None or gang[0] in found:
                continue
            name, members = gang
            for member in members:
                self.gang_of[member.uid] = name
            found[name] = [self.fact(m) for m in members]
        return found

    def evictable(self, victim: Victim) -> bool:
        """The member's own rule for one pod of a victim's gang, wherever it runs."""
        pod = self.pods[victim.uid]
        if pod.uid in self.view.assumed or is_reservation(pod):
            return False
        if pod.priority >= self.member.priority:
            return False
        if self.fwk.handle.reservations.shields(pod, self.member):
            return False
        row = self.view.nodes.index.get(victim.node)
        if row is None:
            return False
        if row not in self._allowed:
            allowed = self.policy.potential_victims(self.member, row)
            self._allowed[row] = {p.uid for p in allowed}
        return pod.uid in self._allowed[row]


async def carry_out(fwk: Framework, cycle: Cycle, decided: GangPreemption) -> None:
    """The room held first (a Reservation per member, when the Reservation plugin makes
    them), then every victim evicted, then the members' nominations written."""
    writer = fwk.handle.writer
    assert writer is not None
    gang = decided.gang
    for member, node in decided.nominated:
        status = await fwk.run_before_eviction(CycleState(), member, node)
        if not status.ok:
            _give_up(fwk, cycle, decided, f"preemption: {status.message}; nothing is evicted")
            return
    try:
        for eviction in decided.evictions:
            await _evict(eviction, gang)
        evaluator = decided.evictions[0].evaluator
        for member, node in decided.nominated:
            await evaluator.release_lower(member, node)
            await evaluator.write_nomination(member, node)
    except Exception as err:
        logger.exception("gang preemption failed", namespace=gang.namespace, name=gang.name)
        _give_up(fwk, cycle, decided, f"preemption: {_said(err)}")


async def _evict(eviction: Eviction, gang: Gang) -> None:
    victim, member = eviction.pod, eviction.member
    writer = eviction.evaluator.handle.writer
    assert writer is not None
    if not victim.deleting:
        try:
            await eviction.evaluator.evict(victim, eviction.message)
        except NotFound:
            eviction.policy.evicted(victim)  # gone since the decision: its room is free
            return
        writer.event(
            victim.raw,
            "Pod",
            "Preempted",
            evicted_for(gang.title, member.key, member.uid, eviction.node, eviction.fact),
        )
    eviction.policy.evicted(victim)
    logger.info(
        "preempted",
        namespace=victim.namespace,
        name=victim.name,
        priority=victim.priority,
        preemptor=gang.title,
        member=member.key,
        preemptor_priority=member.priority,
        node=eviction.fact.node,
        why=eviction.policy.why(victim),
    )


def _give_up(fwk: Framework, cycle: Cycle, decided: GangPreemption, message: str) -> None:
    """The preemption could not be carried out: the members hold nothing and say why; the
    next attempt decides again."""
    writer = fwk.handle.writer
    assert writer is not None
    cycle.preempting.pop(decided.gang.key, None)
    for member, _ in decided.nominated:
        fwk.view.nominated.pop(member.uid, None)
        writer.event(member.raw, "Pod", "FailedScheduling", message, warning=True)
    logger.warning(
        "gang preemption given up",
        namespace=decided.gang.namespace,
        name=decided.gang.name,
        reason=message,
    )


def _said(err: Exception) -> str:
    return api_message(err) if isinstance(err, ApiException) else str(err)
