"""The group cycle: a gang's members decided together on one snapshot of the cluster, as
kube-scheduler 1.36's PodGroup cycle and Volcano's session do.

When a member comes up, its gang's other queued members are taken with it. The gang is
tried only when its quorum exists, it is not backed off, and its whole demand passes the
quota plugins once. Then each member runs the ordinary cycle (PreFilter, Filter, Score,
Reserve) on the same view, seeing the members placed before it; the placement stands
only if enough members fit to reach minMember, and Permit has the last word on each.
Otherwise every member placed is unreserved and forgotten, so a gang that waits holds
neither capacity nor quota. Synchronous, as the single-pod cycle: the view cannot change
under the decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from berth import log
from berth.api.podgroup import CRD
from berth.gang.group import (
    Gang,
    Wait,
    WaitReason,
    demand,
    quota_wait,
    still_needed,
)
from berth.gang.hold import GangHold
from berth.gang.placement import GangPlacement, Placed, Refused, place_all_or_nothing
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cycle import Cycle
from berth.scheduler.framework.interface import CycleState, GroupMembers, GroupPlugin
from berth.scheduler.framework.messages import FitError
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.gangpreemption import GangPreemption, plan
from berth.scheduler.queue.scheduling_queue import SchedulingQueue

POD_GROUP = CRD.kind
POD_GROUP_API = CRD.api_version

logger = log.get(__name__)


@dataclass(frozen=True)
class MemberPlacement:
    pod: PodInfo
    state: CycleState
    node: str


@dataclass
class GroupOutcome:
    """A gang's attempt: the members placed (to bind), and each other member with why it
    waits; ``rejected_by`` are the plugins whose cluster events may change the answer."""

    placed: list[MemberPlacement] = field(default_factory=list)
    waiting: list[tuple[PodInfo, str]] = field(default_factory=list)
    rejected_by: frozenset[str] = frozenset()
    wait: Wait | None = None
    gang: Gang | None = None
    unassigned: float = 0.0
    """Of the gang that could not be placed, the share of its minimum that did not fit."""
    preemption: GangPreemption | None = None
    # Its preemption decided now or earlier, the victims leaving: no backoff meanwhile.
    preempting: bool = False


def schedule_group(
    cycle: Cycle, queue: SchedulingQueue, pod: PodInfo, now: float
) -> GroupOutcome | None:
    """The attempt for the pod's gang; None for a pod of no gang (the single-pod cycle)."""
    fwk = cycle.framework
    group = fwk.group
    found = group.group_of(pod) if group is not None else None
    if group is None or found is None:
        return None
    plugin = getattr(group, "name", "")
    if isinstance(found, Wait):
        return GroupOutcome(
            waiting=[(pod, found.message)], rejected_by=frozenset({plugin}), wait=found
        )
    if all(m.uid != pod.uid for m in found.pending):
        return None  # not waiting as a member (being deleted): the single-pod cycle says so
    members = _taken(found, pod, queue, fwk)
    members = replace(members, others=tuple(_taken(o, None, queue, fwk) for o in found.others))
    try:
        return _decide(cycle, group, members, pod, plugin, now)
    except Exception:
        # Every member taken must leave the attempt; with no plugin named, any cluster
        # event brings them back.
        logger.exception("gang attempt failed", namespace=pod.namespace, name=found.gang.name)
        failed = [(m, f"{found.gang.title}: the scheduler failed") for m in members.pending]
        return GroupOutcome(waiting=failed, gang=found.gang)


def _decide(
    cycle: Cycle,
    group: GroupPlugin,
    members: GroupMembers,
    pod: PodInfo,
    plugin: str,
    now: float,
) -> GroupOutcome:
    fwk = cycle.framework
    gang = members.gang
    outcome = GroupOutcome(gang=gang, rejected_by=frozenset({plugin}))
    gangs = [members, *members.others]
    wait = None
    for each in gangs:
        wait = group.before_placing(each, now)
        speaker = pod if each is members else next(iter(each.pending), None)
        if wait is None and speaker is not None:
            asked = demand(
                each.gang, [m.requests for m in each.pending], [m.requests for m in each.bound]
            )
            pending = frozenset(m.uid for m in each.pending)
            refusal = fwk.run_admit_group(speaker, asked, pending)
            if not refusal.ok:
                wait = quota_wait(each.gang, refusal.message)
                outcome.rejected_by |= {refusal.plugin}
        if wait is not None:
            if each is not members:
                wait = replace(wait, message=f"{gang.title}'s gang group: {wait.message}")
            break
    if wait is None:
        wait = _place(cycle, gangs, outcome, now)
        if wait is not None and wait.reason == WaitReason.NO_PLACEMENT:
            wait = _preempt(cycle, gangs, outcome, wait)
        # A gang that preempted is not backed off: it is placed once its victims are gone.
        for each in gangs:
            placed = wait is None or outcome.preempting
            group.group_done(each, placed, outcome.unassigned, now)
    if wait is not None:
        outcome.wait = wait
        outcome.waiting = [(m, wait.message) for each in gangs for m in each.pending]
    return outcome


def _preempt(cycle: Cycle, gangs: list[GroupMembers], outcome: GroupOutcome, wait: Wait) -> Wait:
    """A gang that fits nowhere as the cluster is may make room by preemption: decided here
    (the members nominated, its victims noted so it does not preempt again meanwhile),
    carried out after the cycle; the members' message says which victims, or why none."""
    if len(gangs) > 1:
        return replace(wait, message=f"{wait.message}; preemption: a gang group does not preempt")
    members = gangs[0]
    decided = plan(cycle, members, still_needed(members.gang, len(members.bound)))
    outcome.preempting = members.gang.key in cycle.preempting
    if isinstance(decided, str):
        return replace(wait, message=f"{wait.message}; {decided}") if decided else wait
    outcome.preemption = decided
    for member, node in decided.nominated:
        cycle.framework.view.nominate(member, node)
    cycle.preempting[members.gang.key] = frozenset(e.fact.uid for e in decided.evictions)
    outcome.preempting = True
    return replace(wait, message=f"{wait.message}; {decided.message}")


def _taken(
    found: GroupMembers, pod: PodInfo | None, queue: SchedulingQueue, fwk: Framework
) -> GroupMembers:
    """The gang with only the pending members this attempt holds: the pod itself (when it
    is of this gang) and its queued siblings (a gated member neither counts nor is placed,
    as upstream)."""
    pending: list[PodInfo] = []
    gated = 0
    for member in found.pending:
        if pod is not None and member.uid == pod.uid:
            pending.append(member)
        elif not fwk.run_pre_enqueue(member).ok:
            gated += 1
        elif queue.take(member.uid):
            pending.append(member)
    return replace(found, pending=tuple(pending), gated=gated)


def _place(
    cycle: Cycle, gangs: list[GroupMembers], outcome: GroupOutcome, now: float
) -> Wait | None:
    """All or nothing on the view as it is, gang after gang of a gang group: the wait when
    one cannot be placed (then none is)."""
    fwk = cycle.framework
    view = fwk.view
    states: dict[str, CycleState] = {}
    plugins: set[str] = set()
    # A preemptor's nomination, dropped by assume, comes back when its gang is taken back.
    held = {
        m.uid: view.nominated[m.uid] for g in gangs for m in g.pending if m.uid in view.nominated
    }

    def place(member: PodInfo) -> str | Refused[PodInfo]:
        state = CycleState()
        try:
            node = cycle.schedule(state, member).node
        except FitError as fit:
            plugins.update(fit.diagnosis.plugins)
            return Refused(member, str(fit))
        except Exception:
            logger.exception(
                "member's attempt failed", namespace=member.namespace, name=member.name
            )
            return Refused(member, "the scheduler failed")
        view.assume(member, node)
        status = fwk.run_reserve(state, member, node)
        if not status.ok:
            view.forget(member)
            plugins.add(status.plugin)
            return Refused(member, status.message)
        states[member.uid] = state
        return node

    def undo(placed: Placed[PodInfo]) -> None:
        fwk.run_unreserve(states[placed.member.uid], placed.member, placed.node)
        view.forget(placed.member)
        if placed.member.uid in held:
            view.nominated[placed.member.uid] = held[placed.member.uid]

    def undo_all(done: list[GangPlacement[PodInfo]]) -> None:
        for result in reversed(done):
            for each in reversed(result.placed):
                undo(each)

    done: list[GangPlacement[PodInfo]] = []
    for members in gangs:
        needed = still_needed(members.gang, len(members.bound))
        result = place_all_or_nothing(members.pending, needed, place, undo)
        if not result.committed:
            undo_all(done)
            outcome.rejected_by |= plugins
            minimum = members.gang.min_member
            outcome.unassigned = (minimum - len(members.bound) - len(result.placed)) / minimum
            wait = result.wait(members.gang, lambda m: m.key)
            if members is not gangs[0]:
                first = gangs[0].gang.title
                wait = replace(wait, message=f"{first}'s gang group: {wait.message}")
            return wait
        done.append(result)
    outcome.rejected_by |= plugins
    for result, members in zip(done, gangs, strict=True):
        gang = members.gang
        hold = GangHold(gang.key, now + (gang.wait_seconds or 0.0), gang.strict)
        for placed in result.placed:
            states[placed.member.uid].group = (len(result.placed), result.needed)
            states[placed.member.uid].hold = hold
    for result, members in zip(done, gangs, strict=True):
        for placed in result.placed:
            status = fwk.run_permit(states[placed.member.uid], placed.member, placed.node)
            if not status.ok:
                undo_all(done)
                outcome.rejected_by |= {status.plugin}
                outcome.unassigned = 1.0
                return Wait(
                    WaitReason.NO_PLACEMENT,
                    f"{members.gang.title} was refused at Permit: {placed.member.key}: "
                    f"{status.message}",
                )
    outcome.placed = [
        MemberPlacement(p.member, states[p.member.uid], p.node)
        for result in done
        for p in result.placed
    ]
    outcome.waiting = [(r.member, r.reason) for result in done for r in result.refused]
    return None
