"""One profile's framework: its plugins per extension point and the rules for running them.

The role of kube-scheduler's ``runtime/framework.go``. ``schedule_one`` decides what to run
when; this decides how one extension point runs: in which order, when it stops, what is
rolled back. The rules are kube-scheduler's:

- PreFilter: every plugin runs; the first rejection ends the attempt (its message replaces
  the per-node reasons). A plugin answering Skip has its Filter left out for this pod.
- Filter: over all rows at once, in order; a row is charged to the first filter it fails.
- PostFilter: in order until one nominates a node.
- Score: each plugin's 0..100, times its weight, summed.
- Reserve: in order; when one fails, every Reserve plugin's Unreserve runs, in reverse.
- Permit: in order until one refuses (Berth's Permit never waits: see the group cycle).
- PreBind: in order until one fails. Bind: the first plugin that does not Skip.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from berth.podresources import Resources
from berth.scheduler.cache.nodetable import Ints, Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.framework.interface import (
    SUCCESS,
    BindPlugin,
    Code,
    CycleState,
    Diagnosis,
    EvictionGuardPlugin,
    FilterPlugin,
    GroupPlugin,
    GroupQuotaPlugin,
    Handle,
    PeriodicPlugin,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    QueueSharePlugin,
    ReservePlugin,
    RowFilterPlugin,
    ScorePlugin,
    StandaloneFilterPlugin,
    Status,
)

RowFilter = Callable[[CycleState, PodInfo, NodeTable, int, Sequence[PodInfo]], tuple[str, ...]]


@dataclass
class Framework:
    """The resolved plugins of one profile, per extension point, in order."""

    name: str
    handle: Handle
    percentage_of_nodes_to_score: int | None = None
    instances: dict[str, Plugin] = field(default_factory=dict)
    pre_enqueue: list[PreEnqueuePlugin] = field(default_factory=list)
    pre_filter: list[PreFilterPlugin] = field(default_factory=list)
    filter: list[FilterPlugin] = field(default_factory=list)
    post_filter: list[PostFilterPlugin] = field(default_factory=list)
    score: list[ScorePlugin] = field(default_factory=list)
    reserve: list[ReservePlugin] = field(default_factory=list)
    permit: list[PermitPlugin] = field(default_factory=list)
    pre_bind: list[PreBindPlugin] = field(default_factory=list)
    bind: list[BindPlugin] = field(default_factory=list)
    weights: dict[str, int] = field(default_factory=dict)
    # What ``passes_at`` asks for the pods refused by each set of plugins.
    _standalone_filters: dict[frozenset[str], tuple[StandaloneFilterPlugin, ...] | None] = field(
        default_factory=dict, init=False, repr=False
    )

    @property
    def view(self) -> ClusterView:
        return self.handle.view

    @property
    def percentage(self) -> int | None:
        return self.percentage_of_nodes_to_score

    def has(self, plugin: str) -> bool:
        return plugin in self.instances

    def at(self, point: str) -> list[Plugin]:
        """The plugins at an extension point, by its configuration name ("preFilter")."""
        attr = "".join("_" + c.lower() if c.isupper() else c for c in point)
        plugins: list[Plugin] = getattr(self, attr)
        return plugins

    # -- queueing -----------------------------------------------------------------------

    def queue_share(self, pod: PodInfo) -> float:
        """The pod's fair share in the queue: the largest its plugins give (0: none do)."""
        return max((p.queue_share(pod) for p in self._queue_share), default=0.0)

    @cached_property
    def group(self) -> GroupPlugin | None:
        """The plugin that makes pods into gangs, if the profile has one."""
        return next((p for p in self.instances.values() if isinstance(p, GroupPlugin)), None)

    def periodic(self) -> list[PeriodicPlugin]:
        return [p for p in self.instances.values() if isinstance(p, PeriodicPlugin)]

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        for plugin in self.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status
        return SUCCESS

    # -- filtering ----------------------------------------------------------------------

    def run_pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        """Every PreFilter plugin, after the nominated pods' holds are in ``state``."""
        self._hold_nominated(state, pod)
        nodes = self.view.nodes
        for plugin in self.pre_filter:
            status: Status = plugin.pre_filter(state, pod, nodes)
            if status.skipped:
                state.skip_filter.add(status.plugin or _name(plugin))
            elif not status.ok:
                return status
        return SUCCESS

    def run_filter(self, state: CycleState, pod: PodInfo) -> tuple[Ints, Diagnosis]:
        """PreFilter then Filter over every row: the rows that pass, and why the others failed."""
        nodes = self.view.nodes
        status = self.run_pre_filter(state, pod)
        if not status.ok:
            empty = np.zeros(nodes.size, dtype=bool)
            rejected = frozenset({status.plugin}) if status.plugin else frozenset()
            return np.zeros(0, dtype=np.int64), Diagnosis(
                nodes.count, {}, empty, status, plugins=rejected
            )
        feasible = nodes.present[: nodes.size].copy()
        histogram: Counter[str] = Counter()
        resolvable = np.zeros(nodes.size, dtype=bool)
        rejecting: set[str] = set()
        rejected_by: dict[str, tuple[str, Mask]] = {}
        if state.node_subset is not None:
            outside = int((feasible & ~state.node_subset).sum())
            if outside:
                plugins = " ".join(state.node_subset_by)
                message = f"node(s) didn't satisfy plugin(s) [{plugins}]"
                histogram[message] += outside
                rejected_by[message] = (plugins, feasible & ~state.node_subset)
                rejecting.update(state.node_subset_by)
            feasible &= state.node_subset
        for plugin in self.filter:
            if not feasible.any():
                break
            if _name(plugin) in state.skip_filter:
                continue
            verdict = plugin.filter(state, pod, nodes)
            newly_failed = feasible & ~verdict.passed
            if not newly_failed.any():
                continue
            rejecting.add(_name(plugin))
            for reason in verdict.reasons:
                hit = reason.rows & newly_failed
                count = int(hit.sum())
                if count:
                    histogram[reason.message] += count
                    _, rows = rejected_by.setdefault(reason.message, (_name(plugin), hit))
                    rows |= hit
                    if reason.resolvable:
                        resolvable |= hit
            feasible &= verdict.passed
        return np.flatnonzero(feasible), Diagnosis(
            nodes.count,
            dict(histogram),
            resolvable,
            plugins=frozenset(rejecting),
            rejected_by=rejected_by,
        )

    def run_filter_at(
        self, state: CycleState, pod: PodInfo, row: int, without: Sequence[PodInfo] = ()
    ) -> tuple[str, ...]:
        """Why the pod does not fit on one row, from the first filter it fails; () if it fits.

        Preemption's dry runs call this after taking pods off the row (``run_remove_pod``),
        or, when ``judges_without`` says it can, with those pods named in ``without``.
        """
        nodes = self.view.nodes
        for plugin, name, at_row, reads_no_pods in self._row_filters:
            if name in state.skip_filter:
                continue
            if at_row is not None:
                reasons = at_row(state, pod, nodes, row, without)
                if reasons:
                    return reasons
                continue
            if reads_no_pods:
                memo = state.node_verdicts.get(name)
                if memo is None or memo[0] != nodes.node_generation:
                    memo = state.node_verdicts[name] = (
                        nodes.node_generation,
                        plugin.filter(state, pod, nodes),
                    )
                verdict = memo[1]
            else:
                verdict = plugin.filter(state, pod, nodes)
            if not verdict.passed[row]:
                return tuple(r.message for r in verdict.reasons if r.rows[row])
        return ()

    def judges_without(self, state: CycleState) -> bool:
        """Whether ``run_filter_at`` judges a row with pods named gone as it would with them
        taken off: every filter this attempt runs reads no pods or answers for a row without
        them, and no PreFilter extension keeps counts of its own. A dry run then costs a
        few sums per node, not every pod taken off the table and put back."""
        verdict = state.judges_without
        if verdict is None:
            skipped = state.skip_filter
            verdict = state.judges_without = all(
                name in skipped or reads_no_pods or at_row is not None
                for _, name, at_row, reads_no_pods in self._row_filters
            ) and all(name in skipped for name, _ in self._extensions)
        return verdict

    def passes_at(
        self, pod: PodInfo, rejected_by: frozenset[str], row: int, beside: Sequence[PodInfo]
    ) -> bool:
        """Whether a pod refused by the plugins ``rejected_by`` now passes, on one row,
        every filter of the profile that can judge a row outside an attempt
        (``StandaloneFilterPlugin``; ``beside`` as there). False, as not known, when a
        plugin that refused it is not one of them: its verdict needs an attempt's state.
        Filters that cannot judge so and did not refuse it are taken to pass, as they did
        on the nodes that reached them."""
        asked = self._standalone_filters
        if rejected_by not in asked:
            asked[rejected_by] = self._asked_for(rejected_by)
        filters = asked[rejected_by]
        if filters is None:
            return False
        nodes = self.view.nodes
        return all(plugin.passes_at(pod, nodes, row, beside) for plugin in filters)

    def _asked_for(self, rejected_by: frozenset[str]) -> tuple[StandaloneFilterPlugin, ...] | None:
        """The standalone filters, those in ``rejected_by`` first (the likeliest to refuse
        the pod again); None when a plugin in it is not one of them, or it is empty."""
        found = [p for p in self.filter if isinstance(p, StandaloneFilterPlugin)]
        if not rejected_by or not rejected_by <= {_name(p) for p in found}:
            return None
        found.sort(key=lambda p: _name(p) not in rejected_by)
        return tuple(found)

    def run_add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        """Count ``other`` on the row again, for the node table and every PreFilter extension."""
        self.view.nodes.add_pod(row, other)
        for name, plugin in self._extensions:
            if name not in state.skip_filter:
                plugin.add_pod(state, pod, other, row)

    def run_remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None:
        """Take ``other`` off the row, for the node table and every PreFilter extension."""
        self.view.nodes.remove_pod(row, other)
        for name, plugin in self._extensions:
            if name not in state.skip_filter:
                plugin.remove_pod(state, pod, other, row)

    # The plugins of an optional interface, found once the profile is assembled: a check
    # against a runtime protocol reads every one of its attributes each time, and these run
    # for every pod a preemption dry run adds or removes.
    @cached_property
    def _row_filters(self) -> list[tuple[FilterPlugin, str, RowFilter | None, bool]]:
        return [
            (
                p,
                _name(p),
                p.filter_at if isinstance(p, RowFilterPlugin) else None,
                bool(getattr(p, "filter_reads_no_pods", False)),
            )
            for p in self.filter
        ]

    @cached_property
    def _extensions(self) -> list[tuple[str, PreFilterExtensions]]:
        return [(_name(p), p) for p in self.pre_filter if isinstance(p, PreFilterExtensions)]

    @cached_property
    def _queue_share(self) -> list[QueueSharePlugin]:
        return [p for p in self.instances.values() if isinstance(p, QueueSharePlugin)]

    def _hold_nominated(self, state: CycleState, pod: PodInfo) -> None:
        """Put the nominated pods that outrank or equal ``pod`` on their nodes in ``state``.

        Capacity freed for a preemptor stays its own against pods of lower priority. What a
        Reservation the preemptor owns holds for it on that node (``reservePreemptedCapacity``)
        is already counted there and is not held twice.
        """
        view = self.view
        held = [
            (node, other)
            for uid, (node, other) in view.nominated.items()
            if uid != pod.uid and other.priority >= pod.priority
        ]
        if not held:
            return
        nodes = view.nodes
        book = self.handle.reservations
        pods_col = nodes.columns["pods"]
        # (row, column, amount) triples summed at once: a thousand preemptors nominated
        # while their victims leave are held in every attempt of every pod.
        at_rows: list[int] = []
        at_cols: list[int] = []
        amounts: list[int] = []
        for node, other in held:
            row = nodes.index.get(node)
            if row is None:
                continue
            covered = book.holding_for(other, node)
            for resource, amount in _beyond(other, covered).items():
                at_rows.append(row)
                at_cols.append(nodes.column(resource))
                amounts.append(amount)
            if not covered:  # else the reservation's own pod slot stands for it
                at_rows.append(row)
                at_cols.append(pods_col)
                amounts.append(1)
            state.nominated_pods.setdefault(row, []).append(other)
        table = np.zeros_like(nodes.requested)  # after column(): every column exists
        np.add.at(table, (at_rows, at_cols), amounts)
        state.nominated = table

    # -- after filtering --------------------------------------------------------------

    async def run_post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> list[PostFilterResult]:
        """Each PostFilter plugin until one nominates a node; every plugin's result."""
        results: list[PostFilterResult] = []
        for plugin in self.post_filter:
            result = await plugin.post_filter(state, pod, diagnosis)
            results.append(result)
            if result.nominated_node:
                break
        return results

    def run_score(self, state: CycleState, pod: PodInfo, rows: Ints) -> Ints:
        """Each row's weighted sum of the score plugins' normalized scores."""
        nodes = self.view.nodes
        total = np.zeros(len(rows), dtype=np.int64)
        for plugin in self.score:
            total += plugin.score(state, pod, nodes, rows) * self.weights[_name(plugin)]
        return total

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in self.reserve:
            status = plugin.reserve(state, pod, node)
            if not status.ok:
                self.run_unreserve(state, pod, node)
                return status
        return SUCCESS

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Every Reserve plugin's Unreserve, in reverse order (each must be idempotent)."""
        for plugin in reversed(self.reserve):
            plugin.unreserve(state, pod, node)

    def run_permit(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Every Permit plugin, in order, until one refuses."""
        for plugin in self.permit:
            status = plugin.permit(state, pod, node)
            if not status.ok:
                return status
        return SUCCESS

    def run_admit_group(self, pod: PodInfo, request: Resources, members: frozenset[str]) -> Status:
        """A gang's whole demand against every quota plugin, until one refuses."""
        for plugin in self.instances.values():
            if isinstance(plugin, GroupQuotaPlugin):
                status = plugin.admit_group(pod, request, members)
                if not status.ok:
                    return status
        return SUCCESS

    async def run_before_eviction(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Every enabled plugin's ``before_eviction``, in profile order, until one fails."""
        for plugin in self.instances.values():
            if isinstance(plugin, EvictionGuardPlugin):
                status = await plugin.before_eviction(state, pod, node)
                if not status.ok:
                    return status
        return SUCCESS

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in self.pre_bind:
            status = await plugin.pre_bind(state, pod, node)
            if not status.ok:
                return status
        return SUCCESS

    async def run_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in self.bind:
            status = await plugin.bind(state, pod, node)
            if not status.skipped:
                return status
        return Status(Code.ERROR, ("no bind plugin bound the pod",), "")


def _name(plugin: object) -> str:
    name: str = getattr(plugin, "name", type(plugin).__name__)
    return name


def _beyond(pod: PodInfo, covered: Resources) -> Resources:
    """The pod's requests less what a reservation already holds for it."""
    if not covered:
        return pod.requests
    return {r: v - covered.get(r, 0) for r, v in pod.requests.items()}
