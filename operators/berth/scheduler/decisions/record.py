"""One pending pod's last scheduling outcome, as the scheduler actually decided it.

Built from the cycle's Diagnosis (which plugin rejected which nodes), the PostFilter result
(what preemption tried) and what each plugin explains about the pod (its ``explain``
method: quota arithmetic, reservation verdicts, load figures, NUMA zones). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np

from berth import log
from berth.gang.group import Wait, WaitReason
from berth.quota.check import OVER_MAX, OVER_MIN_TOTAL
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import (
    Code,
    CycleState,
    Diagnosis,
    Plugin,
    PostFilterResult,
    Status,
)
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.plugins.capacityscheduling import QUOTA_PLUGINS
from berth.scheduler.plugins.coscheduling import Coscheduling
from berth.scheduler.plugins.loadaware import LoadAwareScheduling
from berth.scheduler.plugins.noderesourcetopology import NodeResourceTopologyMatch
from berth.scheduler.plugins.reservation import Reservation

logger = log.get(__name__)

# Node names shown per reason: enough to look one up, bounded for large clusters.
EXAMPLE_NODES = 5


@runtime_checkable
class Explains(Protocol):
    """What a plugin implements to add its own detail to the decision record."""

    def explain(self, state: CycleState, pod: PodInfo) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Rejection:
    """Nodes one plugin rejected for one reason."""

    plugin: str
    reason: str
    nodes: int
    examples: tuple[str, ...] = ()
    # False: evicting pods would not help on these nodes.
    resolvable: bool = True


@dataclass(frozen=True)
class Preemption:
    attempted: bool = False
    nominated_node: str = ""
    victims: int = 0
    message: str = ""


@dataclass(frozen=True)
class Decision:
    namespace: str
    name: str
    uid: str
    profile: str
    time: str
    nodes: int
    message: str
    # A PreFilter plugin refused the pod before any node was looked at.
    prefilter: Rejection | None
    rejections: tuple[Rejection, ...]
    preemption: Preemption
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    unblock: tuple[str, ...] = ()

    @property
    def plugins(self) -> frozenset[str]:
        """The plugins that kept the pod off the nodes (kube-scheduler's unschedulable
        plugins): the PreFilter that refused it, else every filter that rejected a node."""
        if self.prefilter is not None:
            return frozenset({self.prefilter.plugin})
        return frozenset(r.plugin for r in self.rejections if r.plugin)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def rejections(diagnosis: Diagnosis, names: Sequence[str]) -> tuple[Rejection, ...]:
    """The Diagnosis grouped by (plugin, reason), most nodes first, with example nodes."""
    grouped = []
    for reason, count in diagnosis.histogram.items():
        plugin, rows = diagnosis.rejected_by.get(reason, ("", np.zeros(0, dtype=bool)))
        hit = np.flatnonzero(rows)
        examples = tuple(names[int(r)] for r in hit[:EXAMPLE_NODES])
        resolvable = bool(diagnosis.resolvable_rows[hit].any()) if len(hit) else True
        grouped.append(Rejection(plugin, reason, count, examples, resolvable))
    grouped.sort(key=lambda r: (-r.nodes, r.plugin, r.reason))
    return tuple(grouped)


def explain(plugins: Iterable[Plugin], state: CycleState, pod: PodInfo) -> dict[str, Any]:
    """Each plugin's own detail; a plugin failing to explain says so instead."""
    details: dict[str, Any] = {}
    for plugin in plugins:
        if isinstance(plugin, Explains):
            try:
                details[plugin.name] = plugin.explain(state, pod)
            except Exception as err:
                logger.exception(
                    "explaining a decision failed",
                    namespace=pod.namespace,
                    name=pod.name,
                    plugin=plugin.name,
                )
                details[plugin.name] = {"error": repr(err)}
    return details


def of_attempt(
    fwk: Framework,
    state: CycleState,
    pod: PodInfo,
    diagnosis: Diagnosis,
    result: PostFilterResult,
    message: str,
    names: Sequence[str],
) -> Decision:
    """The record of one unschedulable attempt with a profile's plugins."""
    details = explain(fwk.instances.values(), state, pod)
    return decide(pod, fwk.name, diagnosis, result, message, names, details)


def of_gang(profile: str, pod: PodInfo, wait: Wait, gang: str, nodes: int) -> Decision:
    """The record of a member whose gang waits: refused as a whole before its members
    were placed, or taken back when too few fit (``wait`` says which)."""
    status = Status(Code.UNSCHEDULABLE, (wait.message,), Coscheduling.name)
    diagnosis = Diagnosis(nodes, {}, np.zeros(0, dtype=bool), status, frozenset({status.plugin}))
    details = {Coscheduling.name: {"gang": gang, "reason": str(wait.reason)}}
    return decide(pod, profile, diagnosis, PostFilterResult(), wait.message, (), details)


def decide(
    pod: PodInfo,
    profile: str,
    diagnosis: Diagnosis,
    result: PostFilterResult,
    message: str,
    names: Sequence[str],
    details: dict[str, dict[str, Any]],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Decision:
    prefilter = None
    if diagnosis.prefilter is not None:
        status = diagnosis.prefilter
        prefilter = Rejection(
            status.plugin,
            status.message,
            diagnosis.nodes,
            resolvable=status.code is not Code.UNRESOLVABLE,
        )
    decision = Decision(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        profile=profile,
        time=now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        nodes=diagnosis.nodes,
        message=message,
        prefilter=prefilter,
        rejections=rejections(diagnosis, names),
        preemption=Preemption(
            result.attempted, result.nominated_node, result.victims, result.message
        ),
        details=details,
    )
    return replace(decision, unblock=unblock(decision))


def unblock(decision: Decision) -> tuple[str, ...]:
    """What would let the pod schedule, one line per obstacle."""
    hints: list[str] = []
    if decision.preemption.nominated_node:
        hints.append(
            f"preemption is evicting {decision.preemption.victims} pod(s) on "
            f"{decision.preemption.nominated_node}; the pod goes there once they are gone"
        )
    if decision.nodes == 0:
        hints.append("add nodes: the cluster has none this scheduler can use")
    obstacles = [decision.prefilter] if decision.prefilter else list(decision.rejections)
    seen: set[str] = set()
    for rejection in obstacles:
        if rejection is None or rejection.plugin in seen:
            continue
        seen.add(rejection.plugin)
        hints.append(_hint(rejection, decision.details))
    return tuple(hints)


# What lets a waiting gang go, by the reason it waits.
GANG_HINTS = {
    WaitReason.WAITING_FOR_MEMBERS: "create the gang's missing members, or lower its minimum "
    "(the PodGroup's minMember, or min-available)",
    WaitReason.WAITING_FOR_QUOTA: "room in the quota for the whole gang at once: raise the "
    "ElasticQuota's max (or the mins), or wait for its pods to finish",
    WaitReason.NO_PLACEMENT: "room for the whole gang at once: free capacity or add nodes (the "
    "member named above fit nowhere once the others were placed)",
    WaitReason.RESOURCE_GAP: "free capacity for the gang's minResources, or lower minResources",
    WaitReason.BACKED_OFF: "the gang's backoff to end (podGroupBackoffSeconds)",
    WaitReason.PODGROUP_NOT_FOUND: "create the PodGroup, or remove the pod's label",
    WaitReason.INVALID_GANG: "fix or remove the gang annotation named above",
}


def _hint(rejection: Rejection, details: Mapping[str, dict[str, Any]]) -> str:
    plugin = rejection.plugin
    if plugin == Coscheduling.name:
        reason = (details.get(plugin) or {}).get("reason", "")
        return GANG_HINTS.get(WaitReason(reason), rejection.reason) if reason else rejection.reason
    if plugin in QUOTA_PLUGINS:
        quota = details.get(plugin) or {}
        verdict = quota.get("rejection") or {}
        resource = verdict.get("resource", "")
        if verdict.get("reason") == OVER_MAX:
            figures = (quota.get("resources") or {}).get(resource) or {}
            return (
                f"quota {quota.get('quota')}: {resource} max is {figures.get('max')}; raise max, "
                f"or free {resource} in the namespace (used {figures.get('used')}, "
                f"requested {figures.get('requested')})"
            )
        if verdict.get("reason") == OVER_MIN_TOTAL:
            figures = (quota.get("total") or {}).get(resource) or {}
            return (
                f"all quotas together would use more {resource} than the sum of their mins "
                f"(Σused {figures.get('used')}, Σmin {figures.get('min')}): wait for pods "
                f"under quota to finish, or raise a min"
            )
        return f"quota {quota.get('quota')}: {rejection.reason}"
    if plugin == Reservation.name:
        return (
            "a Reservation that is Available, lists the pod among its owners and matches its "
            "reservation-affinity (see the verdicts above), or remove the affinity"
        )
    if plugin == LoadAwareScheduling.name:
        return (
            "a node whose reported usage is under its threshold: wait for the load to drop "
            "(the filter reads the latest NodeMetric report), or raise the usage thresholds"
        )
    if plugin == NodeResourceTopologyMatch.name:
        return (
            "a NUMA zone with enough free for the pod: free a zone, or request less per container"
        )
    if "Insufficient" in rejection.reason:
        hint = f"free capacity or more nodes ({rejection.reason} on {rejection.nodes} node(s))"
        holding = (details.get(Reservation.name) or {}).get("holding") or []
        held = [
            f"Reservation {r['name']} on {entry['node']} ({r['owners']})"
            for entry in holding
            for r in entry["reservations"]
        ]
        if held:
            hint += (
                f"; reserved for others: {', '.join(held)}: delete or shrink them, or make "
                "the pod one of their owners"
            )
        return hint
    return (
        f"nodes that {plugin or 'the filters'} accepts: it refused {rejection.nodes} node(s) "
        f"with {rejection.reason!r}"
    )
