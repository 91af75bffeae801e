"""CapacityScheduling: ElasticQuota min/max at PreFilter, quota accounting at Reserve,
and preemption that gives borrowed capacity back to its owner at PostFilter.

PreFilter rejects a pod whose quota would go over its max, or that would make all quotas
together use more than the sum of their mins; pods nominated after a preemption count as
used. Reserve and Unreserve keep the in-memory ledger exact between the decision and the
binding. PostFilter preempts by the quota rules: a quota over its min (with the pod) may
only evict its own pods of lower priority; a quota within its min takes capacity back
from quotas over theirs, whatever their priority; pods with and without a quota never
preempt each other. The arithmetic is ``berth.quota``'s.

Quotas carrying Koordinator's tree labels (``berth.quota.tree``) are checked instead against
their runtime quota and every ancestor's (pods nominated after a preemption count as used).
At PostFilter a pod whose own quota is within its runtime reclaims from quotas over theirs:
their preemptible pods, whatever their priority, only where the pod then fits its node and
its quota chain. With the Reservation plugin's ``reservePreemptedCapacity`` the freed
capacity is held for the pod before anyone is evicted. Victims are never non-preemptible
pods nor pods under their quota's min-runtime, and go in ``berth.quota.reclaim``'s order.
Tree pods are ordered in the queue by their quota's dominant share (``queue_share``), and
every ``overRuntimeCheckInterval`` the plugin names the unschedulable pods that may reclaim
now (``retry_now``), which the scheduler tries again: the check itself evicts nothing.

Pods of no quota count in Koordinator's default quota, pods naming the system quota in that
one: what they use is taken off what the root hands down to the tree quotas, and when the
quota has a max (a stored ElasticQuota of its name, else ``defaultQuotaGroupMax`` or
``systemQuotaGroupMax``) a pod that would take it over is refused, without preemption.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from berth import log
from berth.api.duration import DurationError, parse_duration
from berth.api.elasticquota import GROUP, VERSION
from berth.api.reservation import Reservation
from berth.podresources import Resources, add, raise_to
from berth.quota.check import Quota, over_min, quota_request
from berth.quota.fairshare import quota_share
from berth.quota.ledger import QuotaLedger, Rejection
from berth.quota.reclaim import (
    ReclaimPod,
    Starving,
    eviction_order,
    may_place,
    reclaimable,
    starving,
)
from berth.quota.reservedobjects import quota_group_namespace, reserved_quota_objects
from berth.quota.tree import (
    ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME,
    LABEL_NAME,
    PREFIX,
    QuotaTree,
    TreeError,
    build_tree,
    is_tree_quota,
    outside_max_args,
    parse_pod,
)
from berth.quota.treeadmission import (
    TreePod,
    TreeState,
    check_outside,
    check_tree,
    tree_state,
    within_runtime,
    without,
)
from berth.quota.usage import format_units
from berth.reservation.matching import PodFacts, is_owner
from berth.reservation.owners import ALLOCATED_ANNOTATION
from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.clusterevents import (
    ELASTIC_QUOTA,
    NODE,
    POD,
    ActionType,
    ClusterEventWithHint,
    on,
)
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Diagnosis,
    Handle,
    Plugin,
    PostFilterResult,
    Status,
    unschedulable,
)
from berth.scheduler.framework.preemption import Evaluator, VictimPolicy, more_important_first

logger = log.get(__name__)

KIND = "ElasticQuota"
OWN_QUOTA = "preempting to accommodate a higher priority pod of the same ElasticQuota"
RECLAIM = "preempting to return borrowed capacity to ElasticQuota"
TREE_RECLAIM = "preempting to return capacity over its runtime to the quota tree"
OVER_OWN_RUNTIME = "ElasticQuota {quota} is at its runtime: it reclaims nothing"
OVER_RUNTIME_CHECK = "overRuntimeCheckInterval"
DEFAULT_OVER_RUNTIME_CHECK = "10s"
RECLAIM_RETRY = "ReclaimRetry"
ROOM_RETRY_SECONDS = 1.0
OUTSIDE_AT_MAX = "ElasticQuota {quota} is at its max: its pods preempt nothing for it"
# Koordinator's ElasticQuota arguments whose only value Berth honours is how it works.
FIXED_ARGS: dict[str, tuple[object, str]] = {
    "enableRuntimeQuota": (True, "tree pods are checked against their runtime"),
    "enableCheckParentQuota": (True, "every ancestor's runtime is checked too"),
    "enableMinQuotaScale": (True, "mins over what is handed down are scaled down"),
}


@dataclass(frozen=True)
class TreeDemand:
    """PreFilter's finding for a pod of a tree quota: its quota and preemptibility."""

    quota: str
    preemptible: bool


@dataclass(frozen=True)
class OutsideRefusal:
    """PreFilter's finding for a pod the default or system quota's max refuses."""

    quota: str
    message: str


def _outside_max(args: dict[str, Any]) -> dict[str, Resources]:
    """The default and system quotas' max from Koordinator's arguments, after refusing the
    values Berth does not work by (the fields it does not honour are refused by name with
    the configuration)."""
    for name, (value, meaning) in FIXED_ARGS.items():
        if name in args and args[name] != value:
            raise ValueError(
                f"{name}: {args[name]!r} is not supported; Berth works as {value!r} ({meaning})"
            )
    return outside_max_args(args)


@dataclass(frozen=True)
class QuotaDemand:
    """What PreFilter worked out for the pod, reused by PostFilter's dry runs."""

    quota: Quota
    request: Resources
    nominated_in_quota: Resources
    nominated_total: Resources

    @property
    def nominated(self) -> tuple[Resources, Resources]:
        """What nominated pods hold in the quota and in all quotas."""
        return self.nominated_in_quota, self.nominated_total


ByPriority = dict[int, Resources]


@dataclass(frozen=True)
class Room:
    """The pods refused by their flat quota that the room admits now: ``winners`` as it
    is shared out in queue order, ``passed`` those it admits alone but does not reach;
    ``stuck`` those that neither it nor one node's evictions would admit once the pods
    before them in the queue claimed their part."""

    winners: frozenset[str]
    passed: frozenset[str]
    stuck: frozenset[str] = frozenset()

    def admits(self, uid: str) -> bool:
        return uid in self.winners or uid in self.passed


@dataclass
class Freed:
    """What a preemption could give back to the quotas, by namespace: on each node where
    it could give anything (most first), and ``most``, each namespace's and resource's
    largest over those nodes, which no one node exceeds."""

    by_node: list[dict[str, Resources]]
    most: dict[str, Resources]


@dataclass
class EvictableSums:
    """What the counted pods on each node hold, by quota namespace and priority: those a
    reservation shields apart, by reservation (only its owners may evict them). Built once
    per accounting version: a preemption evicts on one node, so what it could free is
    summed node by node."""

    free: dict[str, dict[str, ByPriority]]  # node -> namespace -> ...
    shielded: dict[str, dict[str, dict[str, ByPriority]]]  # ... -> reservation uid -> ...
    reservations: dict[str, Reservation]  # the shielding ones, by uid
    key: frozenset[tuple[str, str]]  # their (uid, resourceVersion): what owners depend on
    _freed: dict[tuple[Any, ...], Freed] = field(default_factory=dict)

    def freed(self, namespaces: Sequence[str], below: int | None, owned: frozenset[str]) -> Freed:
        """What pods of priority below ``below`` (any, with None) of ``namespaces`` hold,
        node by node, those shielded by reservations ``owned`` included. Asked for every
        waiting pod on each deletion: answered once per question."""
        key = (tuple(namespaces), below, owned)
        cached = self._freed.get(key)
        if cached is not None:
            return cached
        by_node: list[dict[str, Resources]] = []
        most: dict[str, Resources] = {}
        for node in self.free.keys() | self.shielded.keys():
            free = self.free.get(node, {})
            shielded = self.shielded.get(node, {})
            on_node: dict[str, Resources] = {}
            for namespace in namespaces:
                parts = [free.get(namespace, {})]
                parts += [v for k, v in shielded.get(namespace, {}).items() if k in owned]
                total: Resources = {}
                for by_priority in parts:
                    for priority, request in by_priority.items():
                        if below is None or priority < below:
                            add(total, request)
                if total:
                    on_node[namespace] = total
                    raise_to(most.setdefault(namespace, {}), total)
            if on_node:
                by_node.append(on_node)
        by_node.sort(key=lambda n: -sum(sum(v.values()) for v in n.values()))
        found = self._freed[key] = Freed(by_node, most)
        return found


class CapacityScheduling(Plugin):
    name = "CapacityScheduling"
    consumes = frozenset({POD})

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        if "kubeConfigPath" in args:
            logger.info(
                "kubeConfigPath is not used: Berth connects through clientConnection",
                namespace=None,
                name=self.name,
            )
        self.evaluator = Evaluator(self.name, args, handle)
        try:
            self.check_interval = parse_duration(
                str(args.get(OVER_RUNTIME_CHECK, DEFAULT_OVER_RUNTIME_CHECK))
            ).total_seconds()
        except DurationError as error:
            raise ValueError(f"{OVER_RUNTIME_CHECK}: {error}") from error
        self.outside_max = _outside_max(args)
        self.quota_group_namespace = quota_group_namespace(args)
        self.ledger = QuotaLedger()
        # Victims evicted by this plugin and not yet gone: their capacity is promised to
        # the pods nominated in their place, which count instead.
        self.leaving: set[str] = set()
        self._quotas_version = -1
        self.tree = QuotaTree()
        # Bumped by anything that changes the tree's accounting, so its state is cached.
        self._accounting_version = 0
        self._accounted: dict[str, tuple[Any, ...]] = {}  # uid -> what on_event last read
        self._tree_cache: tuple[tuple[int, int, tuple[tuple[str, int], ...]], TreeState] | None
        self._tree_cache = None
        self._admissible_versions = (-1, -1)
        self._admissible_cache: dict[tuple[Any, ...], bool] = {}
        self._evictable: tuple[tuple[int, int], EvictableSums] | None = None
        # Pod uid -> (the shielding reservations' key, those the pod is an owner of).
        self._owns: dict[str, tuple[frozenset[tuple[str, str]], frozenset[str]]] = {}
        # Pods a flat quota refused at their last PreFilter; the pods the room after one
        # deletion admits of those, claimed in queue order (by the deleted pod's uid).
        self._refused: set[str] = set()
        self._rooms: tuple[str, Room] | None = None
        # Bumped when a refused pod leaves the room's queue (its quota admitted it, or it
        # was bound or went): what it claimed there is the next pods' to claim.
        self._claims_version = 0
        # Of the refused pods: the accounting each was last looked at under, and whether
        # one node's victims would then have admitted it (see :meth:`_refused_retries`).
        self._looked: dict[str, tuple[tuple[int, int, int, int], bool]] = {}
        # When the tree's over-runtime check last ran: the check runs each second while
        # the flat quotas' room waits for a claim, the tree's walk at its own interval.
        self._tree_checked = -math.inf
        # The node deletion last asked about, and whether quota pods were nominated to it.
        self._nominations_gone: tuple[str, bool] = ("", False)
        for pod in handle.view.pods.values():
            self.on_event(POD, "ADDED", pod)

    def reserved_quotas(self) -> list[dict[str, Any]]:
        """Koordinator's root, default and system quota objects, to be made in
        ``quotaGroupNamespace`` where absent (none when it is not set)."""
        if self.quota_group_namespace is None:
            return []
        return reserved_quota_objects(self.quota_group_namespace, self.args)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(ELASTIC_QUOTA, ActionType.ADD | ActionType.DELETE),
            on(ELASTIC_QUOTA, ActionType.UPDATE, _quota_rules_changed),
            on(POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN, self._frees_quota),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE, self._node_grew),
            on(NODE, ActionType.DELETE, self._frees_nominated),
        )

    def _frees_nominated(self, pod: PodInfo, old: Any, new: Any) -> bool:
        """A node deleted while quota pods were nominated to it: their share is free, for
        the pods of a flat quota it now admits, shared out as after a deletion. Retrying
        every refused pod on each such node deleted (one every few seconds under churn)
        kept hundreds of pods no eviction could help coming back."""
        meta = (old.get("metadata") or {}) if isinstance(old, dict) else {}
        name = meta.get("name")
        event = f"{name} {meta.get('resourceVersion')}"
        if self._nominations_gone[0] != event:  # once per deletion, not per pod asked
            held = any(
                self.tree.quotas or self.ledger.quota_of(other.namespace)
                for other in self.handle.view.nominated.on(name or "")
            )
            if held:
                self._accounting_version += 1  # what the nominations held counts no more
            self._nominations_gone = (event, held)
        if not self._nominations_gone[1]:
            return False
        if self._tree_decides(pod):
            return self._tree_may_place(pod)
        return self._admissible(pod) and self._reached(pod, f"node {event}")

    def _node_grew(self, pod: PodInfo, old: Any, new: Any) -> bool:
        """A node added or grown: a tree's root hands down what the cluster has (the pod is
        tried if the tree may now place it); a flat quota's refusal turns round only by
        evictions, on the node the pod then runs on: a node grown may now hold it beside
        the pods that stay, a node added holds nothing to evict (a pod its quota admits as
        it stands waits for the deletion that made the room, which shares it out). Under
        churn nodes come and go every second: retrying every refused pod on each kept the
        queue from the pods that could be placed (beside a tree, a flat quota's pods too,
        until the tree's rule was kept to the tree's pods; then every pod one node's
        evictions could admit, each with a dry run)."""
        self._refresh_quotas()
        if self._tree_decides(pod):
            return self._tree_may_place(pod)
        if old is None:
            return False  # a new node holds no pod to evict: it never admits a quota's pod
        # Room for a pod its quota admits comes from deletions, which share it out.
        meta = (new.get("metadata") or {}) if isinstance(new, dict) else {}
        event = f"node {meta.get('name')} {meta.get('resourceVersion')}"
        if not self._admissible(pod):
            return False
        room = self._room(event)
        return not room.admits(pod.uid) and pod.uid not in room.stuck

    def _frees_quota(self, pod: PodInfo, old: Any, new: Any) -> bool:
        """A pod gone or shrunk gives quota back only where quotas count it: to a pod of a
        quota tree, any pod after which the tree may place it (the root's share is the
        cluster less what pods outside hold, so any pod counts); to a pod of a flat quota, a
        pod of a namespace with a flat quota, and then only if its quota would admit it once
        every pod it may evict on some node were gone too (a pod at its quota's max waits
        for its own quota's pods), and of the pods the room alone admits only those it
        reaches in queue order (:meth:`_room`).
        Retrying every refused pod on every deletion keeps the queue busy with pods nothing
        helped, ahead of lower priorities: beside a tree, every deletion anywhere (quota-less
        and tree pods, a gang's members let go) retried every flat refusal, and in the long
        churn new pods waited minutes for their first attempt. A pod only evictions admit
        is tried only if they would beside what the room's winners claim: each deletion
        near the sum of mins sent back every pod one node's victims and the freed room
        together admitted, the winners took the room, and each was refused again after a
        dry run, every ten seconds for minutes."""
        self._refresh_quotas()
        if not isinstance(old, PodInfo) or self.tree.outside_limited():
            return True
        if self._tree_decides(pod):
            return self._tree_may_place(pod)
        if self.ledger.quota_of(old.namespace) is None or not self._admissible(pod):
            return False
        return self._reached(pod, old.uid)

    def _reached(self, pod: PodInfo, event: str) -> bool:
        """Whether the room an event freed reaches the pod, or evictions would admit it
        beside what the pods before it claim (its dry run may now). A pod the room admits
        but does not reach waits for the periodic check."""
        room = self._room(event)
        return pod.uid not in room.passed and pod.uid not in room.stuck

    def _tree_decides(self, pod: PodInfo) -> bool:
        """Whether a quota tree's rules decide for the pod (labels the tree refuses count:
        the pod is tried again as before). A flat quota's pod beside a tree is retried as
        without one."""
        if not self.tree.quotas:
            return False
        try:
            return self.tree_quota_of(pod) is not None
        except TreeError:
            return True

    def _tree_may_place(self, pod: PodInfo) -> bool:
        """Whether the tree, as the event left it, may place a pod it refused: it admits it
        now, or a reclaim may (``may_place``). Labels the tree refuses: tried again as
        before. Every deletion anywhere and every node added used to send back every pod a
        tree had refused: in the long churn a third of all attempts, refused again at
        PreFilter, while pods of lower priority waited in the active queue.

        Other pods' nominations are left out: they come and go with no event of their own
        (a preemptor being bound counts in its quota a moment while its nomination still
        shows), and a pod refused for one that then went waited with nothing to send it
        back."""
        found = self.reclaim_pod(pod)
        if found is None:
            return True
        state = self.tree_state()
        return may_place(self.tree, state, found.quota, found.request, found.preemptible)

    def _room(self, event: str) -> Room:
        """The pods refused by their flat quota that the room admits now, claimed in queue
        order (priority, then age): after a deletion only these are tried for the room it
        freed. Near the sum of mins each deletion freed a CPU or two, every waiting pod the
        room admitted was tried, the first took it and the others were refused again, each
        with a preemption dry run, while pods of lower priority (of quota-less namespaces,
        reservations) were not tried for minutes. A winner that then fails on the nodes
        claims nothing more, and the pods the room admitted but did not reach are tried by
        the periodic check if it still admits them (:meth:`retry_now`): room a winner left
        unused is not lost."""
        if self._rooms is not None and self._rooms[0] == event:
            return self._rooms[1]
        pods = self.handle.view.pods
        # A nomination already holds its share. The view's, set as the preemption is
        # decided: the status saying so comes back by the watch later, and a preemptor
        # the room passed over meanwhile waited for a retry the room never gives it.
        nominated = self.handle.view.nominated
        pending: list[PodInfo] = []
        for uid in list(self._refused):
            other = pods.get(uid)
            if other is None or other.node_name or other.terminal or other.deleting:
                self._refused.discard(uid)
                self._claims_version += 1
            elif uid not in nominated:
                pending.append(other)
        pending.sort(key=lambda p: (-p.priority, p.created))
        claimed_in: dict[str, Resources] = {}
        claimed: Resources = {}
        winners: set[str] = set()
        passed: set[str] = set()
        stuck: set[str] = set()
        # Claims only grow: a demand the room refused once it refuses for every later pod
        # with the same one (namespace, priority, request), which is then only looked up.
        lost: dict[tuple[Any, ...], bool] = {}  # -> whether the room alone admits it
        check = self.ledger.check
        for other in pending:
            request = quota_request(other.requests)
            key = (other.namespace, other.priority, tuple(sorted(request.items())))
            alone = lost.get(key)
            if alone is None:
                demand = self.demand(other)
                if demand is None:
                    continue
                in_quota = _sum(demand.nominated_in_quota, claimed_in.get(other.namespace, {}))
                total = _sum(demand.nominated_total, claimed)
                if check(demand.quota, request, in_quota, total) is None:
                    winners.add(other.uid)
                    add(claimed_in.setdefault(other.namespace, {}), request)
                    add(claimed, request)
                    continue
                alone = lost[key] = check(demand.quota, request, *demand.nominated) is None
            if alone:
                passed.add(other.uid)
            elif not self._admissible(other, claimed_in.get(other.namespace, {}), claimed):
                stuck.add(other.uid)
        room = Room(frozenset(winners), frozenset(passed), frozenset(stuck))
        self._rooms = (event, room)
        return room

    def _admissible(
        self, pod: PodInfo, claimed_in: Resources | None = None, claimed: Resources | None = None
    ) -> bool:
        """Whether the pod's flat quota admits it now with every pod it may evict on some
        one node gone (a preemption evicts on one node: a quota that only the victims of
        two nodes together would satisfy refuses every dry run), beside what pods before it
        claim (``claimed_in`` its quota, ``claimed`` all quotas). Pending pods alike
        (quota, priority, request, nominations and claims, the reservations they own)
        share one answer until the accounting changes: a deletion asks it of every waiting
        pod."""
        demand = self.demand(pod)
        if pod.reservation is not None or demand is None:
            return True
        if claimed:
            demand = replace(
                demand,
                nominated_in_quota=_sum(demand.nominated_in_quota, claimed_in or {}),
                nominated_total=_sum(demand.nominated_total, claimed),
            )
        versions = (self._accounting_version, self._quotas_version)
        if self._admissible_versions != versions:
            self._admissible_versions = versions
            self._admissible_cache.clear()
        base = (
            pod.namespace,
            pod.priority,
            tuple(sorted(demand.request.items())),
            tuple(sorted(demand.nominated_in_quota.items())),
            tuple(sorted(demand.nominated_total.items())),
        )
        if self._admits(base, demand, pod, frozenset()):
            return True
        owned = self._owned(pod)
        return bool(owned) and self._admits((*base, owned), demand, pod, owned)

    def _admits(
        self, key: tuple[Any, ...], demand: QuotaDemand, pod: PodInfo, owned: frozenset[str]
    ) -> bool:
        admits = self._admissible_cache.get(key)
        if admits is None:
            policy = QuotaVictims(self, demand)
            freed = policy.freed(pod, owned)
            if freed is None or not freed.by_node:
                admits = policy.rejection({}) is None
            else:  # the nodes are tried only when their bound admits it
                admits = policy.rejection(freed.most) is None and any(
                    policy.rejection(on_node) is None for on_node in freed.by_node
                )
            self._admissible_cache[key] = admits
        return admits

    def _owned(self, pod: PodInfo) -> frozenset[str]:
        """The shielding reservations the pod is an owner of (it may evict their pods)."""
        sums = self.evictable()
        if not sums.reservations:
            return frozenset()
        cached = self._owns.get(pod.uid)
        if cached is not None and cached[0] == sums.key:
            return cached[1]
        meta = pod.raw.get("metadata") or {}
        facts = PodFacts(
            namespace=pod.namespace,
            name=pod.name,
            uid=pod.uid,
            labels=pod.labels,
            annotations=meta.get("annotations") or {},
            owner_references=tuple(meta.get("ownerReferences") or ()),
            tolerations=(),  # owners are matched by reference and labels only
        )
        owned = frozenset(uid for uid, r in sums.reservations.items() if is_owner(r, facts))
        if len(self._owns) > 2 * len(self.handle.view.pods):
            self._owns.clear()
        self._owns[pod.uid] = (sums.key, owned)
        return owned

    def evictable(self) -> EvictableSums:
        """What every counted pod could give back, once per accounting version."""
        versions = (self._accounting_version, self._quotas_version)
        if self._evictable is not None and self._evictable[0] == versions:
            return self._evictable[1]
        view = self.handle.view
        book = self.handle.reservations
        free: dict[str, dict[str, ByPriority]] = {}
        shielded: dict[str, dict[str, dict[str, ByPriority]]] = {}
        reservations: dict[str, Reservation] = {}
        for uid, (namespace, request) in self.ledger.pods.items():
            pod = view.pods.get(uid)
            if self.ledger.quota_of(namespace) is None or pod is None or uid in view.assumed:
                continue
            node = pod.node_name
            if not node or node not in view.nodes.index:
                continue  # no node to preempt on (nominated, or on a deleted node)
            shield = book.shield_of(pod)
            if shield is None:
                by_priority = free.setdefault(node, {}).setdefault(namespace, {})
            else:
                shield_uid = shield.metadata.uid or ""
                reservations[shield_uid] = shield
                in_node = shielded.setdefault(node, {}).setdefault(namespace, {})
                by_priority = in_node.setdefault(shield_uid, {})
            add(by_priority.setdefault(pod.priority, {}), request)
        shields = frozenset(
            (uid, r.metadata.resource_version or "") for uid, r in reservations.items()
        )
        sums = EvictableSums(free, shielded, reservations, shields)
        self._evictable = (versions, sums)
        return sums

    # -- accounting ------------------------------------------------------------------

    def on_event(self, kind: str, event: str, pod: Any) -> None:
        """A pod being preempted no longer counts: its capacity is promised to the pod
        nominated in its place, which counts instead (a second preemptor must not evict
        more to make room for the first). An event that changes nothing the accounting
        reads (a status written, a condition) changes nothing: each one rebuilt what every
        quota pod could give back, for the next deletion's hints."""
        if event == "DELETED":
            self._accounted.pop(pod.uid, None)
        else:
            seen = _accounted(pod, pod.uid in self.leaving)
            if self._accounted.get(pod.uid) == seen:
                return
            self._accounted[pod.uid] = seen
        self._accounting_version += 1
        if event == "DELETED":
            self.leaving.discard(pod.uid)
            self._refused.discard(pod.uid)
            self.ledger.remove(pod.uid)
        elif pod.occupies_node and not pod.preempted and pod.uid not in self.leaving:
            self.ledger.add(pod.uid, pod.namespace, pod.requests)
        elif pod.uid not in self.handle.view.assumed:
            self.ledger.remove(pod.uid)

    def evicted(self, victim: PodInfo) -> None:
        self._accounting_version += 1
        self.leaving.add(victim.uid)
        self.ledger.remove(victim.uid)

    def kept(self, victim: PodInfo) -> None:
        """Its eviction failed: it counts again as its latest state says."""
        if victim.uid not in self.leaving:
            return
        self.leaving.discard(victim.uid)
        self._accounted.pop(victim.uid, None)
        current = self.handle.view.pods.get(victim.uid)
        if current is not None:
            self.on_event(POD, "MODIFIED", current)

    def _refresh_quotas(self) -> None:
        version = self.handle.view.custom_versions.get(KIND, 0)
        if version != self._quotas_version:
            objects = list(self.handle.view.custom.get(KIND, {}).values())
            self.ledger.set_quotas(o for o in objects if not is_tree_quota(o))
            self.tree = build_tree(objects, self.outside_max)
            self._quotas_version = version

    # -- the quota tree --------------------------------------------------------------

    def tree_quota_of(self, pod: PodInfo) -> str | None:
        """The tree quota of a pod (None: a flat quota's or none); raises TreeError when
        its labels name something the tree cannot honour."""
        labels = pod.labels
        named = parse_pod(labels).name
        if named is None and self.ledger.quota_of(pod.namespace) is not None:
            quota = None
        else:
            quota = self.tree.resolve(pod.namespace, labels)
        if (
            quota is None
            and named not in self.tree.outside
            and any(key.startswith(PREFIX) for key in labels)
        ):
            keys = ", ".join(sorted(k for k in labels if k.startswith(PREFIX)))
            raise TreeError(
                f"{keys} apply only to pods of a quota tree; namespace "
                f"{pod.namespace} has no tree quota"
            )
        return quota

    def outside_quota_of(self, pod: PodInfo) -> str | None:
        """The default or system quota of a pod no tree quota holds (None: a flat quota's)."""
        governed = (
            not pod.labels.get(LABEL_NAME) and self.ledger.quota_of(pod.namespace) is not None
        )
        return self.tree.outside_quota(pod.namespace, pod.labels, governed)

    def tree_state(self, waiting: TreePod | None = None) -> TreeState:
        """Used, request and runtime of every tree quota, and the default and system
        quotas' used and request; the root hands down the cluster's allocatable less what
        those two and the flat quotas' pods hold. ``waiting`` is a pod the watch has not
        shown yet, whose request counts too."""
        self._refresh_quotas()
        nodes = self.handle.view.nodes
        rows = nodes.present[: nodes.size]
        total = {
            name: int(nodes.allocatable[: nodes.size][rows, col].sum())
            for name, col in nodes.columns.items()
        }
        key = (self._accounting_version, self._quotas_version, tuple(sorted(total.items())))
        if waiting is None and self._tree_cache is not None and self._tree_cache[0] == key:
            return self._tree_cache[1]
        pods: list[TreePod] = [] if waiting is None else [waiting]
        for pod in self.handle.view.pods.values():
            bound = pod.uid in self.ledger.pods
            pending = not pod.node_name and not pod.terminal and not pod.deleting
            if not bound and not pending:
                continue
            try:
                quota = self.tree_quota_of(pod)
                preemptible = parse_pod(pod.labels).preemptible
            except TreeError:
                quota = None  # refused at its own PreFilter; counts as the default quota's
                preemptible = True
            if quota is None:
                quota = self.outside_quota_of(pod)
            request = quota_request(pod.requests)
            if quota is not None:
                pods.append(TreePod(quota, request, bound, preemptible))
            elif bound:
                add(total, request, -1)  # a flat quota's
        state = tree_state(self.tree, pods, total)
        if waiting is None:
            self._tree_cache = (key, state)
        return state

    def tree_nominated(self, pod: PodInfo, members: Collection[str] = ()) -> dict[str, Resources]:
        """Requests of other tree pods nominated after a preemption, by quota and ancestor:
        the capacity freed for them is theirs, not a sibling's. ``members``: the pod's
        gang's, whose requests are the gang's demand already."""
        nominated: dict[str, Resources] = {}
        for uid, other in self._nominated():
            if uid == pod.uid or uid in members:
                continue
            try:
                quota = self.tree_quota_of(other)
            except TreeError:
                continue
            if quota is not None:
                for node in self.tree.chain(quota):
                    add(nominated.setdefault(node.name, {}), quota_request(other.requests))
        return nominated

    def reclaim_pod(self, pod: PodInfo) -> ReclaimPod | None:
        """The pod as tree reclaim sees it, None when it is no tree quota's (or its labels
        are refused: it holds nothing in the tree)."""
        try:
            quota = self.tree_quota_of(pod)
            preemptible = parse_pod(pod.labels).preemptible
        except TreeError:
            return None
        if quota is None:
            return None
        return ReclaimPod(
            key=pod.uid,
            quota=quota,
            request=quota_request(pod.requests),
            priority=pod.priority,
            started=pod.started,
            terminating=pod.deleting,
            preemptible=preemptible,
            bound=pod.uid in self.ledger.pods,
        )

    def queue_share(self, pod: PodInfo) -> float:
        """The dominant share of the pod's tree quota, which orders it in the queue among
        pods of its priority (0 for pods outside the tree: their order stays)."""
        self._refresh_quotas()
        if not self.tree.quotas:
            return 0.0
        try:
            quota = self.tree_quota_of(pod)
        except TreeError:
            return 0.0
        if quota is None:
            return 0.0
        return quota_share(self.tree, self.tree_state(), quota)

    # -- the periodic over-runtime check ----------------------------------------------

    def period(self) -> float:
        """The over-runtime check's interval under a quota tree; a second (the
        housekeeping's tick) while a flat quota's refusal waits: what turns it round (a
        deletion's room a winner left unused, a nomination dropped, a quota starting to
        borrow) is often no event that requeues the pod."""
        if self._refused:
            return ROOM_RETRY_SECONDS
        return self.check_interval

    def retry_now(
        self, waiting: Callable[[str], bool], backed_off: Callable[[str], bool]
    ) -> frozenset[str]:
        """Unschedulable pods of tree quotas within their runtime that could reclaim from a
        quota over its runtime now (a victim's min-runtime ran out, runtime moved without an
        event that requeues them). They reclaim at their next attempt, through PostFilter
        and its reservation; this check itself evicts nothing. Under flat quotas, beside a
        tree or not: the refused pods their quota now admits or may (each call; the tree's
        walk at most every ``check_interval``), of those whose backoff is over."""
        self._refresh_quotas()
        flat = self._refused_retries(backed_off)
        now = time.monotonic()
        if not self.tree.quotas or now - self._tree_checked < self.check_interval:
            return flat
        self._tree_checked = now  # each second only for the flat quotas' refusals
        pods = []
        for pod in self.handle.view.pods.values():
            pending = not pod.node_name and not pod.terminal and not pod.deleting
            if pending and (pod.scheduler_name != self.handle.profile or not waiting(pod.uid)):
                continue  # another profile's, or not waiting for an event
            found = self.reclaim_pod(pod)
            if found is not None and (found.bound or pending):
                pods.append(found)
        found_starving = starving(self.tree, self.tree_state(), pods, time.time())
        for item in found_starving:
            self._report_retry(item)
        return flat | frozenset(item.pod.key for item in found_starving)

    def _refused_retries(self, backed_off: Callable[[str], bool]) -> frozenset[str]:
        """The waiting pods their flat quota refused, looked at again once their backoff is
        over and the accounting changed since they were refused (or last looked at): those
        its quota admits now, claimed in queue order (a nominated pod: by its own verdict,
        its nomination holds its share), and those within their min that one node's
        victims would admit now but did not then (a quota started to borrow, a nomination
        went). A refused pod waits for an event, and the events that help are not all ones
        that requeue it: a deletion's room a winner left unused, a nomination dropped, a pod
        bound putting another quota over its min. The churn left such pods Pending though
        their quota admitted them, or waiting past 45 s within their min while a borrower
        could be reclaimed from. Pods one node's victims admitted and still do are not
        tried again: their dry run just failed. A pod sent back with its backoff still
        running was tried up to ten seconds later, and pods created meanwhile had taken the
        room: in the long crash run half of all refusals were such retries. Of pods alike
        that a reclaim newly admits, the first in queue order is tried, the next at the
        next check: when a quota crossed its min, twenty of its pods were tried in a row,
        each refused after its dry run."""
        if len(self._looked) > len(self._refused):
            self._looked = {u: v for u, v in self._looked.items() if u in self._refused}
        if not self._refused:
            return frozenset()
        view = self.handle.view
        now = self._looked_at()
        stale = [
            uid
            for uid in self._refused
            if backed_off(uid)
            and (looked := self._looked.get(uid)) is not None
            and looked[0] != now
        ]
        if not stale:
            return frozenset()
        winners = self._room(f"periodic {time.monotonic()}").winners
        retry = set()
        # Of pods alike (quota, priority, request) that a reclaim newly admits, one a check:
        # one node's victims admit one of them, and the others' dry runs fail with it.
        hoping: set[tuple[Any, ...]] = set()
        pods = sorted(
            (pod for uid in stale if (pod := view.pods.get(uid)) is not None),
            key=lambda p: (-p.priority, p.created),
        )
        for pod in pods:
            uid = pod.uid
            if uid in winners or self._nomination_admitted(uid):
                retry.add(uid)
                continue
            hoped = self._looked[uid][1]
            hope = self._may_reclaim(pod, self.demand(pod))
            if hope and not hoped:
                alike = (pod.namespace, pod.priority, tuple(sorted(pod.requests.items())))
                if alike in hoping:
                    continue  # looked at again by the next check
                hoping.add(alike)
                retry.add(uid)
            self._looked[uid] = (now, hope)
        return frozenset(retry)

    def _may_reclaim(self, pod: PodInfo, demand: QuotaDemand | None) -> bool:
        """Within its quota's min, and one node's victims would admit it: a reclaim may.
        Pods over their min are left to events: under the long churn, quotas crossing
        their mins each second turned their answer round again and again, and their
        retries kept new pods from a first attempt."""
        return demand is not None and QuotaVictims(self, demand).reclaim and self._admissible(pod)

    def _looked_at(self) -> tuple[int, int, int, int]:
        """What a flat refusal depends on: the pods counted, the quotas, the claims of the
        pods before it in the room (a winner admitted and then placed nowhere changes no
        count: the churn left a pod its quota admitted Pending half a minute so, passed
        over for winners that had left), the nominations (a nomination dropped or set
        changes no pod the accounting reads)."""
        nominated = hash(frozenset(self.handle.view.nominated))
        return (self._accounting_version, self._quotas_version, self._claims_version, nominated)

    def _nomination_admitted(self, uid: str) -> bool:
        """A nominated pod its quota admits now: the room never lists a nominated pod (its
        nomination holds its share)."""
        pod = self.handle.view.pods.get(uid)
        if pod is None or uid not in self.handle.view.nominated:
            return False
        demand = self.demand(pod)
        return demand is None or self.verdict(demand) is None

    def _report_retry(self, item: Starving) -> None:
        pod = self.handle.view.pods.get(item.pod.key)
        over = self.tree.quotas[item.over]
        key = pod.key if pod is not None else item.pod.key
        logger.info(
            "retrying a pod to reclaim from a quota over its runtime",
            namespace=pod.namespace if pod is not None else None,
            name=pod.name if pod is not None else None,
            quota=item.pod.quota,
            over=item.over,
        )
        writer = self.handle.writer
        if writer is not None:
            writer.event(
                over.raw,
                KIND,
                RECLAIM_RETRY,
                f"ElasticQuota {item.over} is over its runtime while Pod {key} of "
                f"{item.pod.quota} waits within its own: the pod is tried again to reclaim",
                api_version=f"{GROUP}/{VERSION}",
            )

    def _tree_pre_filter(self, state: CycleState, pod: PodInfo) -> Status | None:
        """The tree's verdict on the pod, None when the pod is not a tree quota's."""
        try:
            quota = self.tree_quota_of(pod)
            preemptible = parse_pod(pod.labels).preemptible
        except TreeError as error:
            return unschedulable(self.name, f"Pod {pod.key} is rejected: {error}", resolvable=False)
        if quota is None:
            return None
        state.data[self.name] = TreeDemand(quota, preemptible)
        request = quota_request(pod.requests)
        unseen = pod.uid not in self.handle.view.pods
        tree_state = self.tree_state(
            TreePod(quota, request, False, preemptible) if unseen else None
        )
        nominated = self.tree_nominated(pod)
        rejection = check_tree(self.tree, tree_state, quota, request, preemptible, nominated)
        if rejection is None:
            return SUCCESS
        message = rejection.message()
        self._warn(
            self.tree.quotas[rejection.quota].raw, rejection.reason, f"Pod {pod.key}: {message}"
        )
        return unschedulable(self.name, message)

    def _outside_pre_filter(self, state: CycleState, pod: PodInfo) -> Status | None:
        """The verdict of the default or system quota's max on a pod of it, None when the
        pod is a flat quota's. Without a max (the default) every pod of it passes."""
        quota = self.outside_quota_of(pod)
        if quota is None:
            return None
        state.data[self.name] = None
        if not self.tree.outside[quota].max:
            return SUCCESS
        rejection = check_outside(self.tree, self.tree_state(), quota, quota_request(pod.requests))
        if rejection is None:
            return SUCCESS
        message = rejection.message()
        state.data[self.name] = OutsideRefusal(quota, message)
        raw = self.tree.outside[quota].raw
        if raw:  # only a stored ElasticQuota of its name can carry the event
            self._warn(raw, rejection.reason, f"Pod {pod.key}: {message}")
        return unschedulable(self.name, message)

    def _nominated(self) -> list[tuple[str, PodInfo]]:
        """Pods nominated to a node that exists: a nomination to a deleted node holds no
        room, and so no quota share (scheduler-plugins counts the nominated pods of the
        snapshot's nodes)."""
        index = self.handle.view.nodes.index
        return [
            (uid, other)
            for uid, (node, other) in self.handle.view.nominated.items()
            if node in index
        ]

    def demand(self, pod: PodInfo, members: Collection[str] = ()) -> QuotaDemand | None:
        """The pod's quota and what counts against it, None when its namespace has none;
        ``members`` as for :meth:`tree_nominated`."""
        self._refresh_quotas()
        quota = self.ledger.quota_of(pod.namespace)
        if quota is None:
            return None
        in_quota: Resources = {}
        total: Resources = {}
        for uid, other in self._nominated():
            if uid == pod.uid or uid in members or self.ledger.quota_of(other.namespace) is None:
                continue
            request = quota_request(other.requests)
            if other.namespace == pod.namespace:
                if other.priority >= pod.priority:
                    add(in_quota, request)
                    add(total, request)
            elif not self.ledger.borrowing(other.namespace):
                add(total, request)
        return QuotaDemand(quota, quota_request(pod.requests), in_quota, total)

    def verdict(self, demand: QuotaDemand) -> Rejection | None:
        """The flat quota's verdict on the demand as the quotas stand now."""
        return self.ledger.check(demand.quota, demand.request, *demand.nominated)

    def admit_group(self, pod: PodInfo, request: Resources, members: frozenset[str]) -> Status:
        """A gang's whole demand against the pod's quota, once, before any member is placed:
        its tree quota and every ancestor (the members, all seen, are already in their
        quota's request), the default or system quota's max, or its flat quota. The
        members' own nominations are in the demand, not held against it: counted twice,
        a gang that had preempted waited for quota it held itself, its nominations keeping
        the room its victims left from every other pod, for good."""
        if pod.reservation is not None:
            return SUCCESS
        self._refresh_quotas()
        try:
            quota = self.tree_quota_of(pod)
            preemptible = parse_pod(pod.labels).preemptible
        except TreeError:
            return SUCCESS  # each member is refused by name at its PreFilter
        asked = quota_request(request)
        if quota is not None:
            nominated = self.tree_nominated(pod, members)
            found = check_tree(self.tree, self.tree_state(), quota, asked, preemptible, nominated)
            return SUCCESS if found is None else unschedulable(self.name, found.message())
        outside = self.outside_quota_of(pod)
        if outside is not None:
            if not self.tree.outside[outside].max:
                return SUCCESS
            over = check_outside(self.tree, self.tree_state(), outside, asked)
            return SUCCESS if over is None else unschedulable(self.name, over.message())
        demand = self.demand(pod, members)
        if demand is None or parse_pod(pod.labels).name is not None:
            return SUCCESS
        rejection = self.verdict(replace(demand, request=asked))
        if rejection is None:
            return SUCCESS
        return unschedulable(self.name, rejection.cause())

    # -- PreFilter / Reserve ---------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        if pod.reservation is not None:  # a Reservation is not charged to a namespace's quota
            state.data[self.name] = None
            return SUCCESS
        self._refresh_quotas()
        verdict = self._tree_pre_filter(state, pod)
        if verdict is None:
            verdict = self._outside_pre_filter(state, pod)
        if verdict is not None:
            return verdict
        demand = self.demand(pod)
        state.data[self.name] = demand
        if demand is None:
            return SUCCESS
        rejection = self.verdict(demand)
        if rejection is None:
            if pod.uid in self._refused:
                self._refused.discard(pod.uid)
                self._claims_version += 1
            self._looked.pop(pod.uid, None)
            return SUCCESS
        self._refused.add(pod.uid)
        self._looked[pod.uid] = (self._looked_at(), self._may_reclaim(pod, demand))
        message = rejection.message(pod.key)
        self._warn(rejection.quota.raw, rejection.reason, message)
        return unschedulable(self.name, message)

    def _warn(self, quota: dict[str, Any], reason: str, message: str) -> None:
        """A warning on the quota, so ``kubectl describe elasticquota`` says who was refused."""
        writer = self.handle.writer
        if writer is not None:
            writer.event(
                quota, KIND, reason, message, warning=True, api_version=f"{GROUP}/{VERSION}"
            )

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self._accounting_version += 1
        if pod.reservation is None:  # a Reservation is not charged to a namespace's quota
            self.ledger.add(pod.uid, pod.namespace, pod.requests)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._accounting_version += 1
        self.ledger.remove(pod.uid)

    # -- PostFilter ------------------------------------------------------------------

    async def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> PostFilterResult:
        chosen = self.victim_policy(state, pod, diagnosis)
        return await self.evaluator.preempt_by(state, pod, diagnosis, chosen)

    def victim_policy(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[Ints, VictimPolicy, str] | str:
        """The nodes where evicting could help, the quota's rule and the victims' message;
        or why it cannot preempt for the pod. A gang's preemption asks it member by member."""
        prefilter = diagnosis.prefilter
        if prefilter is not None and prefilter.plugin != self.name:
            return ""
        if prefilter is not None:
            nodes = self.handle.view.nodes
            rows = np.flatnonzero(nodes.present[: nodes.size])  # the quota, not a node, said no
        else:
            rows = self.evaluator.helpful_rows(diagnosis)
        demand = state.data[self.name] if self.name in state.data else self.demand(pod)
        if isinstance(demand, OutsideRefusal):
            return f"preemption: {OUTSIDE_AT_MAX.format(quota=demand.quota)}"
        if isinstance(demand, TreeDemand):
            tree_policy = TreeVictims(self, pod, demand)
            if not tree_policy.reclaim:
                return f"preemption: {OVER_OWN_RUNTIME.format(quota=demand.quota)}"
            return rows, tree_policy, TREE_RECLAIM
        policy = QuotaVictims(self, demand)
        return rows, policy, RECLAIM if policy.reclaim else OWN_QUOTA

    # -- the decision record ---------------------------------------------------------

    def explain(self, state: CycleState, pod: PodInfo) -> dict[str, Any]:
        """The quota arithmetic of the pod: its quota's used, nominated, requested, min and
        max per resource, Σ used against Σ min over all quotas, and the verdict."""
        demand = state.data.get(self.name) or self.demand(pod)
        if isinstance(demand, OutsideRefusal):
            return {"quota": demand.quota, "rejection": {"message": demand.message}}
        if isinstance(demand, TreeDemand):
            return self._explain_tree(pod, demand)
        if demand is None:
            return {"quota": None}
        quota = demand.quota
        used = self.ledger.used_of(quota.namespace)
        total_used: Resources = {}
        total_min: Resources = {}
        for other in self.ledger.quotas.values():
            add(total_used, self.ledger.used_of(other.namespace))
            add(total_min, other.min)
        resources = sorted(quota.named)  # what the quota governs; the rest is not its concern

        def amount(resource: str, value: int | None) -> str | None:
            return None if value is None else format_units(resource, value)

        rejection = self.verdict(demand)
        return {
            "quota": f"{quota.namespace}/{quota.name}",
            "resources": {
                r: {
                    "used": amount(r, used.get(r, 0)),
                    "nominated": amount(r, demand.nominated_in_quota.get(r, 0)),
                    "requested": amount(r, demand.request.get(r, 0)),
                    "min": amount(r, quota.min.get(r, 0)),
                    "max": amount(r, quota.max.get(r)),
                }
                for r in resources
            },
            "total": {
                r: {
                    "used": amount(r, total_used.get(r, 0)),
                    "nominated": amount(r, demand.nominated_total.get(r, 0)),
                    "min": amount(r, total_min.get(r, 0)),
                }
                for r in resources
            },
            "rejection": None
            if rejection is None
            else {
                "reason": rejection.reason,
                "resource": rejection.excess.resource,
                "message": rejection.message(pod.key),
            },
        }

    def _explain_tree(self, pod: PodInfo, demand: TreeDemand) -> dict[str, Any]:
        """The tree arithmetic of the pod: used, runtime, min and max of its quota and every
        ancestor, and the verdict."""
        tree_state = self.tree_state()
        request = quota_request(pod.requests)

        def units(values: Resources, names: Sequence[str]) -> dict[str, str]:
            return {r: format_units(r, values.get(r, 0)) for r in names}

        chain = []
        for node in self.tree.chain(demand.quota):
            names = sorted(node.max)
            chain.append(
                {
                    "quota": f"{node.namespace}/{node.name}",
                    "used": units(tree_state.used.get(node.name, {}), names),
                    "request": units(tree_state.request.get(node.name, {}), names),
                    "runtime": units(tree_state.runtime.get(node.name, {}), names),
                    "min": units(node.min, names),
                    "max": units(node.max, names),
                }
            )
        rejection = check_tree(self.tree, tree_state, demand.quota, request, demand.preemptible)
        return {
            "quota": chain[0]["quota"],
            "preemptible": demand.preemptible,
            "requested": units(request, sorted(r for r, v in request.items() if v)),
            "tree": chain,
            "rejection": None
            if rejection is None
            else {
                "reason": rejection.reason,
                "quota": rejection.quota,
                "message": rejection.message(),
            },
        }


class TreeVictims:
    """Which pods a tree quota's pod may evict, and in which order (``berth.quota.reclaim``):
    preemptible pods past their quota's min-runtime, of other tree quotas over their
    runtime, when its own quota is within its runtime with the pod."""

    def __init__(self, plugin: CapacityScheduling, pod: PodInfo, demand: TreeDemand) -> None:
        self.plugin = plugin
        self.tree = plugin.tree
        self.state = plugin.tree_state()
        self.demand = demand
        self.request = quota_request(pod.requests)
        self.nominated = plugin.tree_nominated(pod)
        self.reclaim = within_runtime(self.tree, self.state, demand.quota, self.request)
        self.now = time.time()

    def potential_victims(self, pod: PodInfo, row: int) -> list[PodInfo]:
        """Pods it may take (the node's pods as the watch shows them now). Pods already
        terminating (an earlier reclaim's victims among them) are offered too: they still
        hold their room on the node while what they free is held for someone else, so the
        dry run counts that room once; they are not evicted again."""
        on_node = {
            other.uid: other
            for other in self.plugin.handle.view.nodes.pods[row].values()
            if other.uid in self.plugin.ledger.pods or other.deleting
        }
        found = []
        for other in on_node.values():
            facts = self.plugin.reclaim_pod(other)
            if facts is not None:
                found.append(replace(facts, bound=True))
        chosen = reclaimable(
            self.tree, self.state, self.demand.quota, self.request, found, self.now
        )
        return [on_node[p.key] for p in chosen]

    def reprieve_order(self, pod: PodInfo, victims: Sequence[PodInfo]) -> list[PodInfo]:
        """The reverse of the eviction order: the pods to evict first are given back last."""
        by_uid = {v.uid: v for v in victims}
        found = [p for p in map(self.plugin.reclaim_pod, victims) if p is not None]
        order = eviction_order(self.tree, self.demand.quota, found, self.now)
        return [by_uid[p.key] for p in reversed(order)]

    def blocking(self, pod: PodInfo, victims: Sequence[PodInfo]) -> tuple[str, ...]:
        freed = [
            TreePod(found.quota, found.request, True, found.preemptible)
            for victim in victims
            if victim.uid in self.plugin.ledger.pods
            and (found := self.plugin.reclaim_pod(victim)) is not None
        ]
        rejection = check_tree(
            self.tree,
            without(self.tree, self.state, freed),
            self.demand.quota,
            self.request,
            self.demand.preemptible,
            self.nominated,
        )
        return () if rejection is None else (rejection.message(),)

    def may_have_evicted(self, pod: PodInfo, other: PodInfo) -> bool:
        return True  # reclaim evicts whatever the priority

    def evicted(self, victim: PodInfo) -> None:
        self.plugin.evicted(victim)

    def kept(self, victim: PodInfo) -> None:
        self.plugin.kept(victim)

    def why(self, victim: PodInfo) -> str:
        found = self.plugin.reclaim_pod(victim)
        if found is None:
            return ""
        used = self.state.used.get(found.quota, {})
        runtime = self.state.runtime.get(found.quota, {})
        return f"ElasticQuota {found.quota} uses {_over_text(used, runtime)}: over its runtime"


class QuotaVictims:
    """Which pods a preemptor may evict under the quota rules, and whether its quota fits."""

    def __init__(self, plugin: CapacityScheduling, demand: QuotaDemand | None) -> None:
        self.plugin = plugin
        self.ledger = ledger = plugin.ledger
        self.handle = plugin.handle
        self.demand = demand
        self.reclaim = demand is not None and not over_min(
            demand.quota,
            ledger.used_of(demand.quota.namespace),
            _sum(demand.nominated_in_quota, demand.request),
        )

    def potential_victims(self, pod: PodInfo, row: int) -> list[PodInfo]:
        pods = self.handle.view.nodes.pods[row].values()
        quota_of = self.ledger.quota_of
        if self.demand is None:
            return [p for p in pods if p.priority < pod.priority and quota_of(p.namespace) is None]
        if self.reclaim:
            return [
                p
                for p in pods
                if p.namespace != pod.namespace
                and quota_of(p.namespace) is not None
                and self.ledger.borrowing(p.namespace)
            ]
        return [p for p in pods if p.namespace == pod.namespace and p.priority < pod.priority]

    def freed(self, pod: PodInfo, owned: frozenset[str]) -> Freed | None:
        """Node by node, what every pod it may evict there holds, by namespace: the most
        a preemption on that node could give back to the quotas. Pods a reservation
        shields count only for the reservations in ``owned``, which the preemptor is an
        owner of. None without a quota."""
        if self.demand is None:
            return None
        sums = self.plugin.evictable()
        if self.reclaim:
            ledger = self.ledger
            borrowing = [
                namespace
                for namespace in ledger.quotas
                if namespace != pod.namespace and ledger.borrowing(namespace)
            ]
            return sums.freed(borrowing, None, owned)
        return sums.freed([pod.namespace], pod.priority, owned)

    def blocking(self, pod: PodInfo, victims: Sequence[PodInfo]) -> tuple[str, ...]:
        demand = self.demand
        if demand is None:
            return ()
        freed: dict[str, Resources] = {}
        for victim in victims:
            if victim.uid not in self.ledger.pods:
                continue  # already leaving: the ledger no longer counts it
            add(freed.setdefault(victim.namespace, {}), quota_request(victim.requests))
        rejection = self.rejection(freed)
        return () if rejection is None else (rejection.message(pod.key),)

    def rejection(self, freed: dict[str, Resources]) -> Rejection | None:
        """The quota's verdict on the preemptor with ``freed`` (by namespace) given back."""
        demand = self.demand
        if demand is None:
            return None
        return self.ledger.check(
            demand.quota,
            demand.request,
            demand.nominated_in_quota,
            demand.nominated_total,
            freed,
        )

    def reprieve_order(self, pod: PodInfo, victims: Sequence[PodInfo]) -> list[PodInfo]:
        return more_important_first(list(victims))

    def may_have_evicted(self, pod: PodInfo, other: PodInfo) -> bool:
        # Within quotas, reclaim evicts whatever the priority.
        return self.demand is not None or other.priority < pod.priority

    def evicted(self, victim: PodInfo) -> None:
        self.plugin.evicted(victim)

    def kept(self, victim: PodInfo) -> None:
        self.plugin.kept(victim)

    def why(self, victim: PodInfo) -> str:
        """A reclaim's victim: its quota over its min, as the ledger counted it then."""
        quota = self.ledger.quota_of(victim.namespace)
        if not self.reclaim or quota is None or self.demand is None:
            return ""
        if victim.namespace == self.demand.quota.namespace:
            return ""
        used = self.ledger.used_of(victim.namespace)
        return (
            f"ElasticQuota {quota.namespace}/{quota.name} uses "
            f"{_over_text(used, quota.min)}: over its min"
        )


def _accounted(pod: PodInfo, leaving: bool) -> tuple[Any, ...]:
    """What the quota accounting reads of a pod event: where it runs and what it asks,
    its priority, namespace and labels (its tree quota), whether it is pending, finished,
    being deleted or leaving, the reservation it was placed in."""
    return (
        pod.namespace,
        pod.node_name,
        pod.occupies_node,
        pod.terminal,
        pod.deleting,
        pod.preempted,
        leaving,
        pod.priority,
        tuple(sorted(pod.requests.items())),
        tuple(sorted(pod.labels.items())),
        pod.annotations.get(ALLOCATED_ANNOTATION),
    )


def _quota_rules_changed(pod: PodInfo, old: Any, new: Any) -> bool:
    """An ElasticQuota update helps only when what the scheduler reads changed (spec, tree
    labels and annotations): the operator's writes, ``status.used`` on each change of the
    pods and a tree quota's runtime and request annotations, never turn a refusal around
    (the scheduler counts the pods and works the tree out itself). The annotations sent
    every flat refusal back several times a second in the churn."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return True
    return _rules(old) != _rules(new)


WRITTEN_BACK = (ANNOTATION_RUNTIME, ANNOTATION_REQUEST)


def _rules(quota: dict[str, Any]) -> tuple[Any, ...]:
    meta = quota.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    read = {k: v for k, v in annotations.items() if k not in WRITTEN_BACK}
    return quota.get("spec"), meta.get("labels") or {}, read


def _over_text(used: Resources, limit: Resources) -> str:
    """``used`` against ``limit`` for each resource ``limit`` names: "cpu 12500m of 12"."""
    return ", ".join(
        f"{r} {format_units(r, used.get(r, 0))} of {format_units(r, v)}"
        for r, v in sorted(limit.items())
    )


def _sum(a: Resources, b: Resources) -> Resources:
    total = dict(a)
    add(total, b)
    return total


class ElasticQuota(CapacityScheduling):
    """Koordinator's name for its quota plugin, with its ``ElasticQuotaArgs``: Berth's quota
    rules (scheduler-plugins' flat quotas and Koordinator's tree) under either name, so
    that a koord-scheduler configuration loads as written."""

    name = "ElasticQuota"


QUOTA_PLUGINS = frozenset({CapacityScheduling.name, ElasticQuota.name})
