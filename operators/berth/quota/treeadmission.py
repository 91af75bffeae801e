"""Admission in a quota tree: a pod fits when its quota and every ancestor stay within runtime.

Runtime never exceeds max, so within runtime is within max too. A quota is checked for the
resources its max names (the others are unlimited for it). A non-preemptible pod
(``preemptible=false``) may only use its quota's min: it can never be reclaimed, so it must
never stand on borrowed capacity. Messages keep Koordinator's wording, which tools match.

The default and system quotas (``berth.quota.tree.OUTSIDE``) stand beside the tree quotas
under the root, as in Koordinator: what their pods use is taken off what the root hands
down before the water-filling, so no tree quota's runtime promises capacity they hold, and
their own runtime is their max, against which their pods are checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from berth.podresources import Resources, add
from berth.quota.runtime import runtime_quotas
from berth.quota.tree import QuotaTree
from berth.quota.usage import format_units

OVER_RUNTIME = "OverRuntime"
OVER_NON_PREEMPTIBLE_MIN = "OverNonPreemptibleMin"


@dataclass(frozen=True)
class TreePod:
    """A pod of a tree quota as the accounting sees it."""

    quota: str
    request: Resources
    bound: bool  # placed on a node (or reserved by the scheduler): counts as used
    preemptible: bool = True


@dataclass
class TreeState:
    """Used, requested and non-preemptible use of every quota (parents: their subtree),
    and the runtime that follows from them; the default and system quotas' used and
    request, and what the root hands down to its tree quotas."""

    used: dict[str, Resources] = field(default_factory=dict)
    request: dict[str, Resources] = field(default_factory=dict)
    non_preemptible: dict[str, Resources] = field(default_factory=dict)
    runtime: dict[str, Resources] = field(default_factory=dict)
    outside_used: dict[str, Resources] = field(default_factory=dict)
    outside_request: dict[str, Resources] = field(default_factory=dict)
    handed_down: Resources = field(default_factory=dict)


def handed_down(total: Mapping[str, int], held: Iterable[Mapping[str, int]]) -> Resources:
    """What the root hands down to the tree quotas: ``total`` less what ``held`` (the
    default and system quotas' used) takes, per resource, never below zero."""
    left = dict(total)
    for values in held:
        for resource, value in values.items():
            if resource in left:
                left[resource] -= value
    return {resource: max(value, 0) for resource, value in left.items()}


def tree_state(tree: QuotaTree, pods: Iterable[TreePod], total: Mapping[str, int]) -> TreeState:
    """Sum the pods into their quotas and ancestors, then compute runtime from the requests
    of the leaf quotas and what the root hands down: ``total`` (the cluster's allocatable
    less what flat quotas' pods hold) less what the default and system quotas' pods use."""
    state = TreeState()
    # Summed per quota first, then up the chains: one addition per pod, not per ancestor.
    leaf_request: dict[str, Resources] = {}
    leaf_used: dict[str, Resources] = {}
    leaf_non_preemptible: dict[str, Resources] = {}
    for pod in pods:
        if pod.quota in tree.outside:
            add(state.outside_request.setdefault(pod.quota, {}), pod.request)
            if pod.bound:
                add(state.outside_used.setdefault(pod.quota, {}), pod.request)
            continue
        if pod.quota not in tree.quotas:
            continue
        add(leaf_request.setdefault(pod.quota, {}), pod.request)
        if pod.bound:
            add(leaf_used.setdefault(pod.quota, {}), pod.request)
            if not pod.preemptible:
                add(leaf_non_preemptible.setdefault(pod.quota, {}), pod.request)
    for leaves, totals in (
        (leaf_request, state.request),
        (leaf_used, state.used),
        (leaf_non_preemptible, state.non_preemptible),
    ):
        for name, values in leaves.items():
            for quota in tree.chain(name):
                add(totals.setdefault(quota.name, {}), values)
    state.handed_down = handed_down(total, state.outside_used.values())
    state.runtime = runtime_quotas(tree, leaf_request, state.handed_down)
    return state


def _resources(values: Mapping[str, int], names: Iterable[str]) -> str:
    listed = " ".join(f"{r}:{format_units(r, values.get(r, 0))}" for r in sorted(names))
    return f"map[{listed}]"


@dataclass(frozen=True)
class TreeRejection:
    reason: str
    quota: str
    limit: Resources
    used: Resources
    request: Resources
    exceeded: tuple[str, ...]

    def message(self) -> str:
        names = sorted(set(self.limit) | {r for r, v in self.request.items() if v > 0})
        request = _resources(self.request, [r for r in names if r in self.request])
        exceeded = "[" + " ".join(self.exceeded) + "]"
        if self.reason == OVER_NON_PREEMPTIBLE_MIN:
            return (
                f"Insufficient non-preemptible quotas, quotaName: {self.quota}, "
                f"min: {_resources(self.limit, self.limit)}, "
                f"nonPreemptibleUsed: {_resources(self.used, self.limit)}, "
                f"pod's request: {request}, exceedDimensions: {exceeded}"
            )
        return (
            f"Insufficient quotas, quotaName: {self.quota}, "
            f"runtime: {_resources(self.limit, self.limit)}, "
            f"used: {_resources(self.used, self.limit)}, "
            f"pod's request: {request}, exceedDimensions: {exceeded}"
        )


def _exceeded(
    used: Mapping[str, int], request: Mapping[str, int], limit: Mapping[str, int]
) -> tuple[str, ...]:
    return tuple(
        sorted(
            r for r, v in request.items() if v > 0 and r in limit and used.get(r, 0) + v > limit[r]
        )
    )


def over_runtime(
    tree: QuotaTree, state: TreeState, quota: str, wanted: Iterable[str] | None = None
) -> bool:
    """The quota uses more than its runtime for a resource its max names (one of ``wanted``,
    what a reclaiming pod asks for, when given): it holds capacity that its runtime says
    belongs to others, and its pods may be reclaimed."""
    used = state.used.get(quota, {})
    runtime = state.runtime.get(quota, {})
    names = tree.quotas[quota].max.keys() & runtime.keys()
    if wanted is not None:
        names &= set(wanted)
    return any(used.get(r, 0) > runtime[r] for r in names)


def may_reclaim(
    tree: QuotaTree, state: TreeState, quota: str, request: Mapping[str, int], victim: str
) -> bool:
    """A pod of ``quota`` asking ``request`` may evict pods of ``victim``: another quota, over
    its runtime in a resource the pod asks for, while ``quota`` stays within its own."""
    wanted = [r for r, v in request.items() if v > 0]
    return (
        victim != quota
        and within_runtime(tree, state, quota, request)
        and over_runtime(tree, state, victim, wanted)
    )


def within_runtime(
    tree: QuotaTree, state: TreeState, quota: str, request: Mapping[str, int]
) -> bool:
    """The quota itself stays within its runtime with the request: it may take capacity
    back from quotas over theirs."""
    node = tree.quotas[quota]
    limit = {r: v for r, v in state.runtime.get(quota, {}).items() if r in node.max}
    return not _exceeded(state.used.get(quota, {}), request, limit)


def without(tree: QuotaTree, state: TreeState, freed: Iterable[TreePod]) -> TreeState:
    """The state with the ``freed`` pods' use taken out of their quotas and ancestors
    (runtime unchanged: the reclaimed pods' owners still ask for them)."""
    used = {name: dict(values) for name, values in state.used.items()}
    for pod in freed:
        for quota in tree.chain(pod.quota):
            add(used.setdefault(quota.name, {}), pod.request, -1)
    return TreeState(
        used,
        state.request,
        state.non_preemptible,
        state.runtime,
        state.outside_used,
        state.outside_request,
        state.handed_down,
    )


def check_outside(
    tree: QuotaTree, state: TreeState, quota: str, request: Mapping[str, int]
) -> TreeRejection | None:
    """Whether a pod of the default or system quota fits its max (its runtime, as in
    Koordinator), for the resources the max names."""
    limit = dict(tree.outside[quota].max)
    used = dict(state.outside_used.get(quota, {}))
    exceeded = _exceeded(used, request, limit)
    if exceeded:
        return TreeRejection(OVER_RUNTIME, quota, limit, used, dict(request), exceeded)
    return None


def check_tree(
    tree: QuotaTree,
    state: TreeState,
    quota: str,
    request: Mapping[str, int],
    preemptible: bool,
    nominated: Mapping[str, Mapping[str, int]] | None = None,
) -> TreeRejection | None:
    """Whether the pod (``request``, already counted in its quota's request) fits its quota
    and every ancestor; ``nominated`` are requests promised to waiting preemptors, by quota."""
    nominated = nominated or {}
    if not preemptible:
        mins = tree.quotas[quota].min
        used = state.non_preemptible.get(quota, {})
        exceeded = _exceeded(used, request, mins)
        if exceeded:
            return TreeRejection(
                OVER_NON_PREEMPTIBLE_MIN, quota, dict(mins), dict(used), dict(request), exceeded
            )
    for node in tree.chain(quota):
        used = dict(state.used.get(node.name, {}))
        add(used, nominated.get(node.name, {}))
        limit = {r: v for r, v in state.runtime.get(node.name, {}).items() if r in node.max}
        exceeded = _exceeded(used, request, limit)
        if exceeded:
            return TreeRejection(OVER_RUNTIME, node.name, limit, used, dict(request), exceeded)
    return None
