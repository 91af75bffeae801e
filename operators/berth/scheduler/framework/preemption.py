"""Preemption: find the node where evicting the fewest, least important pods makes room.

The evaluator is kube-scheduler's (pkg/scheduler/framework/preemption) and serves every
plugin that preempts; a plugin brings its ``VictimPolicy``: which pods on a node it may
evict, and what besides the node's filters must hold once they are gone (a quota, say).

The rules: only nodes where evicting pods could help are candidates; on each, remove
every potential victim, check the pod fits, then give back (reprieve) as many as
possible, most important first and pods whose PodDisruptionBudget has no disruptions left
before the others (a policy may order the reprieve otherwise: tree reclaim gives back its
nearest-quota, terminating, low-priority, young pods last). The node chosen has the fewest
PDB violations, then the lowest highest-priority victim, the lowest sum of priorities, the
fewest victims, the most recently started victims. DefaultPreemption deletes its victims,
as kube-scheduler does; a quota's preemption evicts them through the Eviction API, and
deletes a victim whose budget is exhausted (only chosen when every candidate violates a
budget). The pod is nominated to the node, which holds the freed capacity.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.meta import LabelSelector
from berth.gang.preemption import rank
from berth.kube.write import Conflict, NotFound
from berth.scheduler.cache.nodetable import Ints
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import is_reservation
from berth.scheduler.framework.interface import (
    CycleState,
    Diagnosis,
    Handle,
    PostFilterResult,
    unschedulable,
)
from berth.scheduler.framework.messages import histogram_text

logger = log.get(__name__)

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
# Berth's: every pod that could have gone holds reserved capacity the preemptor may not use.
RESERVED = (
    "No preemption victims found for incoming pod: what could be freed is reserved for others"
)


class VictimPolicy(Protocol):
    def potential_victims(self, pod: PodInfo, row: int) -> list[PodInfo]:
        """Pods on the node at ``row`` the preemptor may evict."""
        ...

    def blocking(self, pod: PodInfo, victims: Sequence[PodInfo]) -> tuple[str, ...]:
        """Why the pod still could not run with ``victims`` gone (beyond node fit), or ().
        Monotone: if it refuses with some victims gone, it refuses with fewer of them."""
        ...

    def reprieve_order(self, pod: PodInfo, victims: Sequence[PodInfo]) -> list[PodInfo]:
        """The order in which removed pods are given back, the most protected first
        (kube-scheduler's: most important first)."""
        ...

    def may_have_evicted(self, pod: PodInfo, other: PodInfo) -> bool:
        """Whether a pod being preempted could be this preemptor's victim, still leaving."""
        ...

    def evicted(self, victim: PodInfo) -> None:
        """The victim is on its way out (before the watch says so)."""
        ...

    def kept(self, victim: PodInfo) -> None:
        """Its eviction failed: it counts again where ``evicted`` stopped counting it."""
        ...

    def why(self, victim: PodInfo) -> str:
        """What let the victim be taken, for the log ("" when priority alone did)."""
        ...


@dataclass(frozen=True)
class Candidate:
    node: str
    row: int
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int

    def rank(self) -> tuple[int, int, int, int, float]:
        """Smaller is better: kube-scheduler's pickOneNodeForPreemption criteria in order."""
        return rank([(v.priority, start_time(v)) for v in self.victims], self.pdb_violations)


def start_time(pod: PodInfo) -> float:
    """status.startTime; a pod not started yet counts as started now (the least important)."""
    return pod.started if pod.started is not None else time.time()


def more_important_first(pods: list[PodInfo]) -> list[PodInfo]:
    return sorted(pods, key=lambda p: (-p.priority, start_time(p)))


class Evaluator:
    """Dry runs and the acting part of preemption, for one profile."""

    def __init__(
        self,
        name: str,
        args: dict[str, Any],
        handle: Handle,
        *,
        eviction_api: bool = True,
        asynchronous: bool = False,
    ) -> None:
        self.name = name
        self.handle = handle
        self.eviction_api = eviction_api
        self.asynchronous = asynchronous
        self.min_percentage = int(args.get("minCandidateNodesPercentage", 10))
        self.min_absolute = int(args.get("minCandidateNodesAbsolute", 100))
        self.rng = random.Random()

    async def preempt(
        self,
        state: CycleState,
        pod: PodInfo,
        diagnosis: Diagnosis,
        rows: Ints,
        policy: VictimPolicy,
        preempted_message: str,
    ) -> PostFilterResult:
        """Choose victims on one of ``rows``, evict them and nominate the pod there.

        A Reservation does not preempt: it waits for room (or is pre-allocated).
        """
        if pod.reservation is not None:
            return PostFilterResult()
        reason = self.not_eligible(pod, diagnosis, policy)
        if reason:
            return self.fail(f"preemption: {reason}")
        candidates, histogram = self.find_candidates(state, pod, rows, diagnosis.nodes, policy)
        if not candidates:
            text = histogram_text(histogram)
            message = f"preemption: 0/{diagnosis.nodes} nodes are available: {text}."
            # No node would take it even after evictions: a nomination it holds from an
            # earlier preemption is dropped, or it keeps room and quota nobody gets.
            return self.fail(message, attempted=True, override=True)
        best = min(candidates, key=Candidate.rank)
        guarded = await self.handle.runner.run_before_eviction(state, pod, best.node)
        if not guarded.ok:
            return self.fail(f"preemption: {guarded.message}", attempted=True)
        acting = None
        if self.asynchronous:
            acting = self._prepare_async(pod, best, preempted_message, policy)
        else:
            await self._prepare(pod, best, preempted_message, policy)
        return PostFilterResult(
            nominated_node=best.node,
            attempted=True,
            victims=len(best.victims),
            override=True,
            acting=acting,
        )

    async def preempt_by(
        self,
        state: CycleState,
        pod: PodInfo,
        diagnosis: Diagnosis,
        chosen: tuple[Ints, VictimPolicy, str] | str,
    ) -> PostFilterResult:
        """``preempt`` with a plugin's choice of nodes, rule and message; a message alone
        says why it does not preempt."""
        if isinstance(chosen, str):
            return self.fail(chosen)
        rows, policy, message = chosen
        return await self.preempt(state, pod, diagnosis, rows, policy, message)

    def fail(
        self, message: str, *, attempted: bool = False, override: bool = False
    ) -> PostFilterResult:
        status = unschedulable(self.name, message)
        return PostFilterResult(
            status=status, message=message, attempted=attempted, override=override
        )

    def not_eligible(self, pod: PodInfo, diagnosis: Diagnosis, policy: VictimPolicy) -> str:
        """Why the pod may not preempt now, or "" (kube-scheduler's PodEligibleToPreemptOthers)."""
        if (pod.raw.get("spec") or {}).get("preemptionPolicy") == "Never":
            return "not eligible due to preemptionPolicy=Never."
        view = self.handle.view
        # The view's nomination first: an async preemption's is there before the pod's
        # status says so, and its victims are leaving before the watch shows them so.
        held = view.nominated.get(pod.uid)
        nominated = held[0] if held is not None else pod.nominated_node
        row = view.nodes.index.get(nominated) if nominated else None
        if row is None:
            return ""
        if diagnosis.prefilter is None and not diagnosis.resolvable_rows[row]:
            return ""  # its nominated node cannot take it any more: it may preempt elsewhere
        if any(
            (other.preempted or other.uid in view.leaving) and policy.may_have_evicted(pod, other)
            for other in view.nodes.pods[row].values()
        ):
            return "not eligible due to a terminating pod on the nominated node."
        return ""

    # -- dry runs --------------------------------------------------------------------

    def helpful_rows(self, diagnosis: Diagnosis) -> Ints:
        """Nodes some filter rejected for a reason evicting pods could remove."""
        nodes = self.handle.view.nodes
        return np.flatnonzero(diagnosis.resolvable_rows & nodes.present[: nodes.size])

    def find_candidates(
        self, state: CycleState, pod: PodInfo, rows: Ints, nodes: int, policy: VictimPolicy
    ) -> tuple[list[Candidate], Counter[str]]:
        """Up to the configured number of candidate nodes, from a random offset in ``rows``."""
        histogram: Counter[str] = Counter()
        unhelpful = nodes - len(rows)
        if unhelpful:
            histogram[NOT_HELPFUL] = unhelpful
        wanted = min(len(rows), max(nodes * self.min_percentage // 100, self.min_absolute))
        offset = self.rng.randrange(len(rows)) if len(rows) else 0
        candidates: list[Candidate] = []
        for i in range(len(rows)):
            if len(candidates) >= wanted:
                break
            row = int(rows[(offset + i) % len(rows)])
            found = self.select_victims(state, pod, row, policy)
            if isinstance(found, Candidate):
                candidates.append(found)
            else:
                histogram.update(found)
        return candidates, histogram

    def select_victims(
        self, state: CycleState, pod: PodInfo, row: int, policy: VictimPolicy
    ) -> Candidate | tuple[str, ...]:
        """Fewest pods to evict from the node so the pod fits, or why no eviction would do.

        Pods are taken off and put back through the framework, so the plugins that count
        pods in PreFilter (spread, affinity) see the dry run too; or, when the filters
        this attempt runs can judge a row with pods named gone, only named.
        """
        runner = self.handle.runner
        assumed = self.handle.view.assumed
        book = self.handle.reservations  # reserved capacity stays, and its owners
        allowed = [p for p in policy.potential_victims(pod, row) if p.uid not in assumed]
        potential = [p for p in allowed if not is_reservation(p) and not book.shields(p, pod)]
        if not potential:
            return (RESERVED if allowed else NO_VICTIMS,)
        # What a policy checks (a quota) only eases as victims go: when it refuses with
        # every one of them gone, no subset helps, and the node's filters need not run.
        blocked = policy.blocking(pod, potential)
        if blocked:
            return blocked
        removed = list(potential)
        if runner.judges_without(state):
            # The filters judge a row with pods named gone: no pod is taken off the table
            # and put back. In a full cluster most nodes a preemptor tries (hundreds of
            # them) cannot be freed at all.
            return self._reprieve(
                pod, row, policy, removed, lambda: runner.run_filter_at(state, pod, row, removed)
            )
        for victim in potential:
            runner.run_remove_pod(state, pod, victim, row)
        try:
            return self._reprieve(
                pod,
                row,
                policy,
                removed,
                lambda: runner.run_filter_at(state, pod, row),
                lambda other: runner.run_add_pod(state, pod, other, row),
                lambda other: runner.run_remove_pod(state, pod, other, row),
            )
        finally:
            for victim in removed:
                runner.run_add_pod(state, pod, victim, row)

    def _reprieve(
        self,
        pod: PodInfo,
        row: int,
        policy: VictimPolicy,
        removed: list[PodInfo],
        judge: Callable[[], tuple[str, ...]],
        give_back: Callable[[PodInfo], None] = lambda _: None,
        take_again: Callable[[PodInfo], None] = lambda _: None,
    ) -> Candidate | tuple[str, ...]:
        """With every pod of ``removed`` gone, why the pod still does not fit, or the pods
        given back one by one (PDB-violating first, most important first) while it fits:
        the rest are the victims. ``removed`` is kept as what is gone throughout."""
        reasons = judge()
        if reasons:
            return reasons
        violating, others = self.split_by_pdb(policy.reprieve_order(pod, list(removed)))
        victims: list[PodInfo] = []
        violations = 0
        for group, counts in ((violating, True), (others, False)):
            for candidate in group:
                give_back(candidate)
                removed.remove(candidate)
                if not judge() and not policy.blocking(pod, removed):
                    continue  # reprieved
                take_again(candidate)
                removed.append(candidate)
                victims.append(candidate)
                violations += int(counts)
        names = self.handle.view.nodes.names
        return Candidate(names[row], row, tuple(more_important_first(victims)), violations)

    def split_by_pdb(self, pods: list[PodInfo]) -> tuple[list[PodInfo], list[PodInfo]]:
        """kube-scheduler's filterPodsWithPDBViolation, budget by budget."""
        budgets: list[tuple[str, LabelSelector, set[str], list[int]]] = []
        for pdb in self.handle.view.pdbs.values():
            selector = (pdb.get("spec") or {}).get("selector")
            if not selector or not (
                selector.get("matchLabels") or selector.get("matchExpressions")
            ):
                continue  # a nil or empty selector matches nothing
            status = pdb.get("status") or {}
            budgets.append(
                (
                    pdb["metadata"].get("namespace", ""),
                    LabelSelector.model_validate(selector),
                    set(status.get("disruptedPods") or {}),
                    [int(status.get("disruptionsAllowed") or 0)],
                )
            )
        violating: list[PodInfo] = []
        others: list[PodInfo] = []
        for pod in pods:
            hit = False
            if pod.labels:
                for namespace, selector, disrupted, allowed in budgets:
                    if namespace != pod.namespace or not selector.matches(pod.labels):
                        continue
                    if pod.name in disrupted:
                        continue  # already being disrupted: the API server counted it
                    allowed[0] -= 1
                    hit = hit or allowed[0] < 0
            (violating if hit else others).append(pod)
        return violating, others

    # -- acting ----------------------------------------------------------------------

    async def evict(self, victim: PodInfo, preempted_message: str) -> None:
        """The DisruptionTarget condition, then the victim's deletion (kube-scheduler's
        DefaultPreemption: its budgets were weighed in choosing the victims), or through
        the Eviction API (a quota's preemption, as the design asks), deleted when a
        disruption budget refuses it (429); NotFound if the victim is gone meanwhile."""
        writer = self.handle.writer
        assert writer is not None
        await writer.mark_preempted(victim, f"{self.handle.profile}: {preempted_message}")
        if self.eviction_api:
            try:
                await writer.evict(victim)
                return
            except ApiException as err:
                if err.status != 429:
                    raise
        try:
            await writer.delete(victim)
        except Conflict as err:  # another pod of its name now: this one is gone
            raise NotFound(status=404, reason="Not Found") from err

    async def _prepare(
        self, pod: PodInfo, best: Candidate, preempted_message: str, policy: VictimPolicy
    ) -> None:
        """Evict the victims one after another, each counted gone for the policy once its
        eviction is accepted, then nominate the pod: a quota's preemption, decided on
        accounting the next attempt must see settled."""
        why = {victim.uid: policy.why(victim) for victim in best.victims}  # as decided
        leaving = self.handle.view.leaving
        for victim in best.victims:
            if not (victim.deleting or victim.uid in leaving):  # else on its way out
                await self._evict_one(pod, victim, best.node, preempted_message, why[victim.uid])
            policy.evicted(victim)
        await self.release_lower(pod, best.node)
        self.handle.view.nominate(pod, best.node)
        await self.write_nomination(pod, best.node)

    def _prepare_async(
        self, pod: PodInfo, best: Candidate, preempted_message: str, policy: VictimPolicy
    ) -> asyncio.Task[None]:
        """Nominate the pod at once, in the view; evict the victims together and write the
        nominations in a task of their own (kube-scheduler's async preemption, on by
        default since 1.33): an eviction is an API round trip, a tenth of a second on a
        busy API server, and the loop schedules other pods meanwhile. The victims count as
        gone for the policy at once; one whose eviction fails counts again."""
        why = {victim.uid: policy.why(victim) for victim in best.victims}  # as decided
        view = self.handle.view
        evicting = [v for v in best.victims if not (v.deleting or v.uid in view.leaving)]
        for victim in best.victims:
            policy.evicted(victim)
        view.leaving.update(v.uid for v in evicting)
        lower = self._drop_lower(pod, best.node)
        view.nominate(pod, best.node)
        return asyncio.create_task(
            self._act(pod, best.node, evicting, preempted_message, policy, why, lower)
        )

    async def _act(
        self,
        pod: PodInfo,
        node: str,
        evicting: list[PodInfo],
        preempted_message: str,
        policy: VictimPolicy,
        why: dict[str, str],
        lower: list[PodInfo],
    ) -> None:
        """The API side of an async preemption; raises the first eviction that failed."""

        async def one(victim: PodInfo) -> None:
            try:
                await self._evict_one(pod, victim, node, preempted_message, why[victim.uid])
            except BaseException:
                self.handle.view.leaving.discard(victim.uid)
                policy.kept(victim)
                raise

        outcomes = await asyncio.gather(*(one(v) for v in evicting), return_exceptions=True)
        for other in lower:
            await self.write_nomination(other, "")
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await self.write_nomination(pod, node)

    async def _evict_one(
        self,
        pod: PodInfo,
        victim: PodInfo,
        node: str,
        preempted_message: str,
        why: str,
    ) -> None:
        try:
            await self.evict(victim, preempted_message)
        except NotFound:
            # Deleted since the dry run (kube-scheduler skips such a victim too): what it
            # held is freed all the same.
            self.handle.view.leaving.discard(victim.uid)
            return
        if victim.uid in self.handle.view.pods:  # not seen deleted meanwhile
            self.handle.view.leaving.add(victim.uid)
        writer = self.handle.writer
        assert writer is not None
        writer.event(victim.raw, "Pod", "Preempted", f"Preempted by pod {pod.uid} on node {node}")
        logger.info(
            "preempted",
            namespace=victim.namespace,
            name=victim.name,
            priority=victim.priority,
            preemptor=pod.key,
            preemptor_priority=pod.priority,
            node=node,
            plugin=self.name,
            why=why,
        )

    def _drop_lower(self, pod: PodInfo, node: str) -> list[PodInfo]:
        """Drop, in the view, the nominations of pods of lower priority to ``node``: what
        is freed there is the preemptor's (kube-scheduler's prepareCandidate). The pods
        whose status still names the node."""
        view = self.handle.view
        dropped = []
        for uid, (held, other) in list(view.nominated.items()):
            if held == node and other.priority < pod.priority and uid != pod.uid:
                view.nominated.pop(uid, None)
                dropped.append(other)
        return dropped

    async def release_lower(self, pod: PodInfo, node: str) -> None:
        """Drop the nominations of pods of lower priority to ``node``, in the view and in
        their status."""
        for other in self._drop_lower(pod, node):
            await self.write_nomination(other, "")

    async def write_nomination(self, pod: PodInfo, node: str) -> None:
        """``status.nominatedNodeName``; a pod deleted meanwhile keeps no nomination (its
        deletion may have been seen already: held, it would keep room and quota forever)."""
        writer = self.handle.writer
        assert writer is not None
        try:
            await writer.nominate(pod, node)
        except ApiException as err:
            if err.status != 404:
                raise
            self.handle.view.nominated.pop(pod.uid, None)
