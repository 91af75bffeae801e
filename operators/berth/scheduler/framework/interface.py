"""The scheduling framework's extension points, the shapes plugins exchange with the cycle.

As in kube-scheduler, a plugin holds one concern and implements the extension points it
needs; the cycle (``berth.scheduler.cycle``) orchestrates. Filters and scores work on all
nodes at once: a filter returns which rows pass and, for the rows that fail, why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from berth.gang.group import Gang, Wait
from berth.gang.hold import GangHold
from berth.podresources import Resources
from berth.scheduler.cache.nodetable import Ints, Mask, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.framework.clusterevents import ClusterEventWithHint

if TYPE_CHECKING:
    from berth.scheduler.writer import Writer

MAX_NODE_SCORE = 100


class Code(Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    # Preemption cannot help: the node is wrong for the pod whatever runs on it.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"
    # PreFilter: this plugin has nothing to check for the pod (its Filter is not run).
    # Bind: this plugin does not bind this pod; the next bind plugin does.
    SKIP = "Skip"


@dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def skipped(self) -> bool:
        return self.code is Code.SKIP

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


SUCCESS = Status()


def skip(plugin: str) -> Status:
    return Status(Code.SKIP, (), plugin)


def unschedulable(plugin: str, *reasons: str, resolvable: bool = True) -> Status:
    code = Code.UNSCHEDULABLE if resolvable else Code.UNRESOLVABLE
    return Status(code, reasons, plugin)


@dataclass(frozen=True)
class Reason:
    """Rows that fail a filter for one reason; ``resolvable`` if evicting pods could help."""

    rows: Mask
    message: str
    resolvable: bool = True


@dataclass(frozen=True)
class Verdict:
    """A filter's answer over every row of the node table."""

    passed: Mask
    reasons: tuple[Reason, ...] = ()

    @staticmethod
    def all(nodes: NodeTable) -> Verdict:
        return Verdict(np.ones(nodes.size, dtype=bool))

    @staticmethod
    def failing(
        nodes: NodeTable, failed: Mask, message: str, *, resolvable: bool = True
    ) -> Verdict:
        return Verdict(~failed, (Reason(failed, message, resolvable),))


@dataclass
class CycleState:
    """Scratch space of one scheduling attempt, shared by the plugins of that attempt."""

    data: dict[str, Any] = field(default_factory=dict)
    # Requests of nominated pods (preemptors waiting for their victims to leave) that rank
    # at or above the pod being scheduled, per row: capacity held for them.
    nominated: Ints | None = None
    # The same nominated pods by row, for filters that look at pods rather than sums.
    nominated_pods: dict[int, list[PodInfo]] = field(default_factory=dict)
    # Capacity given back to this pod per row (a reservation it may use there).
    released: Ints | None = None
    # Per row, the shares a preemption dry run gave back to reservations (owners taken
    # off): no longer requested on the node, yet held by those reservations.
    withheld: Ints | None = None
    # Place regardless of what is requested on the nodes (a pre-allocated reservation).
    ignore_requested: bool = False
    # PreFilter plugins that answered Skip: their Filter is not run for this pod.
    skip_filter: set[str] = field(default_factory=set)
    # Rows PreFilter plugins limited the attempt to, and which plugins did.
    node_subset: Mask | None = None
    node_subset_by: tuple[str, ...] = ()
    # The group cycle's count for a gang member: members placed together, and how many
    # the gang needs (None outside a group cycle).
    group: tuple[int, int] | None = None
    # The gang member's hold: how long its room stays while its binding fails.
    hold: GangHold | None = None
    # Verdicts of the filters that read no pods, by plugin, with the node table's
    # generation they were judged at (for preemption's dry runs).
    node_verdicts: dict[str, tuple[int, Verdict]] = field(default_factory=dict)
    # Whether the dry runs may name their victims instead of taking them off the table
    # (the framework's ``judges_without``, decided once the PreFilters have run).
    judges_without: bool | None = None

    def limit_nodes(self, rows: Mask, plugin: str) -> None:
        self.node_subset = rows if self.node_subset is None else self.node_subset & rows
        self.node_subset_by = (*self.node_subset_by, plugin)


class Runner(Protocol):
    """What a plugin may ask of its profile's framework (preemption's dry runs)."""

    def run_filter_at(
        self, state: CycleState, pod: PodInfo, row: int, without: Sequence[PodInfo] = ()
    ) -> tuple[str, ...]: ...

    def judges_without(self, state: CycleState) -> bool: ...

    def run_add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None: ...

    def run_remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None: ...

    async def run_before_eviction(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...

    @property
    def group(self) -> GroupPlugin | None:
        """The profile's plugin that makes pods into gangs, if any."""
        ...


@dataclass
class Handle:
    """What plugins may reach: the cluster view, the reservation book, the API writer and
    their profile's framework (set once the framework is built, as kube-scheduler's
    framework is its plugins' handle)."""

    view: ClusterView
    reservations: ReservationBook
    profile: str
    writer: Writer | None = None
    framework: Runner | None = None
    # The time expiries are judged by (a reservation past its own is ended).
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    @property
    def runner(self) -> Runner:
        assert self.framework is not None, "plugins run only inside a built framework"
        return self.framework


class Plugin:
    """Base of every plugin: a name and its args from the configuration."""

    name: ClassVar[str]
    # Kinds whose watch events this plugin keeps a cache of, through ``on_event``: the
    # event table calls it after the view and the reservation book, before the queue.
    consumes: ClassVar[frozenset[str]] = frozenset()
    # True when its Filter reads the pod and the nodes' own fields, never the pods on the
    # nodes: a preemption dry run, which only takes pods off and puts them back, reuses
    # its verdict instead of judging every node again for each node it tries.
    filter_reads_no_pods: ClassVar[bool] = False

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        self.args = args
        self.handle = handle

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """The cluster events that may undo this plugin's rejections (none: never requeued
        for this plugin's sake, only by the five-minute flush)."""
        return ()

    def on_event(self, kind: str, event: str, obj: Any) -> None:
        """A watch event of a kind in ``consumes`` (a PodInfo for pods, else the object)."""


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status: ...


@runtime_checkable
class PreFilterExtensions(Protocol):
    """What a PreFilter plugin with per-cycle pod counts implements so that the framework
    can add or remove a pod on a row while evaluating preemption or nominated pods."""

    def add_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None: ...

    def remove_pod(self, state: CycleState, pod: PodInfo, other: PodInfo, row: int) -> None: ...


@runtime_checkable
class QueueSharePlugin(Protocol):
    """A plugin that orders pods of equal priority in the queue by a fair share, lowest
    first (Berth's: kube-scheduler has one QueueSort plugin; here priority stays first)."""

    def queue_share(self, pod: PodInfo) -> float: ...


@runtime_checkable
class PeriodicPlugin(Protocol):
    """A plugin with a periodic check (Berth's): every ``period()`` seconds (0: never) it
    names the unschedulable pods worth another attempt now, though no cluster event said so."""

    def period(self) -> float: ...

    def retry_now(
        self, waiting: Callable[[str], bool], backed_off: Callable[[str], bool]
    ) -> frozenset[str]:
        """Uids of pods to try again; ``waiting`` says whether a uid is unschedulable,
        ``backed_off`` whether it is and its backoff is over."""
        ...


@runtime_checkable
class EvictionGuardPlugin(Protocol):
    """A plugin that acts when a preemption has chosen its victims, before any is evicted
    (Berth's, not kube-scheduler's): a failure cancels the preemption."""

    async def before_eviction(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict: ...


@runtime_checkable
class RowFilterPlugin(Protocol):
    """A filter that answers for one row without judging every node: preemption's dry runs
    ask about one node hundreds of times an attempt."""

    def filter_at(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeTable,
        row: int,
        without: Sequence[PodInfo] = (),
    ) -> tuple[str, ...]:
        """The reasons ``filter`` gives the row, in its order; () when it passes. With
        ``without``, as if those pods (counted on the row) had left it: no pod is taken
        off the table and put back."""
        ...


@runtime_checkable
class StandaloneFilterPlugin(Protocol):
    """A filter that judges one row outside any attempt, from the cluster view alone: the
    queue asks whether a pod refused before now passes it on the node an event changed,
    so that the pods an event made room for are tried at once."""

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        """Whether the pod passes this plugin's PreFilter and Filter on the row; ``beside``:
        pods holding room there that the table does not count (preemptors nominated there
        that rank with the pod or above, pods the same room went to first)."""
        ...


@runtime_checkable
class ScorePlugin(Protocol):
    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        """Scores 0..100 for the given rows, already normalized."""
        ...


@dataclass(frozen=True)
class Diagnosis:
    """Why no node fit: per-reason node counts and which rows preemption could help."""

    nodes: int
    histogram: dict[str, int]
    resolvable_rows: Mask
    prefilter: Status | None = None
    # The plugins that rejected the pod somewhere: only their cluster events requeue it.
    plugins: frozenset[str] = frozenset()
    # Per reason: the plugin that gave it and the rows it was charged for.
    rejected_by: dict[str, tuple[str, Mask]] = field(default_factory=dict)


@dataclass(frozen=True)
class PostFilterResult:
    nominated_node: str = ""
    status: Status = SUCCESS
    message: str = ""
    attempted: bool = False  # a preemption was tried (the pod was eligible)
    victims: int = 0
    # kube-scheduler's NominatingMode: True (ModeOverride) sets the pod's nomination to
    # ``nominated_node``, "" clearing it; False (ModeNoop) leaves it as it is.
    override: bool = False
    # The preemption's API calls (the victims' evictions, the nominations), still under
    # way: the pod is not tried again before they end (kube-scheduler's async preemption).
    acting: asyncio.Task[None] | None = None


@runtime_checkable
class PostFilterPlugin(Protocol):
    async def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> PostFilterResult: ...


@runtime_checkable
class ReservePlugin(Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    """Permit, the last word before binding. Berth's answers at once, never Wait: a gang is
    decided whole on one snapshot (the group cycle) before its members reach Permit."""

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@dataclass(frozen=True)
class GroupMembers:
    """A gang as the group cycle takes it: the PodGroup's facts, its pending members in
    the order they are placed, and its members already on a node."""

    gang: Gang
    pending: tuple[PodInfo, ...]
    bound: tuple[PodInfo, ...]
    # Pending members held back by scheduling gates: neither counted nor placed.
    gated: int = 0
    # The other gangs of its gang group (Koordinator's groups annotation): all are placed
    # in the same attempt, each reaching its minimum, or none is.
    others: tuple[GroupMembers, ...] = ()


@runtime_checkable
class GroupPlugin(Protocol):
    """A plugin that makes pods into gangs, scheduled together by the group cycle
    (Berth's, as kube-scheduler 1.36's PodGroup cycle): which gang a pod belongs to and
    whether the gang may be tried now."""

    def group_of(self, pod: PodInfo) -> GroupMembers | Wait | None:
        """The pod's gang; a Wait when the pod names a gang that cannot be tried (its
        PodGroup missing); None for a pod of no gang."""
        ...

    def before_placing(self, members: GroupMembers, now: float) -> Wait | None:
        """Why the gang cannot be tried now (its quorum missing, backed off, too big for
        the cluster), or None."""
        ...

    def group_done(
        self, members: GroupMembers, placed: bool, unassigned: float, now: float
    ) -> None:
        """The attempt's outcome (``unassigned``: the share of the minimum of the gang
        that failed which did not fit): a gang not placed may back off."""
        ...

    def running_gang(self, pod: PodInfo) -> tuple[str, tuple[PodInfo, ...]] | None:
        """The gang of a pod on a node, by how messages name it, with its members on nodes
        (bound or assumed); None for a pod of no gang. Preemption takes such a gang whole."""
        ...


@runtime_checkable
class GroupQuotaPlugin(Protocol):
    """A plugin that checks a gang's whole demand against a quota before any member is
    placed (Berth's): a refusal names the quota and the shortfall."""

    def admit_group(self, pod: PodInfo, request: Resources, members: frozenset[str]) -> Status:
        """``request``: the pending members' (``members``, uids) together."""
        ...


@runtime_checkable
class PreBindPlugin(Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


EXTENSION_POINTS: dict[str, type] = {
    "preEnqueue": PreEnqueuePlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
}
# Extension points kube-scheduler has and Berth accepts in configuration, with no plugin
# of Berth's implementing them (queueSort is PrioritySort, built into the queue).
ACCEPTED_POINTS = frozenset({"multiPoint", "queueSort", "preScore", "postBind", *EXTENSION_POINTS})
