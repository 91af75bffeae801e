"""What filtering and scoring share: the constraints that apply to a pod, which nodes
count for a constraint, and how many matching pods each node holds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.api.meta import LabelSelector
from berth.scheduler.cache.nodetable import Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.podterms import HOSTNAME, ZONE, SpreadConstraint, selects
from berth.scheduler.cache.selectorowners import SelectorOwners
from berth.scheduler.plugins.nodeaffinity import required_rows
from berth.scheduler.plugins.perrow import PerRowCounts
from berth.scheduler.plugins.tainttoleration import first_untolerated

SYSTEM = "System"
LIST = "List"
# kube-scheduler's System defaults: both ScheduleAnyway, selector from the pod's owners.
SYSTEM_DEFAULTS = (
    SpreadConstraint(max_skew=3, topology_key=HOSTNAME, hard=False, selector=None),
    SpreadConstraint(max_skew=5, topology_key=ZONE, hard=False, selector=None),
)

Counts = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Defaults:
    """The plugin's args: which constraints a pod that sets none gets."""

    constraints: tuple[SpreadConstraint, ...]
    system: bool

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> Defaults:
        defaulting = args.get("defaultingType") or SYSTEM
        raw = list(args.get("defaultConstraints") or ())
        if defaulting not in (SYSTEM, LIST):
            raise ValueError(f"defaultingType {defaulting!r} is not System or List")
        if defaulting == SYSTEM:
            if raw:
                raise ValueError(
                    "when .defaultingType is System, .defaultConstraints must be empty"
                )
            return cls(SYSTEM_DEFAULTS, system=True)
        return cls(tuple(SpreadConstraint.parse(c, {}) for c in raw), system=False)

    def for_pod(
        self, pod: PodInfo, owners: SelectorOwners, *, hard: bool
    ) -> tuple[SpreadConstraint, ...]:
        """The pod's own constraints of one kind, or the defaults if it sets none."""
        if pod.spread:
            return tuple(c for c in pod.spread if c.hard == hard)
        wanted = [c for c in self.constraints if c.hard == hard]
        if not wanted:
            return ()
        selector = owners.default_selector(pod.namespace, pod.labels)
        if selector is None:
            return ()
        return tuple(replace(c, selector=selector) for c in wanted)


def label_codes(nodes: NodeTable, constraints: Iterable[SpreadConstraint]) -> list[np.ndarray]:
    return [nodes.label_codes(c.topology_key)[0] for c in constraints]


def has_all_keys(nodes: NodeTable, codes: list[np.ndarray]) -> Mask:
    mask: Mask = nodes.present[: nodes.size].copy()
    for column in codes:
        mask &= column >= 0
    return mask


def included(pod: PodInfo, constraint: SpreadConstraint, nodes: NodeTable) -> Mask:
    """Rows nodeAffinityPolicy and nodeTaintsPolicy let count for the constraint."""
    mask: Mask = np.ones(nodes.size, dtype=bool)
    if constraint.honor_node_affinity and (pod.node_selector or pod.required_affinity):
        mask &= required_rows(pod, nodes)
    if constraint.honor_node_taints:
        group_of_row, groups = nodes.taint_groups()
        blocked = [
            g for g, taints in enumerate(groups) if first_untolerated(taints, pod.tolerations)
        ]
        if blocked:
            mask &= ~np.isin(group_of_row, blocked)
    return mask


def matches(other: PodInfo, selector: LabelSelector | None, namespace: str) -> bool:
    """kube-scheduler's countPodsMatchSelector rule for one pod: same namespace, not
    being deleted, selected."""
    return other.namespace == namespace and not other.deleting and selects(selector, other.labels)


def pods_per_row(
    counter: PerRowCounts, nodes: NodeTable, selector: LabelSelector | None, namespace: str
) -> Counts:
    """Matching pods on each row, recounted only on rows whose pods changed."""
    if selector is None:
        return np.zeros(nodes.size, dtype=np.int64)
    key = f"{namespace}/{selector.model_dump_json()}"
    return counter.counts(nodes, key, lambda p: matches(p, selector, namespace))
