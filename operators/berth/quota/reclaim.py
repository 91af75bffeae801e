"""Which pods a tree reclaim may evict, in which order, and when the periodic check retries.

A pod of a quota within its runtime reclaims from quotas over theirs (``may_reclaim``).
Of the pods it could evict, some are never taken: non-preemptible pods
(``quota.scheduling.koordinator.sh/preemptible: "false"``) and pods younger than their
quota's ``berth.io/min-runtime``. The others are taken in this order: pods of the quota
nearest the preemptor's in the tree first (the deepest lowest common ancestor: a sibling
before a cousin), then pods already terminating, then the lowest priority, then the
youngest. The preemption evaluator gives back (reprieves) pods in the reverse order, so
the ones listed first are the ones that go.

The periodic over-runtime check finds pods it should try again: a pending pod whose quota
is within its runtime with it, while a quota over its runtime holds a pod it could take.
It never evicts by itself; the pod's next attempt reclaims through PostFilter, which holds
the freed capacity for it with a Reservation before evicting.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from berth.podresources import Resources
from berth.quota.tree import QuotaTree
from berth.quota.treeadmission import TreeState, check_tree, may_reclaim, over_runtime


@dataclass(frozen=True)
class ReclaimPod:
    """A pod of a tree quota as reclaim sees it."""

    key: str  # namespace/name, or anything unique
    quota: str
    request: Resources
    priority: int = 0
    started: float | None = None  # status.startTime in seconds; None: not started yet
    terminating: bool = False
    preemptible: bool = True
    bound: bool = True


def protected(tree: QuotaTree, pod: ReclaimPod, now: float) -> str | None:
    """Why the pod may never be reclaimed now, or None. A pod already terminating is never
    protected: it is leaving anyway, and reclaim counts its room without evicting it."""
    if pod.terminating:
        return None
    if not pod.preemptible:
        return "non-preemptible"
    node = tree.quotas.get(pod.quota)
    if node is None:
        return "not in the tree"
    age = now - (pod.started if pod.started is not None else now)
    if node.min_runtime > 0 and age < node.min_runtime:
        return f"running {age:.0f}s, under its quota's min-runtime of {node.min_runtime:.0f}s"
    return None


def nearness(tree: QuotaTree, preemptor: str, victim: str) -> int:
    """The depth of the lowest common ancestor of two quotas (the root's children are at
    depth 1, the root at 0): larger is nearer."""
    ancestors = [q.name for q in reversed(tree.chain(preemptor))]  # root's child first
    depth_of = {name: depth for depth, name in enumerate(ancestors, start=1)}
    for quota in tree.chain(victim):
        if quota.name in depth_of:
            return depth_of[quota.name]
    return 0


def eviction_order(
    tree: QuotaTree, preemptor: str, pods: Iterable[ReclaimPod], now: float
) -> list[ReclaimPod]:
    """The pods, the first to evict first: nearest quota, terminating, lowest priority,
    youngest."""

    def key(pod: ReclaimPod) -> tuple[int, bool, int, float]:
        started = pod.started if pod.started is not None else now
        return (-nearness(tree, preemptor, pod.quota), not pod.terminating, pod.priority, -started)

    return sorted(pods, key=key)


def reclaimable(
    tree: QuotaTree,
    state: TreeState,
    preemptor: str,
    request: Resources,
    pods: Iterable[ReclaimPod],
    now: float,
) -> list[ReclaimPod]:
    """The bound pods a pod of ``preemptor`` asking ``request`` may evict, in eviction
    order."""
    allowed = [
        pod
        for pod in pods
        if pod.bound
        and pod.quota in tree.quotas
        and protected(tree, pod, now) is None
        and may_reclaim(tree, state, preemptor, request, pod.quota)
    ]
    return eviction_order(tree, preemptor, allowed, now)


def may_place(
    tree: QuotaTree,
    state: TreeState,
    quota: str,
    request: Resources,
    preemptible: bool,
) -> bool:
    """Whether a pod the tree refused may be placed as the quotas stand now: the tree admits
    it, or its quota stays within its runtime with it while another is over its own (a
    reclaim may make its room). Otherwise its next attempt is refused at PreFilter again
    and its preemption finds nothing to take: the question a cluster event's hint asks."""
    if check_tree(tree, state, quota, request, preemptible) is None:
        return True
    return any(may_reclaim(tree, state, quota, request, other) for other in tree.quotas)


@dataclass(frozen=True)
class Starving:
    """A pending pod the periodic check retries, and the quota over its runtime it may
    reclaim from."""

    pod: ReclaimPod
    over: str


def starving(
    tree: QuotaTree, state: TreeState, pods: Sequence[ReclaimPod], now: float
) -> list[Starving]:
    """Pending pods within their quota's runtime that could reclaim from a quota over its
    runtime holding a pod they may take."""
    over = [name for name in tree.quotas if over_runtime(tree, state, name)]
    if not over:
        return []
    takeable = {
        pod.quota
        for pod in pods
        if pod.bound and pod.quota in over and protected(tree, pod, now) is None
    }
    found = []
    for pod in pods:
        if pod.bound or pod.quota not in tree.quotas:
            continue
        for name in over:
            if name in takeable and may_reclaim(tree, state, pod.quota, pod.request, name):
                found.append(Starving(pod, name))
                break
    return found
