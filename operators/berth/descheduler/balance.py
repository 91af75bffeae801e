"""LowNodeLoad's decisions, pure: which nodes are hot and idle, and which pods to move.

A node is hot when any resource's usage is above its high threshold (or prod pods' usage
above the prod high threshold), idle when every resource is below its low threshold.
Pods leave a hot node, least important and busiest first, only until it is under its high
thresholds, and only as long as the idle nodes can absorb them below *their* high
thresholds: the descheduler never moves more load than the idle nodes can take.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from berth.descheduler.lownodeload import LoadAnomalyCondition, Pool, Thresholds

__all__ = [
    "Detector",
    "Move",
    "NodeLoad",
    "PodLoad",
    "is_hot",
    "is_idle",
    "observe",
    "plan",
    "usage_now",
]

PROD_PRIORITY = "koord-prod"


@dataclass(frozen=True)
class PodLoad:
    """A pod on a node, with what it uses (from the node's NodeMetric)."""

    namespace: str
    name: str
    usage: Mapping[str, int]
    priority: int = 0
    prod: bool = False
    movable: bool = True
    """Passes the filters (namespaces, pod selectors, eviction filters, no running job)."""


@dataclass(frozen=True)
class NodeLoad:
    """A node's allocatable and usage, from its NodeMetric, and its pods."""

    name: str
    allocatable: Mapping[str, int]
    usage: Mapping[str, int]
    pods: tuple[PodLoad, ...] = ()

    def percent(self, resource: str, usage: Mapping[str, int] | None = None) -> float:
        total = self.allocatable.get(resource, 0)
        used = (self.usage if usage is None else usage).get(resource, 0)
        return 100.0 * used / total if total else 0.0

    def prod_usage(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pod in self.pods:
            if pod.prod:
                for resource, value in pod.usage.items():
                    out[resource] = out.get(resource, 0) + value
        return out

    def score(self, weights: Mapping[str, int]) -> float:
        """Weighted mean usage percentage: the hottest node is emptied first."""
        total = sum(weights.values()) or 1
        return sum(self.percent(r) * w for r, w in weights.items()) / total


def usage_now(
    reported: Mapping[str, int],
    pods_reported: Mapping[tuple[str, str], Mapping[str, int]],
    staying: Collection[tuple[str, str]],
) -> dict[str, int]:
    """The node's reported usage less what its report counts for pods not staying on it.

    Pods not staying are those leaving (a migration running, a deletion under way) and
    those gone since the report was taken. A report written just before a migration ended
    still counts the pod that left; taken as it is, the node would look as hot as before
    and the next round would move more pods off it than it needs.
    """
    usage = dict(reported)
    for key, pod_usage in pods_reported.items():
        if key in staying:
            continue
        for resource, value in pod_usage.items():
            usage[resource] = max(0, usage.get(resource, 0) - value)
    return usage


def _above(node: NodeLoad, usage: Mapping[str, int], thresholds: Thresholds) -> list[str]:
    return [r for r, limit in sorted(thresholds.items()) if node.percent(r, usage) > limit]


def is_hot(node: NodeLoad, pool: Pool) -> bool:
    return bool(_above(node, node.usage, pool.high)) or bool(
        pool.prod_high and _above(node, node.prod_usage(), pool.prod_high)
    )


def is_idle(node: NodeLoad, pool: Pool) -> bool:
    if not pool.low:
        return False
    if any(node.percent(r) >= limit for r, limit in pool.low.items()):
        return False
    prod = node.prod_usage()
    return not any(node.percent(r, prod) >= limit for r, limit in pool.prod_low.items())


@dataclass(frozen=True)
class Detector:
    """A node's hot streak (Koordinator's anomaly detector)."""

    abnormal: int = 0
    normal: int = 0
    anomalous_since: datetime | None = None
    seen: datetime | None = None


def observe(
    detector: Detector, hot: bool, now: datetime, condition: LoadAnomalyCondition
) -> tuple[Detector, bool]:
    """The detector after one round, and whether the node is anomalous now.

    ``consecutiveAbnormalities`` hot rounds in a row make a node anomalous;
    ``consecutiveNormalities`` normal rounds in a row clear the streak; an anomaly lasts at
    most ``timeout``, after which the streak starts again.
    """
    since = detector.anomalous_since
    if since is not None and now - since > condition.window():
        detector = Detector()
    if hot:
        detector = replace(detector, abnormal=detector.abnormal + 1, normal=0)
    else:
        normal = detector.normal + 1
        if normal >= condition.consecutive_normalities:
            detector = Detector(normal=normal)
        else:
            detector = replace(detector, normal=normal)
    anomalous = hot and detector.abnormal >= condition.abnormalities()
    if anomalous and detector.anomalous_since is None:
        detector = replace(detector, anomalous_since=now)
    return replace(detector, seen=now), anomalous


@dataclass(frozen=True)
class Move:
    """A pod to migrate off a hot node."""

    pod: PodLoad
    node: str


@dataclass
class _Room:
    """What the idle nodes can still absorb below their high thresholds."""

    free: dict[str, int] = field(default_factory=dict)

    def fits(self, usage: Mapping[str, int]) -> bool:
        return all(usage.get(r, 0) <= free for r, free in self.free.items())

    def take(self, usage: Mapping[str, int]) -> None:
        for resource in self.free:
            self.free[resource] -= usage.get(resource, 0)


def _room(idle: list[NodeLoad], pool: Pool) -> _Room:
    free: dict[str, int] = {}
    for resource, limit in pool.high.items():
        free[resource] = sum(
            max(0, int(n.allocatable.get(resource, 0) * limit / 100) - n.usage.get(resource, 0))
            for n in idle
        )
    return _Room(free)


def _candidates(node: NodeLoad, weights: Mapping[str, int]) -> list[PodLoad]:
    """Movable pods that use something: lowest priority first, then the busiest."""
    total = sum(weights.values()) or 1

    def busy(pod: PodLoad) -> float:
        return sum(node.percent(r, pod.usage) * w for r, w in weights.items()) / total

    movable = [p for p in node.pods if p.movable and any(p.usage.values())]
    return sorted(movable, key=lambda p: (p.priority, -busy(p), p.namespace, p.name))


def plan(
    hot: list[NodeLoad],
    idle: list[NodeLoad],
    pool: Pool,
    fits: Callable[[PodLoad], bool] = lambda _: True,
) -> list[Move]:
    """The pods to move, hottest node first, within what the idle nodes can absorb.

    ``fits`` says whether a pod fits some idle node (nodeFit); pods it refuses stay.
    """
    room = _room(idle, pool)
    moves: list[Move] = []
    for node in sorted(hot, key=lambda n: n.score(pool.weights), reverse=True):
        usage = dict(node.usage)
        prod = node.prod_usage()
        candidates = _candidates(node, pool.weights)
        for pod in candidates:
            over = _above(node, usage, pool.high)
            prod_over = _above(node, prod, pool.prod_high) if pool.prod_high else []
            if not over and not prod_over:
                break
            helps = any(pod.usage.get(r, 0) for r in over) or (
                pod.prod and any(pod.usage.get(r, 0) for r in prod_over)
            )
            if not helps or not room.fits(pod.usage) or not fits(pod):
                continue
            room.take(pod.usage)
            for resource, value in pod.usage.items():
                usage[resource] = usage.get(resource, 0) - value
                if pod.prod:
                    prod[resource] = prod.get(resource, 0) - value
            moves.append(Move(pod, node.name))
    return moves
