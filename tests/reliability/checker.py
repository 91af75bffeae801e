"""An independent judge of what the scheduler and the operators did: it reads the API
objects (nodes, pods, quotas, reservations, events) every second and re-derives every
rule itself, sharing no code with Berth's decisions (its own request arithmetic and rule
evaluation; the Kubernetes client library's quantity parser).

Safety, every snapshot:
- no node's bound pods, plus what Available reservations still hold there, exceed its
  allocatable in any resource or in pod count;
- no flat quota's bound pods exceed its max, and the flat quotas together never exceed
  the sum of their mins;
- quota trees (quota_invariants.py): no tree quota's subtree uses more than its max (or
  its min + borrowing limit), children's mins stay within their parent's, and every
  reclaim eviction comes after a Reservation of its preemptor;
- a pod bound by the scheduler satisfied, when it was bound, its nodeSelector, its
  required node affinity, the node's NoSchedule/NoExecute taints and the node's cordon
  (unless it tolerates the cordon's taint); a fact counts once the looks and a watch of
  the nodes have seen it hold from ``SLACK`` seconds before the binding (its
  PodScheduled=True condition's time, or, without one, the look before the one that saw
  it bound) until ``BOUND_WITHIN`` after, judged once the looks are ``SLACK`` past it;
- a bound pod's PodScheduled condition never says False (the binding set it True: a
  refusal written after it is the scheduler's);
- and its required pod anti-affinity (and other pods' against it) and its DoNotSchedule
  topology spread, judged ``SLACK`` after the binding against the pods surely there when
  it was made (bound ``SLACK`` before, still there ``SLACK`` after) and, for the spread's
  least-loaded domain, every pod that may have been;
- a pod carrying ``reservation-allocated`` is an owner of that reservation, runs on its
  node, fits in it when the policy is Restricted, was not allocated from a reservation
  already terminal, and an allocateOnce reservation is allocated to one pod only;
- every pod the scheduler preempted (its ``Preempted`` event) was an allowed victim:
  lower priority within a namespace kind; another quota's pod only while that quota was
  over its min; quota and quota-less pods never preempt each other; a tree quota's pod
  only another tree quota's; never a pod running in a live reservation's capacity for a
  pod that is not that reservation's owner;
- NUMA (numa_invariants.py): on a node whose NodeResourceTopology says
  ``single-numa-node``, the exclusive pods' requests never exceed its largest zone.

Liveness, every snapshot:
- a Pending pod that one node has surely had room for at every look over
  ``PLACEABLE_WITHIN`` (free capacity counted pessimistically: every held reservation in
  full, every nominated pod's request, terminating pods still there; quota max and the
  sum of mins included; a Guaranteed pod only where one NUMA zone surely has room) is
  bound by then. The same node throughout: room that appears as a pod leaves and is
  taken by another pod before the next look (a pod of higher priority, or one tried
  first) proves nothing about this one, and under a load that keeps every node full
  such room is all there is;
- a Pending pod whose quota is within its min, and that some node takes once other
  quotas' borrowed capacity is reclaimed, is bound within ``RECLAIM_WITHIN``;
- a Pending pod of a tree quota surely within its runtime (so within its min), that some
  node takes once the pods there of a sibling surely over its runtime are evicted, is
  bound within ``RECLAIM_WITHIN``; one whose quota chain surely admits it is due as a pod
  of no quota (a node with room);
- a reservation past its expiry is Failed, an allocateOnce reservation with a bound owner
  is Succeeded, and one whose node is gone is Failed, each within ``TRANSITION_WITHIN``.

A Pending gang member is left to its gang: gang_invariants.py judges each gang's
placements as a whole. A preemptor whose own Reservation (made by its preemption) holds is
placed through it alone: due once that Reservation is Available with room for it, never
through room elsewhere, nor by another reclaim.

At rest (after the load): additionally every reservation's ``currentOwners`` and every
quota's ``status.used`` (on every key either side names) agree with the pods. An
allocateOnce reservation may record the one pod still Pending that an attempt killed before
its binding chose: it holds for that pod alone, and is room for it in the liveness check.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
)

from tests.reliability.load_invariants import loaded
from tests.reliability.numa_invariants import aligns
from tests.reliability.objects import (
    TERMINAL,
    Amounts,
    Obj,
    _add,
    _fits,
    _over,
    _plus,
    amounts,
    bound_at,
    clock,
    demand,
    duration_seconds,
    epoch,
    holds,
    key,
    pending,
    requests_of,
)
from tests.reliability.quota_invariants import (
    PREEMPTOR,
    TREE_RECLAIM_MARK,
    children_min_over_parent,
    in_tree,
    is_parent,
    preemptor_of,
    quota_of,
    reclaim_victim,
    reclaim_without_reservation,
    tree_look,
    tree_over_max,
    tree_quotas,
    tree_used,
)

ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KOORD_GANG = "gang.scheduling.koordinator.sh/name"
KOORD_LEGACY_GANG = "pod-group.scheduling.sigs.k8s.io/name"
RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
HOLDING = {"Available", "Waiting"}
BLOCKING_EFFECTS = {"NoSchedule", "NoExecute"}
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
# A fact about a node counts against a binding once seen this long before it: bindings
# carry second-resolution times, and a scheduler's view lags the API by a moment (on a
# loaded machine, seconds).
SLACK = 5.0
# A binding's time is its PodScheduled condition's, to the second: a node fact that ended
# within this after it (as the looks and the node watch saw it) may have ended before it.
BOUND_WITHIN = 2.0
PLACEABLE_WITHIN = 30.0
RECLAIM_WITHIN = 45.0
TRANSITION_WITHIN = 30.0
RECLAIM = "reclaim"  # the one way a reclaim is seen: the arithmetic, whichever node
# How late an eviction's event may come (the scheduler's event queue) and still be judged.
EVICTION_EVENT_WITHIN = 600.0


def gang_of(pod: Mapping[str, Any]) -> str | None:
    """The gang a pod names, as messages name it (``PodGroup ns/name``, ``Gang ns/name``):
    the PodGroup label first, then Koordinator's keys (the deprecated label, then the
    annotation), the order Berth documents."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace")
    if labels.get(POD_GROUP_LABEL):
        return f"PodGroup {namespace}/{labels[POD_GROUP_LABEL]}"
    name = labels.get(KOORD_LEGACY_GANG) or (meta.get("annotations") or {}).get(KOORD_GANG)
    return f"Gang {namespace}/{name}" if name else None


# -- placement rules, re-derived -----------------------------------------------------------


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        tkey = toleration.get("key")
        if toleration.get("operator") == "Exists":
            if not tkey or tkey == taint.get("key"):
                return True
        elif tkey == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def untolerated(spec: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    tolerations = spec.get("tolerations") or []
    return [
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, t)
    ]


def _requirement(req: Mapping[str, Any], value: str | None) -> bool:
    op, values = req.get("operator"), req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def selects(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and the required node affinity (terms ORed, requirements ANDed)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    fields = {"metadata.name": meta.get("name")}
    return any(
        all(_requirement(r, labels.get(r.get("key"))) for r in term.get("matchExpressions") or ())
        and all(_requirement(r, fields.get(r.get("key"))) for r in term.get("matchFields") or ())
        and (term.get("matchExpressions") or term.get("matchFields"))
        for term in required
    )


def node_facts(node: Mapping[str, Any]) -> dict[str, Any]:
    """What a binding is judged by on a node, each fact named, with what it says: its
    taints, its cordon and its label set."""
    spec = node.get("spec") or {}
    facts: dict[str, Any] = {
        f"taint {t.get('key')}={t.get('value', '')}:{t.get('effect')}": t
        for t in spec.get("taints") or []
    }
    if spec.get("unschedulable"):
        facts["cordoned"] = True
    labels = node["metadata"].get("labels") or {}
    facts["labels " + json.dumps(labels, sort_keys=True)] = labels
    return facts


@dataclass
class Span:
    """From when to when a node fact was seen holding (``end`` None: it still does)."""

    start: float
    end: float | None = None


def ignores_cordon(spec: Mapping[str, Any]) -> bool:
    """A pod tolerating the cordon's taint may be placed on a cordoned node (as
    kube-scheduler's NodeUnschedulable allows)."""
    return tolerates(spec.get("tolerations") or [], CORDON_TAINT)


def eligible(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Everything but capacity: the pinned node (a preemptor's reservation names the node
    its victims leave), cordon, taints, selector and affinity."""
    pinned = spec.get("nodeName")
    return (
        (not pinned or pinned == (node.get("metadata") or {}).get("name"))
        and (not (node.get("spec") or {}).get("unschedulable") or ignores_cordon(spec))
        and not untolerated(spec, node)
        and selects(spec, node)
    )


def owner_matches(owner: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    obj = owner.get("object")
    if obj:
        for k in ("uid", "name", "namespace"):
            if obj.get(k) and obj[k] != meta.get(k):
                return False
    controller = owner.get("controller")
    if controller:
        refs = meta.get("ownerReferences") or []
        if not any(
            r.get("controller")
            and r.get("kind") == controller.get("kind")
            and r.get("name") == controller.get("name")
            for r in refs
        ):
            return False
    selector = owner.get("labelSelector")
    if selector:
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
            return False
        for req in selector.get("matchExpressions") or ():
            if not _requirement(req, labels.get(req.get("key"))):
                return False
    return bool(obj or controller or selector)


def _selected(selector: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> bool:
    """A label selector over the pod's labels (a missing selector selects nothing)."""
    if selector is None:
        return False
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        _requirement(r, labels.get(r.get("key"))) for r in selector.get("matchExpressions") or ()
    )


def _anti_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ())


def is_owner(reservation: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    return any(owner_matches(o, pod) for o in (reservation.get("spec") or {}).get("owners") or ())


def allocated_from(pod: Mapping[str, Any]) -> str | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ALLOCATED)
    if not text:
        return None
    name = json.loads(text).get("name")
    return str(name) if name else None


def allocated_uid(pod: Mapping[str, Any]) -> str | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ALLOCATED)
    uid = json.loads(text).get("uid") if text else None
    return str(uid) if uid else None


def expiry(reservation: Mapping[str, Any]) -> float | None:
    spec = reservation.get("spec") or {}
    if spec.get("expires"):
        return epoch(spec["expires"])
    ttl = spec.get("ttl")
    if not ttl:
        return None
    seconds = duration_seconds(str(ttl))
    created = epoch(reservation["metadata"].get("creationTimestamp"))
    return None if not seconds or created is None else created + seconds


def _promised(reservation: Obj) -> str | None:
    """The uid of the one pod an allocateOnce reservation's ``currentOwners`` records, or
    None: the scheduler records it before binding it, and a reservation so recorded holds
    for that pod alone until it is bound, finishes or goes."""
    spec = reservation.get("spec") or {}
    recorded = (reservation.get("status") or {}).get("currentOwners") or []
    if not spec.get("allocateOnce", True) or len(recorded) != 1:
        return None
    uid = recorded[0].get("uid")
    return str(uid) if uid else None


def _held_for_preemptors(reservations: Mapping[str, Obj]) -> set[str]:
    """The pods (uids) a Reservation made by their preemption holds for (Waiting or
    Available)."""
    return {
        uid
        for r in reservations.values()
        if (uid := (r["metadata"].get("labels") or {}).get(PREEMPTOR))
        and (r.get("status") or {}).get("phase") in HOLDING
    }


# -- the snapshot ---------------------------------------------------------------------------


@dataclass
class Snapshot:
    taken_at: float
    nodes: dict[str, Obj]
    pods: list[Obj]
    quotas: list[Obj]
    reservations: list[Obj]
    preempted: list[Obj] = field(default_factory=list)  # Preempted events, as dicts
    # Pods of the churn's namespaces deleted since the look before, as a watch last
    # showed them: a pod created, bound and deleted between two looks is in no list.
    departed: list[Obj] = field(default_factory=list)
    # Nodes as the node watch showed them since the look before, each as it came (None:
    # deleted): a node can change more than once between two looks.
    node_changes: list[tuple[float, str, Obj | None]] = field(default_factory=list)
    podgroups: list[Obj] = field(default_factory=list)  # scheduler-plugins' PodGroups
    # Pods of the churn's namespaces a watch saw marked as a disruption's target since the
    # look before (a later status write may drop the mark before a look sees it), and
    # Reservations made for preemptors as a watch saw them (one may come and go between).
    disrupted: list[Obj] = field(default_factory=list)
    preemptor_reservations: list[Obj] = field(default_factory=list)
    topologies: dict[str, Obj] = field(default_factory=dict)  # NodeResourceTopology by name
    metrics: dict[str, Obj] = field(default_factory=dict)  # NodeMetric by name
    # For the migration judge (migration_invariants.py): the PodMigrationJobs of the pods of
    # the looked-at namespaces, and those namespaces' ReplicaSets and PodDisruptionBudgets;
    # a moment after the pods were read and before the reservations were.
    jobs: list[Obj] = field(default_factory=list)
    controllers: list[Obj] = field(default_factory=list)
    budgets: list[Obj] = field(default_factory=list)
    listed_at: float = 0.0

    def governing(self) -> dict[str, Obj]:
        """The flat quota of each namespace (the oldest, as the scheduler picks): a quota of
        a tree follows the tree's rules (quota_invariants.py), not the flat ones."""
        out: dict[str, Obj] = {}
        for quota in sorted(
            (q for q in self.quotas if not in_tree(q)),
            key=lambda q: (q["metadata"]["creationTimestamp"], q["metadata"]["name"]),
        ):
            out.setdefault(quota["metadata"]["namespace"], quota)
        return out


async def snapshot(api: ApiClient, namespaces: Iterable[str] = ()) -> Snapshot:
    """Everything the rules look at, read as raw JSON (client models cost seconds)."""
    core = CoreV1Api(api)
    custom = CustomObjectsApi(api)

    async def items(call: Any) -> list[Obj]:
        response = await call
        body = json.loads(await response.read())
        response.release()
        return list(body.get("items") or [])

    taken_at = time.time()
    nodes = {n["metadata"]["name"]: n for n in await items(core.list_node(_preload_content=False))}
    pods = await items(core.list_pod_for_all_namespaces(_preload_content=False))
    listed_at = time.time()
    quotas = await items(
        custom.list_cluster_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", _preload_content=False
        )
    )
    reservations = await items(
        custom.list_cluster_custom_object(
            "scheduling.koordinator.sh", "v1alpha1", "reservations", _preload_content=False
        )
    )
    podgroups = await items(
        custom.list_cluster_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", "podgroups", _preload_content=False
        )
    )
    topologies = await items(
        custom.list_cluster_custom_object(
            "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", _preload_content=False
        )
    )
    metrics = await items(
        custom.list_cluster_custom_object(
            "slo.koordinator.sh", "v1alpha1", "nodemetrics", _preload_content=False
        )
    )
    looked = set(namespaces)
    jobs = [
        j
        for j in await items(
            custom.list_cluster_custom_object(
                "scheduling.koordinator.sh", "v1alpha1", "podmigrationjobs", _preload_content=False
            )
        )
        if ((j.get("spec") or {}).get("podRef") or {}).get("namespace") in looked
    ]
    apps = AppsV1Api(api)
    controllers = [
        {**c, "kind": "ReplicaSet"}
        for c in await items(apps.list_replica_set_for_all_namespaces(_preload_content=False))
        if c["metadata"]["namespace"] in looked
    ]
    budgets = [
        b
        for b in await items(
            PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces(_preload_content=False)
        )
        if b["metadata"]["namespace"] in looked
    ]
    preempted: list[Obj] = []
    for namespace in namespaces:
        preempted += await items(
            core.list_namespaced_event(
                namespace, field_selector="reason=Preempted", _preload_content=False
            )
        )
    return Snapshot(
        taken_at,
        nodes,
        pods,
        quotas,
        reservations,
        preempted,
        podgroups=podgroups,
        topologies={t["metadata"]["name"]: t for t in topologies},
        metrics={m["metadata"]["name"]: m for m in metrics if m["metadata"]["name"] in nodes},
        jobs=jobs,
        controllers=controllers,
        budgets=budgets,
        listed_at=listed_at,
    )


# -- the checker ----------------------------------------------------------------------------


@dataclass
class Sighting:
    """What the checker last saw of a pod, kept after the pod is gone (to judge its
    eviction)."""

    pod: Obj
    quota_over_min: bool  # its namespace's quota was over its min then
    in_live_reservation: str | None  # allocated from this reservation, still holding


@dataclass
class Placed:
    """A binding and how long the checker saw its pod there."""

    pod: Obj
    node: str
    at: float  # the binding's time
    present: float  # last seen there (not being deleted)
    gone: float | None = None  # first seen gone (or being deleted)


def _timeline(
    placed: Placed,
    pods: list[Placed],
    domain: str,
    labels: dict[str, dict[str, str]],
    topology: str,
) -> str:
    """The pods counted in one domain, each with its binding and its end relative to
    ``placed``'s binding: what a skew report is read against the scheduler's log with."""

    def since(t: float | None) -> str:
        return "-" if t is None else f"{t - placed.at:+.1f}s"

    there = sorted(
        f"{p.pod['metadata']['name']}@{p.node}[{since(p.at)},{since(p.gone)}]"
        for p in pods
        if labels[p.node][topology] == domain
    )
    return f"{domain}: {' '.join(there)}"


@dataclass
class Checker:
    """Judges snapshots in order; keeps the history some rules need."""

    scheduler: str
    counts: Counter[str] = field(default_factory=Counter)
    # Each node's facts (a taint, the cordon, its label set) and the spans over which the
    # looks and the node watch saw each hold; what each fact says (a taint, the labels).
    _spans: dict[str, dict[str, list[Span]]] = field(default_factory=dict)
    _fact_says: dict[str, Any] = field(default_factory=dict)
    _node_version: dict[str, int] = field(default_factory=dict)  # the last applied, by node
    # Bindings whose node rules are due once the node watch has surely shown the binding's
    # moment: (pod, node, when it was bound).
    _node_judge: deque[tuple[Obj, str, float]] = field(default_factory=deque)
    _bound: set[str] = field(default_factory=set)
    _pods: dict[str, Sighting] = field(default_factory=dict)
    _judged_events: set[str] = field(default_factory=set)
    # What each quota namespace's pods count (uid -> demand), at this look and the one before.
    _counted: dict[str, dict[str, Amounts]] = field(default_factory=dict)
    _counted_before: dict[str, dict[str, Amounts]] = field(default_factory=dict)
    # Pending pods of each quota namespace at the look before, and every pod uid now: a pod
    # pending then and gone now may have been bound in between (the scheduler counts it
    # from its Reserve, before the binding lands) and deleted before a look saw it bound.
    _pending_before: dict[str, dict[str, Amounts]] = field(default_factory=dict)
    _pending: dict[str, dict[str, Amounts]] = field(default_factory=dict)
    _present: set[str] = field(default_factory=set)
    # Pods no look listed, deleted since the look before last (from the watch), by
    # namespace: each may have been counted by the scheduler (assumed, or bound) meanwhile.
    _unlisted_gone: list[dict[str, dict[str, Amounts]]] = field(default_factory=list)
    # Each look's quota pods as a scheduler may have counted them (those two looks in a row
    # saw, pending then gone, deleted unlisted), kept for ``EVICTION_EVENT_WITHIN``: an
    # eviction's event may come long after it (the scheduler sends events from a queue),
    # and it is judged by the looks around the eviction itself.
    _quota_looks: deque[tuple[float, dict[str, dict[str, Amounts]]]] = field(default_factory=deque)
    # Each pod's leaving (being deleted, or gone): the look before it and the look that saw it.
    _left: dict[str, tuple[float, float]] = field(default_factory=dict)
    _event_seen: dict[str, float] = field(default_factory=dict)  # Preempted events, first seen
    _names: dict[str, str] = field(default_factory=dict)  # reservations' uids, for reports
    # Waiting pods, by uid: since when each way of placing them (a node with room, a
    # reservation of theirs, a reclaim) has been seen at every look.
    _placeable_since: dict[str, dict[str, float]] = field(default_factory=dict)
    _reclaimable_since: dict[str, dict[str, float]] = field(default_factory=dict)
    _terminal_seen: dict[str, float] = field(default_factory=dict)
    _node_gone_seen: dict[str, float] = field(default_factory=dict)
    _owner_bound_seen: dict[str, float] = field(default_factory=dict)
    _once_owners: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # (node, resource) over allocatable at the last look: reported when a second look in a
    # row finds it so. A pod placed into an allocateOnce reservation frees what it does
    # not use at once (its Reserve), before its owner record lands in the API: for that
    # moment the reservation looks whole beside the pod given the rest.
    _over_before: dict[tuple[str, str], float] = field(default_factory=dict)  # -> first look
    _placed: dict[str, Placed] = field(default_factory=dict)  # every binding seen, by uid
    _node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # kept once gone
    # First and last look that saw each node: pods on a deleted node count for no scheduler.
    _node_seen: dict[str, tuple[float, float]] = field(default_factory=dict)
    _to_judge: list[str] = field(default_factory=list)  # bindings whose pod rules are due
    # Pods pending at one look and gone at the next, never seen bound: each may have been
    # bound anywhere in between (and been counted by the scheduler), then deleted or
    # preempted. (pod, the look before, the look after.)
    _vanished: list[tuple[Obj, float, float]] = field(default_factory=list)
    _waiting_before: dict[str, Obj] = field(default_factory=dict)
    _look_before: float = 0.0
    bound_per_namespace: Counter[str] = field(default_factory=Counter)
    # Pending pods some node surely takes now (directly, or by reclaim), by name.
    placeable: list[str] = field(default_factory=list)
    # The longest a waiting pod was seen placeable (by each rule) before it was bound, in
    # seconds as the looks saw it, beside the rule's bound: the liveness figures.
    longest_wait: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Off while the scheduler is being killed on purpose: its bounds start when it is on.
    liveness: bool = True
    _live_since: float = 0.0
    # Quota trees: the tree quotas of the last look, the leaves borrowing then (using more
    # than their min), Preempted events judged for their Reservation, and what the order
    # is judged by: reclaim victims as last seen marked, preemptors' Reservations as seen.
    _tree: dict[str, Obj] = field(default_factory=dict)
    _borrowing: set[str] = field(default_factory=set)
    _order_judged: set[str] = field(default_factory=set)
    _order_seen: dict[str, float] = field(default_factory=dict)
    _marked: dict[str, Obj] = field(default_factory=dict)
    _preemptor_reservations: dict[str, Obj] = field(default_factory=dict)
    _tree_reclaimable_since: dict[str, dict[str, float]] = field(default_factory=dict)
    _reported: set[str] = field(default_factory=set)  # reported once already

    def check(self, snap: Snapshot) -> list[str]:
        self.counts["checks"] += 1
        found: list[str] = []
        self._remember_nodes(snap)
        reservations = {r["metadata"]["name"]: r for r in snap.reservations}
        for r in reservations.values():
            if (r.get("status") or {}).get("phase") in TERMINAL:
                # By uid: a preemptor's reservation has a name of its own per pod, and
                # one made again after the first ended (its node deleted) is another.
                self._terminal_seen.setdefault(r["metadata"]["uid"], snap.taken_at)
        live = [p for p in snap.pods if holds(p)]
        self._tree = tree_quotas(snap.quotas)
        found += self._capacity(snap, live, reservations)
        found += self._quotas(snap, live)
        found += self._trees(snap, live)
        found += self._reservations(snap, live, reservations)
        found += self._new_bindings(snap, reservations)
        found += self._node_rules(snap.taken_at)
        found += self._misexplained(snap)
        found += self._pod_rules(snap)
        over_min = self._over_min(snap, live)
        self._remember_pods(snap, over_min, reservations)
        found += self._evictions(snap, over_min, reservations)
        if self.liveness:
            self._live_since = self._live_since or snap.taken_at
            found += self._liveness(snap, live, reservations)
            found += self._transitions(snap, reservations, TRANSITION_WITHIN)
        else:
            self._live_since = 0.0
            for since in (
                self._placeable_since,
                self._reclaimable_since,
                self._tree_reclaimable_since,
            ):
                since.clear()
            for seen in (self._node_gone_seen, self._owner_bound_seen):
                seen.clear()
        return found

    def at_rest(self, snap: Snapshot) -> list[str]:
        """What must also hold once the load has stopped and things settled."""
        reservations = {r["metadata"]["name"]: r for r in snap.reservations}
        found = self._transitions(snap, reservations, 0, once=False)
        live = [p for p in snap.pods if holds(p)]
        owners: dict[str, list[str]] = defaultdict(list)
        for pod in live:
            name = allocated_from(pod)
            if name:
                owners[name].append(key(pod))
        waiting = {p["metadata"]["uid"] for p in snap.pods if pending(p)}
        for r in snap.reservations:
            status = r.get("status") or {}
            if status.get("phase") not in HOLDING:
                continue
            listed = sorted(
                f"{o['namespace']}/{o['name']}" for o in status.get("currentOwners") or []
            )
            actual = sorted(owners.get(r["metadata"]["name"], []))
            promised = _promised(r)
            if not actual and promised is not None and promised in waiting:
                # Recorded by an attempt whose binding never happened (a scheduler killed
                # between the two): its pod still waits, and the reservation is its alone
                # (docs/reservation.md). Whether it could go in now is the liveness check's.
                continue
            if listed != actual:
                found.append(
                    f"reservation {r['metadata']['name']}: currentOwners {listed} != {actual}"
                )
        used = self._used(live)
        for namespace, quota in snap.governing().items():
            reported = amounts((quota.get("status") or {}).get("used"))
            spec = quota.get("spec") or {}
            counted = dict(used.get(namespace, {}))
            if "pods" not in spec.get("min", {}) and "pods" not in spec.get("max", {}):
                counted.pop("pods", None)  # reported only when a limit names it
            for k in sorted(set(reported) | set(counted)):
                if reported.get(k, Decimal(0)) != counted.get(k, Decimal(0)):
                    found.append(
                        f"quota {namespace}: status.used {k} {reported.get(k, 0)} "
                        f"!= pods' {counted.get(k, 0)}"
                    )
        return found

    # -- safety ----------------------------------------------------------------------------

    def _capacity(self, snap: Snapshot, live: list[Obj], reservations: dict[str, Obj]) -> list[str]:
        used: dict[str, Amounts] = defaultdict(dict)
        # What holds each node, for the report: pods (with their reservation) and reservations.
        holders: dict[str, list[str]] = defaultdict(list)
        for pod in live:
            _add(used[pod["spec"]["nodeName"]], demand(pod["spec"]))
            into = allocated_from(pod)
            holders[pod["spec"]["nodeName"]].append(
                f"{key(pod)} {demand(pod['spec']).get('cpu', 0)}" + (f" in {into}" if into else "")
            )
        taken: dict[str, Amounts] = defaultdict(dict)
        for pod in live:
            name = allocated_from(pod)
            if name:
                _add(taken[name], requests_of(pod["spec"]))
        for name, r in reservations.items():
            status = r.get("status") or {}
            # Waiting ones (preAllocation) are placed without free capacity, by design.
            if status.get("phase") != "Available" or not status.get("nodeName"):
                continue
            if r["spec"].get("allocateOnce", True) and (
                taken.get(name) or status.get("currentOwners") or self._once_owners.get(name)
            ):
                # allocateOnce and its owner is in, was seen in, or is recorded (the
                # scheduler records it before binding): what it did not use is released at
                # once (docs/reservation.md), before the operator writes Succeeded.
                continue
            held = requests_of((r["spec"].get("template") or {}).get("spec") or {})
            left = {k: max(Decimal(0), v - taken[name].get(k, Decimal(0))) for k, v in held.items()}
            _add(used[status["nodeName"]], left)
            holders[status["nodeName"]].append(f"reservation {name} {left.get('cpu', 0)}")
        found = []
        over: dict[tuple[str, str], float] = {}
        for node, resources in used.items():
            if node not in snap.nodes:
                continue  # deleted meanwhile
            allocatable = amounts(snap.nodes[node]["status"].get("allocatable"))
            for k in _over(resources, allocatable):
                since = over[(node, k)] = self._over_before.get((node, k), snap.taken_at)
                if since == snap.taken_at:
                    continue
                found.append(
                    f"node {node}: {resources[k]} {k} used > {allocatable[k]} allocatable "
                    f"({', '.join(sorted(holders[node]))}), at the looks of {clock(since)} "
                    f"and {clock(snap.taken_at)}"
                )
        self._over_before = over
        return found

    @staticmethod
    def _used(live: list[Obj], *, counting_leaving: bool = True) -> dict[str, Amounts]:
        per_namespace: dict[str, Amounts] = defaultdict(dict)
        for pod in live:
            if counting_leaving or not pod["metadata"].get("deletionTimestamp"):
                _add(per_namespace[pod["metadata"]["namespace"]], demand(pod["spec"]))
        return per_namespace

    def _quotas(self, snap: Snapshot, live: list[Obj]) -> list[str]:
        # Pods being deleted (preemption victims on their way out) are not counted: their
        # capacity is already promised to the pod nominated in their place.
        used = self._used(live, counting_leaving=False)
        found = []
        total_used: Amounts = {}
        total_min: Amounts = {}
        for namespace, quota in snap.governing().items():
            spec = quota.get("spec") or {}
            maximum = amounts(spec.get("max"))
            mine = used.get(namespace, {})
            for k in _over(mine, maximum):
                found.append(f"quota {namespace}: {mine[k]} {k} used > max {maximum[k]}")
            _add(total_used, mine)
            _add(total_min, amounts(spec.get("min")))
        orphans = sum(
            1
            for p in live
            if p["metadata"]["namespace"] in snap.governing()
            and p["spec"]["nodeName"] not in snap.nodes
        )
        for k in _over(total_used, total_min):
            found.append(
                f"quotas together use {total_used[k]} {k} > the sum of mins {total_min[k]}"
                f" ({orphans} of their pods on deleted nodes)"
            )
        return found

    def _trees(self, snap: Snapshot, live: list[Obj]) -> list[str]:
        """The quota trees' rules on this look: no quota over its max (or min + borrowing
        limit) at any level, counting the pods that are not leaving, as for flat quotas;
        children's mins within their parent's (reported once); and each reclaim eviction
        after a Reservation of its preemptor, judged once its event has been seen for
        ``2 * SLACK`` (its victim, marked, may show only in the watch). Counts the leaves
        that start borrowing and the tree's reclaims: a run without them proves nothing
        of the tree."""
        staying = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        found = tree_over_max(snap.quotas, staying)
        for line in children_min_over_parent(snap.quotas):
            if line not in self._reported:
                self._reported.add(line)
                found.append(line)
        borrowing = {
            name
            for name, used in tree_used(snap.quotas, staying).items()
            if not is_parent(self._tree[name])
            and _over(used, amounts((self._tree[name].get("spec") or {}).get("min")))
        }
        self.counts["tree borrows"] += len(borrowing - self._borrowing)
        self._borrowing = borrowing
        for pod in (*snap.pods, *snap.departed, *snap.disrupted):
            if reclaim_victim(pod):
                self._marked[pod["metadata"]["uid"]] = pod
        for r in (*snap.reservations, *snap.preemptor_reservations):
            if PREEMPTOR in (r["metadata"].get("labels") or {}):
                self._preemptor_reservations[r["metadata"]["uid"]] = r
        for event in snap.preempted:
            uid = event["metadata"]["uid"]
            if uid in self._order_judged:
                continue
            victim_uid = (event.get("involvedObject") or {}).get("uid", "")
            victim = self._marked.get(victim_uid)
            first = self._order_seen.setdefault(uid, snap.taken_at)
            if victim is None and snap.taken_at < first + 2 * SLACK:
                continue
            self._order_judged.add(uid)
            if victim is None:
                continue  # a preemption by priority, not a reclaim
            self.counts["reclaims judged for their reservation"] += 1
            self.counts["tree reclaims"] += int(reclaim_victim(victim, TREE_RECLAIM_MARK))
            found += reclaim_without_reservation(
                [event], {victim_uid: victim}, self._preemptor_reservations.values()
            )
        return found

    def _reservations(
        self, snap: Snapshot, live: list[Obj], reservations: dict[str, Obj]
    ) -> list[str]:
        found = []
        taken: dict[str, Amounts] = defaultdict(dict)
        for pod in live:
            name = allocated_from(pod)
            r = reservations.get(name or "")
            if name is None or r is None:
                continue  # ended and collected since: its owners keep running
            who = key(pod)
            if not is_owner(r, pod):
                found.append(f"pod {who} allocated from reservation {name} but is not its owner")
            node = (r.get("status") or {}).get("nodeName")
            if node and pod["spec"]["nodeName"] != node:
                found.append(f"pod {who} allocated from reservation {name} on {node} runs on "
                             f"{pod['spec']['nodeName']}")  # fmt: skip
            _add(taken[name], requests_of(pod["spec"]))
            if r["spec"].get("allocateOnce", True):
                self._once_owners[name].add(pod["metadata"]["uid"])
                if len(self._once_owners[name]) > 1:
                    found.append(
                        f"allocateOnce reservation {name} allocated to "
                        f"{len(self._once_owners[name])} pods"
                    )
        for name, used in taken.items():
            spec = reservations[name]["spec"]
            if spec.get("allocatePolicy") != "Restricted":
                continue
            held = requests_of((spec.get("template") or {}).get("spec") or {})
            for k in _over(used, held):
                found.append(
                    f"reservation {name} (Restricted): owners use {used[k]} {k} > {held[k]}"
                )
        return found

    def _remember_nodes(self, snap: Snapshot) -> None:
        """Each node's facts over time, from the look and from the node watch's changes
        since the look before, in the order they were seen: a node cordoned, uncordoned
        and cordoned again between two looks is seen so by the watch, or a binding made
        while it was uncordoned would be judged against the first cordon. A version older
        than one applied (a watch event behind the list) is passed over."""
        for name, node in snap.nodes.items():
            self._node_labels[name] = dict(node["metadata"].get("labels") or {})
            first, _ = self._node_seen.get(name, (snap.taken_at, snap.taken_at))
            self._node_seen[name] = (first, snap.taken_at)
        gone = [n for n in self._spans if n not in snap.nodes]
        seen: list[tuple[float, str, Obj | None]] = [
            *snap.node_changes,
            *((snap.taken_at, name, node) for name, node in snap.nodes.items()),
            *((snap.taken_at, name, None) for name in gone),
        ]
        for at, name, node in sorted(seen, key=lambda s: s[0]):
            self._observe(at, name, node)
        for name in list(self._spans):
            facts = self._spans[name]
            for fact in list(facts):
                facts[fact] = [
                    s for s in facts[fact] if s.end is None or s.end > snap.taken_at - 120
                ]
                if not facts[fact]:
                    del facts[fact]
            if not facts:
                del self._spans[name]

    def _observe(self, at: float, name: str, node: Obj | None) -> None:
        if node is not None:
            version = str(node["metadata"].get("resourceVersion") or "")
            if version.isdigit():
                if int(version) <= self._node_version.get(name, -1):
                    return
                self._node_version[name] = int(version)
        else:
            self._node_version.pop(name, None)
        facts = node_facts(node) if node is not None else {}
        spans = self._spans.setdefault(name, {})
        for fact, history in spans.items():
            if history[-1].end is None and fact not in facts:
                history[-1].end = at
        for fact, says in facts.items():
            self._fact_says.setdefault(fact, says)
            history = spans.setdefault(fact, [])
            if not history or history[-1].end is not None:
                history.append(Span(at))

    @property
    def judging(self) -> bool:
        """Bindings still waiting for the looks to pass their moment."""
        return bool(self._node_judge)

    def _held(self, node: str, fact: str, when: float) -> bool:
        """The fact was seen holding from ``SLACK`` before the binding until after it."""
        return any(
            s.start <= when - SLACK and (s.end is None or s.end >= when + BOUND_WITHIN)
            for s in self._spans.get(node, {}).get(fact, ())
        )

    def _node_rules(self, now: float) -> list[str]:
        """The bindings whose moment the looks and the node watch have surely passed,
        judged by the node's facts then: cordon, taints, selector and affinity."""
        found = []
        while self._node_judge and self._node_judge[0][2] + SLACK <= now:
            pod, node_name, when = self._node_judge.popleft()
            who = key(pod)
            spec = pod["spec"]
            for fact in list(self._spans.get(node_name, {})):
                if not self._held(node_name, fact, when):
                    continue
                says = self._fact_says[fact]
                if fact == "cordoned":
                    if not ignores_cordon(spec):
                        found.append(f"pod {who} bound to {node_name} after it was cordoned")
                elif fact.startswith("taint "):
                    if says.get("effect") in BLOCKING_EFFECTS and not tolerates(
                        spec.get("tolerations") or [], says
                    ):
                        found.append(f"pod {who} bound to {node_name} despite untolerated {fact}")
                elif not selects(spec, {"metadata": {"name": node_name, "labels": says}}):
                    found.append(f"pod {who} bound to {node_name}: nodeSelector/affinity not met")
        return found

    def _new_bindings(self, snap: Snapshot, reservations: dict[str, Obj]) -> list[str]:
        """Count each binding once, judge it by the reservations as they were (surely) when
        it was made, and queue it for the node rules."""
        found = []
        for pod in snap.pods:
            uid = pod["metadata"]["uid"]
            node_name = pod["spec"].get("nodeName")
            if (
                not node_name
                or uid in self._bound
                or pod["spec"].get("schedulerName") != self.scheduler
            ):
                continue
            self._bound.add(uid)
            self._to_judge.append(uid)
            self.counts["bindings judged"] += 1
            self.bound_per_namespace[pod["metadata"]["namespace"]] += 1
            # Without the binding's own time, the earliest it can have been: the look before.
            when = bound_at(pod) or self._look_before or snap.taken_at
            self._node_judge.append((pod, node_name, when))
            name = allocated_from(pod)
            into = allocated_uid(pod)
            if into is None and name in reservations:
                into = reservations[name]["metadata"]["uid"]
            ended = self._terminal_seen.get(into or "")
            if name and ended is not None and ended <= when - SLACK:
                found.append(f"pod {key(pod)} allocated from reservation {name} after it ended")
        return found

    def _misexplained(self, snap: Snapshot) -> list[str]:
        """A bound pod whose PodScheduled condition says False: the binding sets it True,
        so a scheduler wrote a refusal over its own binding (users read it as pending)."""
        found = []
        for pod in snap.pods:
            if (
                not pod["spec"].get("nodeName")
                or pod["spec"].get("schedulerName") != self.scheduler
            ):
                continue
            for condition in (pod.get("status") or {}).get("conditions") or ():
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    what = f"pod {key(pod)} bound to {pod['spec']['nodeName']} but its PodScheduled"
                    what += f" condition says {condition.get('reason')}: {condition.get('message')}"
                    if what not in self._reported:
                        self._reported.add(what)
                        found.append(what)
        return found

    def _pod_rules(self, snap: Snapshot) -> list[str]:
        """Record where every pod is, then judge the bindings made ``SLACK`` ago or more
        by the rules between pods (anti-affinity, spread)."""
        now = snap.taken_at
        seen: set[str] = set()
        for pod in snap.pods:
            node = pod["spec"].get("nodeName")
            if not node or not holds(pod):
                continue
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            placed = self._placed.get(uid)
            if placed is None:
                placed = self._placed[uid] = Placed(pod, node, bound_at(pod) or now, now)
            if pod["metadata"].get("deletionTimestamp"):
                placed.gone = placed.gone or now
            else:
                placed.present = now
        for uid, placed in self._placed.items():
            if uid not in seen and placed.gone is None:
                placed.gone = now
        uids = {pod["metadata"]["uid"] for pod in snap.pods}
        self._vanished = [v for v in self._vanished if v[2] >= now - 4 * SLACK]
        self._vanished += [
            (pod, self._look_before, now)
            for uid, pod in self._waiting_before.items()
            if uid not in uids and uid not in self._placed
        ]
        self._waiting_before = {p["metadata"]["uid"]: p for p in snap.pods if pending(p)}
        self._look_before = now
        found = []
        due = [u for u in self._to_judge if self._placed.get(u) and
               self._placed[u].at + SLACK <= now]  # fmt: skip
        self._to_judge = [u for u in self._to_judge if u not in due]
        for uid in due:
            placed = self._placed[uid]
            if placed.pod["spec"].get("schedulerName") == self.scheduler:
                found += self._anti_affinity(placed) + self._spread(placed)
        return found

    def _node_there(self, node: str, at: float, surely: bool) -> bool:
        """Whether the node surely (or possibly) existed around ``at``: a scheduler counts
        no pod of a deleted node (kube-scheduler's snapshot lists existing nodes only),
        though the pod object stays until the garbage collector removes it."""
        first, last = self._node_seen.get(node, (math.inf, -math.inf))
        if surely:
            return first <= at - SLACK and last >= at + SLACK
        return first <= at + SLACK and last >= at - SLACK

    def _there(self, placed: Placed, surely: bool) -> list[Placed]:
        """Other pods of the cluster surely (or possibly) there when ``placed`` was bound."""
        at = placed.at
        if surely:
            return [
                p
                for p in self._placed.values()
                if p is not placed
                and p.at <= at - SLACK
                and p.present >= at + SLACK
                and self._node_there(p.node, at, surely=True)
            ]
        return [
            p
            for p in self._placed.values()
            if p is not placed
            and p.at <= at + SLACK
            and (p.gone is None or p.gone >= at - SLACK)
            and self._node_there(p.node, at, surely=False)
        ]

    def _domain(self, node: str, key: str) -> str | None:
        return self._node_labels.get(node, {}).get(key)

    def _anti_affinity(self, placed: Placed) -> list[str]:
        """Its required anti-affinity terms, and those of the pods already there."""
        if _anti_terms(placed.pod):
            self.counts["anti-affinity bindings judged"] += 1
        found = []
        for other in self._there(placed, surely=True):
            for a, b in ((placed, other), (other, placed)):
                for term in _anti_terms(a.pod):
                    namespaces = term.get("namespaces") or [a.pod["metadata"]["namespace"]]
                    key_ = term.get("topologyKey") or ""
                    domain = self._domain(a.node, key_)
                    if (
                        b.pod["metadata"]["namespace"] in namespaces
                        and _selected(term.get("labelSelector"), b.pod)
                        and domain is not None
                        and domain == self._domain(b.node, key_)
                    ):
                        found.append(
                            f"pod {key(placed.pod)} bound to {placed.node} beside "
                            f"{key(other.pod)} against {key(a.pod)}'s anti-affinity ({key_})"
                        )
        return found

    def _spread(self, placed: Placed) -> list[str]:
        """Its DoNotSchedule constraints: the pods surely in its domain, plus itself, less
        the fewest that may have been in any domain its nodes span, at most maxSkew."""
        found = []
        spec = placed.pod["spec"]
        namespace = placed.pod["metadata"]["namespace"]
        for c in spec.get("topologySpreadConstraints") or ():
            if c.get("whenUnsatisfiable") != "DoNotSchedule":
                continue
            self.counts["spread bindings judged"] += 1
            topology = c.get("topologyKey") or ""
            eligible = {
                n
                for n, labels in self._node_labels.items()
                if topology in labels and selects(spec, {"metadata": {"name": n, "labels": labels}})
            }
            # The domains of nodes surely there: one whose nodes may all have been deleted
            # may be no domain the scheduler counted.
            domains = {
                self._node_labels[n][topology]
                for n in eligible
                if self._node_there(n, placed.at, surely=True)
            }
            mine = self._domain(placed.node, topology)
            if mine is None or not domains:
                continue
            selector = c.get("labelSelector")
            counted = {
                sure: [
                    p
                    for p in self._there(placed, surely=sure)
                    if p.node in eligible
                    and p.pod["metadata"]["namespace"] == namespace
                    and _selected(selector, p.pod)
                ]
                for sure in (True, False)
            }
            surely, possibly = (
                Counter(self._node_labels[p.node][topology] for p in counted[sure])
                for sure in (True, False)
            )
            # A pod of the kind that vanished unseen around then may have been in any
            # domain, the least loaded one too.
            unseen = sum(
                1
                for pod, after, before in self._vanished
                if pod["metadata"]["namespace"] == namespace
                and _selected(selector, pod)
                and after <= placed.at + SLACK
                and before >= placed.at - SLACK
            )
            fewest = min(domains, key=lambda d: possibly[d])
            least = possibly[fewest] + unseen
            skew = surely[mine] + int(_selected(selector, placed.pod)) - least
            if skew > int(c.get("maxSkew") or 1):
                found.append(
                    f"pod {key(placed.pod)} bound to {placed.node} ({topology} {mine}): skew "
                    f"{skew} > {c.get('maxSkew')} ({dict(surely)} surely there, "
                    f"{dict(possibly)} possibly, {unseen} vanished unseen; fewest {least}) "
                    f"{_timeline(placed, counted[True], mine, self._node_labels, topology)} "
                    f"{_timeline(placed, counted[False], fewest, self._node_labels, topology)}"
                )
        return found

    def _over_min(self, snap: Snapshot, live: list[Obj]) -> set[str]:
        """Quota namespaces over their min, counting what a scheduler counts: bound pods
        and pods nominated to a node (the scheduler's in-flight bindings are not visible
        here; see ``_evictions``)."""
        used = self._used(live)
        counted: dict[str, dict[str, Amounts]] = defaultdict(dict)
        for pod in live:
            counted[pod["metadata"]["namespace"]][pod["metadata"]["uid"]] = demand(pod["spec"])
        for pod in snap.pods:
            if pending(pod) and (pod.get("status") or {}).get("nominatedNodeName"):
                _add(used[pod["metadata"]["namespace"]], demand(pod["spec"]))
                counted[pod["metadata"]["namespace"]][pod["metadata"]["uid"]] = demand(pod["spec"])
        self._counted_before, self._counted = self._counted, counted
        waiting: dict[str, dict[str, Amounts]] = defaultdict(dict)
        for pod in snap.pods:
            if pending(pod) and pod["metadata"]["uid"] not in counted[pod["metadata"]["namespace"]]:
                waiting[pod["metadata"]["namespace"]][pod["metadata"]["uid"]] = demand(pod["spec"])
        self._pending_before, self._pending = self._pending, waiting
        self._present = {pod["metadata"]["uid"] for pod in snap.pods}
        unlisted: dict[str, dict[str, Amounts]] = defaultdict(dict)
        for pod in snap.departed:
            if pod["metadata"]["uid"] not in self._pods:
                unlisted[pod["metadata"]["namespace"]][pod["metadata"]["uid"]] = demand(pod["spec"])
        self._unlisted_gone = [*self._unlisted_gone[-1:], unlisted]
        may_count: dict[str, dict[str, Amounts]] = defaultdict(dict)
        for namespace, pods in (*self._pending_before.items(), *unlisted.items()):
            may_count[namespace].update(
                (uid, amounts_) for uid, amounts_ in pods.items() if uid not in self._present
            )
        for namespace, pods in counted.items():
            may_count[namespace].update(pods)
        self._quota_looks.append((snap.taken_at, may_count))
        while self._quota_looks and self._quota_looks[0][0] < snap.taken_at - EVICTION_EVENT_WITHIN:
            self._quota_looks.popleft()
        return {
            namespace
            for namespace, quota in snap.governing().items()
            if _over(used.get(namespace, {}), amounts((quota.get("spec") or {}).get("min")))
        }

    def _remember_pods(
        self, snap: Snapshot, over_min: set[str], reservations: dict[str, Obj]
    ) -> None:
        before = self._quota_looks[-2][0] if len(self._quota_looks) > 1 else snap.taken_at
        leaving = [
            p["metadata"]["uid"] for p in snap.pods if p["metadata"].get("deletionTimestamp")
        ]
        leaving += [uid for uid in self._pods if uid not in self._present]
        for uid in leaving:
            self._left.setdefault(uid, (before, snap.taken_at))
        for pod in snap.pods:
            name = allocated_from(pod)
            holding = (
                name
                if name
                and ((reservations.get(name) or {}).get("status") or {}).get("phase") in HOLDING
                and not (reservations[name]["spec"].get("allocateOnce", True))
                else None
            )
            over = pod["metadata"]["namespace"] in over_min
            self._pods[pod["metadata"]["uid"]] = Sighting(pod, over, holding)

    def _evictions(
        self, snap: Snapshot, over_min: set[str], reservations: dict[str, Obj]
    ) -> list[str]:
        """Judge each eviction once, by the looks around the eviction (not around its
        event, which may come much later). The victim's quota counts as over its min if it
        was at the victim's last sighting, or counting every pod of the quota the looks
        from the one before the victim left to ``SLACK`` after saw: bindings the scheduler
        had in flight at its decision land in that time."""
        found = []
        governing = snap.governing()
        for event in snap.preempted:
            uid = event["metadata"]["uid"]
            if uid in self._judged_events:
                continue
            victim_uid = (event.get("involvedObject") or {}).get("uid", "")
            first_seen = self._event_seen.setdefault(uid, snap.taken_at)
            left = self._left.get(victim_uid)
            due = first_seen + 2 * SLACK if left is None else left[1] + SLACK
            if snap.taken_at < due:
                continue  # its window is not over yet
            self._judged_events.add(uid)
            preemptor_uid = preemptor_of(event)
            victim = self._pods.get(victim_uid)
            preemptor = self._pods.get(preemptor_uid)
            if victim is None or preemptor is None:
                self.counts["evictions unjudged"] += 1
                continue
            self.counts["evictions judged"] += 1
            namespace = victim.pod["metadata"]["namespace"]
            quota = governing.get(namespace)
            detail = ""
            if quota is not None and not victim.quota_over_min:
                # Every pod of the quota a look of the window counted (bindings then in
                # flight land in it, pods deleted meanwhile were there before), a pod
                # pending at one look and gone at the next (it may have been bound in
                # between and deleted), one no look listed that the watch saw deleted
                # meanwhile, and the victim. Without a seen leaving: the last two looks.
                start, end = left or (-math.inf, math.inf)
                window = [looked for at, looked in self._quota_looks if start <= at <= end + SLACK]
                pods = {victim_uid: demand(victim.pod["spec"])}
                for looked in window if left else list(self._quota_looks)[-2:]:
                    pods.update(looked.get(namespace, {}))
                then: Amounts = {}
                for amounts_ in pods.values():
                    _add(then, amounts_)
                least = amounts((quota.get("spec") or {}).get("min"))
                if _over(then, least):
                    victim = Sighting(victim.pod, True, victim.in_live_reservation)
                detail = (
                    " (its pods either look saw: "
                    + ", ".join(f"{k} {then.get(k, 0)} of {v}" for k, v in sorted(least.items()))
                    + ")"
                )
            found += self._allowed(victim, preemptor, governing, reservations, detail, self._tree)
        return found

    @staticmethod
    def _allowed(
        victim: Sighting,
        preemptor: Sighting,
        governing: dict[str, Obj],
        reservations: dict[str, Obj],
        detail: str = "",
        tree: dict[str, Obj] | None = None,
    ) -> list[str]:
        """A pod of a tree quota takes pods of other tree quotas only, whatever their
        priority; whether each victim's quota was over its runtime is not judged (the
        objects give runtimes only as bounds). A pod outside the tree takes a tree
        quota's pod by priority, as a pod of no quota does."""
        v, p = victim.pod, preemptor.pod
        what = f"{key(p)} preempted {key(v)}"
        v_ns, p_ns = v["metadata"]["namespace"], p["metadata"]["namespace"]
        v_priority = v["spec"].get("priority") or 0
        p_priority = p["spec"].get("priority") or 0
        found = []
        p_leaf = quota_of(p, tree or {})
        if p_leaf is not None:
            v_leaf = quota_of(v, tree or {})
            if v_leaf is None or v_leaf == p_leaf:
                found.append(f"{what}: a tree quota's pod reclaims from other tree quotas only")
        elif (v_ns in governing) != (p_ns in governing):
            found.append(f"{what}: quota and quota-less pods never preempt each other")
        elif v_ns in governing and v_ns != p_ns:
            if not victim.quota_over_min:
                found.append(f"{what}: the victim's quota was not over its min{detail}")
        elif v_priority >= p_priority:
            found.append(f"{what}: priority {v_priority} is not below {p_priority}")
        reservation = reservations.get(victim.in_live_reservation or "")
        if reservation is not None and not is_owner(reservation, p):
            found.append(
                f"{what}: reserved capacity of {victim.in_live_reservation} for a stranger"
            )
        return found

    # -- liveness --------------------------------------------------------------------------

    def _liveness(self, snap: Snapshot, live: list[Obj], reservations: dict[str, Obj]) -> list[str]:
        """Pods some node surely takes now, and how long each has been so."""
        free: dict[str, Amounts] = {
            n: amounts(node["status"].get("allocatable")) for n, node in snap.nodes.items()
        }
        on_node: dict[str, list[Obj]] = defaultdict(list)
        for pod in live:
            if pod["spec"]["nodeName"] in free:
                _add(free[pod["spec"]["nodeName"]], demand(pod["spec"]), -1)
                on_node[pod["spec"]["nodeName"]].append(pod)
        for r in reservations.values():
            status = r.get("status") or {}
            if status.get("phase") in HOLDING and status.get("nodeName") in free:
                spec = (r["spec"].get("template") or {}).get("spec") or {}
                _add(free[status["nodeName"]], demand(spec), -1)
        used = self._used(live)
        governing = snap.governing()
        waiting = [
            p for p in snap.pods if pending(p) and p["spec"].get("schedulerName") == self.scheduler
        ]
        nominated: dict[str, tuple[str, Amounts]] = {}
        for pod in waiting:
            node = (pod.get("status") or {}).get("nominatedNodeName")
            if node in free:
                nominated[pod["metadata"]["uid"]] = (node, demand(pod["spec"]))
                _add(free[node], demand(pod["spec"]), -1)
                _add(used.setdefault(pod["metadata"]["namespace"], {}), demand(pod["spec"]))
        total_used: Amounts = {}
        total_min: Amounts = {}
        for namespace, limited in governing.items():
            _add(total_used, used.get(namespace, {}))
            _add(total_min, amounts((limited.get("spec") or {}).get("min")))

        taken: dict[str, list[Obj]] = defaultdict(list)  # reservation -> its owners
        for pod in live:
            if name := allocated_from(pod):
                taken[name].append(pod)
        # uid -> each way that surely places it now (a node, a reservation of its own, a
        # reclaim) -> what it is, for the report.
        placeable_now: dict[str, dict[str, Callable[[], str]]] = {}
        placements = _Placements.of(snap, live, waiting)
        reclaimable_now: dict[str, dict[str, Callable[[], str]]] = {}
        tree_reclaimable_now: dict[str, dict[str, Callable[[], str]]] = {}
        # The nodes the scheduler surely sees: those the looks have seen for SLACK.
        sure = [n for n in snap.nodes if self._node_seen[n][0] <= snap.taken_at - SLACK]
        trees = tree_look(snap.quotas, snap.pods, snap.nodes, sure)
        held_for = _held_for_preemptors(reservations)
        for pod in waiting:
            if RESERVATION_AFFINITY in (pod["metadata"].get("annotations") or {}):
                continue  # decided by its reservations alone
            if gang_of(pod) is not None:
                continue  # decided with its gang (gang_invariants.py judges those)
            uid = pod["metadata"]["uid"]
            wanted = demand(pod["spec"])
            own = nominated.get(uid)
            mine = dict(used.get(pod["metadata"]["namespace"], {}))
            everyone = dict(total_used)
            if own is not None:
                _add(mine, wanted, -1)
                _add(everyone, wanted, -1)

            def room(node: str, own: tuple[str, Amounts] | None = own) -> Amounts:
                out = dict(free[node])
                if own is not None and own[0] == node:
                    _add(out, own[1])
                return out

            quota = governing.get(pod["metadata"]["namespace"])
            after = _plus(mine, wanted)
            within_min = False
            if quota is not None:
                limits = quota.get("spec") or {}
                if _over(after, amounts(limits.get("max"))):
                    continue
                within_min = not _over(after, amounts(limits.get("min")))
            allows = _pod_rules_allow(pod, placements)
            topologies = snap.topologies
            nodes = [
                n
                for n in free
                if eligible(pod["spec"], snap.nodes[n])
                and not loaded(snap.metrics.get(n), snap.nodes[n], snap.taken_at)
                and allows(n)
                and (n not in topologies or aligns(pod["spec"], topologies[n], on_node[n]))
            ]
            sum_ok = quota is None or not _over(_plus(everyone, wanted), total_min)
            leaf = quota_of(pod, trees.tree)
            if leaf is not None:  # its quota chain surely admits it, or no flat rule does
                sum_ok = trees.admits(leaf, pod)
            fitting = [n for n in nodes if _fits(wanted, room(n))]
            made = uid in held_for
            if made:  # placed through the Reservation its preemption made, alone
                fitting = []
            if sum_ok and fitting:
                placeable_now[uid] = {n: functools.partial(_has, n, room(n)) for n in fitting}
            elif sum_ok and (
                inside := self._owned_room(pod, nodes, room, reservations, taken, snap.taken_at)
            ):
                placeable_now[uid] = {inside: functools.partial(str, inside)}
            elif (
                not made
                and quota is not None
                and within_min
                and (
                    inside := self._reclaimable(
                        pod, nodes, room, snap, live, used, governing, total_min, everyone
                    )
                )
            ):
                reclaimable_now[uid] = {RECLAIM: functools.partial(str, inside)}
            elif (
                not made
                and leaf is not None
                and (inside := trees.reclaim_node(leaf, pod, nodes, room))
            ):
                tree_reclaimable_now[uid] = {RECLAIM: functools.partial(str, inside)}

        # Reservations are scheduled like pods: one some node surely takes is placed too
        # (a refusal that ends it as Failed counts as not placed; expiry does not).
        for name, r in reservations.items():
            status = r.get("status") or {}
            template = (r["spec"].get("template") or {}).get("spec") or {}
            if template.get("schedulerName") != self.scheduler or status.get("nodeName"):
                continue
            ends = expiry(r)
            if ends is not None and ends <= snap.taken_at + PLACEABLE_WITHIN:
                continue  # may expire before any bound is due
            reasons = {c.get("reason") for c in status.get("conditions") or []}
            if status.get("phase") == "Failed" and reasons & {"Expired", "NodeDeleted"}:
                continue
            wanted = demand(template)
            fitting = [
                n
                for n in free
                if eligible(template, snap.nodes[n])
                and not loaded(snap.metrics.get(n), snap.nodes[n], snap.taken_at)
                and _fits(wanted, free[n])
            ]
            if fitting:
                uid = r["metadata"]["uid"]
                placeable_now[uid] = {n: functools.partial(_has, n, free[n]) for n in fitting}
                self._names[uid] = f"reservation {name}"

        found = []
        for now, since, bound, what in (
            (placeable_now, self._placeable_since, PLACEABLE_WITHIN, "some node could take it"),
            (reclaimable_now, self._reclaimable_since, RECLAIM_WITHIN, "within its quota's min"),
            (
                tree_reclaimable_now,
                self._tree_reclaimable_since,
                RECLAIM_WITHIN,
                "a reclaim in its quota tree would place it",
            ),
        ):
            for uid in list(since):
                if uid not in now:
                    del since[uid]
            for uid, ways in now.items():
                before = since.get(uid, {})
                kept = since[uid] = {way: before.get(way, snap.taken_at) for way in ways}
                waited = snap.taken_at - min(kept.values(), default=snap.taken_at)
                if waited > self.longest_wait.get(what, (0.0, bound))[0]:
                    self.longest_wait[what] = (waited, bound)
                lasting = [way for way, start in kept.items() if snap.taken_at - start > bound]
                if lasting:
                    detail = ways[lasting[0]]()
                    found.append(f"{self._name(uid)} Pending {bound:.0f}s+ while {what} ({detail})")
                    since[uid] = {}  # reported once per period
        every = placeable_now | reclaimable_now | tree_reclaimable_now
        self.placeable = sorted(
            f"{self._name(uid)} ({next(iter(ways.values()))()})" for uid, ways in every.items()
        )
        self.counts["placeable pods seen"] = max(
            self.counts["placeable pods seen"], len(placeable_now)
        )
        return found

    def _name(self, uid: str) -> str:
        sighting = self._pods.get(uid)
        return f"pod {key(sighting.pod)}" if sighting else self._names.get(uid, uid)

    @staticmethod
    def _owned_room(
        pod: Obj,
        nodes: list[str],
        room: Any,
        reservations: dict[str, Obj],
        taken: dict[str, list[Obj]],
        now: float,
    ) -> str:
        """An Available reservation of the pod's own that surely takes it: on a node it
        may run on, not used up (allocateOnce with an owner), not expiring before the
        bound is due (past its expiry it takes no owner, Failed or not yet), with room for
        it in what is left (Restricted), or in what is left and the node's free room
        (Aligned). A preemptor whose made Reservation holds goes on that one's node alone,
        into it or another of its own there. Named for the report; empty when none."""
        requests = requests_of(pod["spec"])
        # What a Reservation its preemption made holds (Waiting or Available) is the pod's
        # too when it goes into another of its own on that node: that one is let go.
        made_holds: dict[str, Amounts] = {}
        for r in reservations.values():
            status = r.get("status") or {}
            labels = r["metadata"].get("labels") or {}
            if labels.get(PREEMPTOR) == pod["metadata"]["uid"] and status.get("phase") in HOLDING:
                template = (r["spec"].get("template") or {}).get("spec") or {}
                made_holds[str(status.get("nodeName"))] = requests_of(template)
        for name, r in reservations.items():
            status = r.get("status") or {}
            node = status.get("nodeName")
            spec = r.get("spec") or {}
            if status.get("phase") != "Available" or node not in nodes or spec.get("unschedulable"):
                continue
            if made_holds and node not in made_holds:
                continue  # placed on its made one's node alone
            made_here = made_holds.get(node, {})
            if PREEMPTOR in (r["metadata"].get("labels") or {}):
                made_here = {}  # the made one itself: what it holds is counted below
            ends = expiry(r)
            if ends is not None and ends <= now + PLACEABLE_WITHIN:
                continue
            recorded = status.get("currentOwners") and _promised(r) != pod["metadata"]["uid"]
            spent = taken.get(name) or recorded
            if not is_owner(r, pod) or (spec.get("allocateOnce", True) and spent):
                continue
            left = requests_of((spec.get("template") or {}).get("spec") or {})
            for owner in taken.get(name, []):
                _add(left, requests_of(owner["spec"]), -1)
            free_here = _plus(room(node), made_here)
            if spec.get("allocatePolicy") == "Restricted":
                inside = {k: v for k, v in requests.items() if k in left}
                outside = {k: v for k, v in requests.items() if k not in left}
                fits = _fits(inside, left) and _fits(outside, free_here)
            else:
                fits = _fits(
                    requests, _plus(free_here, {k: max(v, Decimal(0)) for k, v in left.items()})
                )
            if fits:
                return f"its reservation {name} on {node} has room"
        return ""

    def _reclaimable(
        self,
        pod: Obj,
        nodes: list[str],
        room: Any,
        snap: Snapshot,
        live: list[Obj],
        used: dict[str, Amounts],
        governing: dict[str, Obj],
        total_min: Amounts,
        everyone: Amounts,
    ) -> str:
        """A node that would take the pod once pods of other quotas over their min are
        evicted, each quota only down to its min, and the arithmetic, or "". A pod within
        its quota's min reclaims from those alone (docs/elasticquota.md): its own quota's
        lower-priority pods are victims only once the pod puts its quota at or over its
        min, and then it is no reclaim."""
        namespace = pod["metadata"]["namespace"]
        wanted = demand(pod["spec"])
        for node in nodes:
            space = room(node)
            budget = {
                ns: _plus(used.get(ns, {}), amounts((q.get("spec") or {}).get("min")), -1)
                for ns, q in governing.items()
                if ns != namespace
            }
            freed: Amounts = {}
            for victim in live:
                if victim["spec"]["nodeName"] != node or victim["metadata"].get(
                    "deletionTimestamp"
                ):
                    continue
                if allocated_from(victim):
                    continue
                v_ns = victim["metadata"]["namespace"]
                cost = demand(victim["spec"])
                if v_ns in budget:
                    if any(v > budget[v_ns].get(k, Decimal(0)) for k, v in cost.items() if v > 0):
                        continue
                    _add(budget[v_ns], cost, -1)
                else:
                    continue
                _add(space, demand(victim["spec"]))
                _add(freed, cost)
            after = _plus(everyone, wanted)
            _add(after, freed, -1)
            if _fits(wanted, space) and not _over(after, total_min):
                mine = _show(used.get(namespace, {}))
                return (
                    f"its quota uses {mine}; all quotas use {_show(everyone)} "
                    f"of {_show(total_min)}; {node} frees {_show(freed)} of quotas over min"
                )
        return ""

    def _transitions(
        self, snap: Snapshot, reservations: dict[str, Obj], grace: float, once: bool = True
    ) -> list[str]:
        """Expected reservation transitions (``once``: each reported once)."""
        found = []
        now = snap.taken_at
        allocated = {allocated_from(p) for p in snap.pods if holds(p)}

        def late(what: str, text: str) -> None:
            if not once or what not in self._reported:
                self._reported.add(what)
                found.append(text)

        for name, r in reservations.items():
            status = r.get("status") or {}
            phase = status.get("phase") or "Pending"
            if phase in TERMINAL:
                continue
            ends = expiry(r)
            if ends is not None and now > max(ends, self._live_since) + grace:
                late(f"{name} expiry", f"reservation {name} expired at {ends:.0f}, still {phase}")
            node = status.get("nodeName")
            if phase in HOLDING and node and node not in snap.nodes:
                gone = self._node_gone_seen.setdefault(name, now)
                if now - gone >= grace:
                    late(f"{name} node", f"reservation {name} on deleted node {node}, {phase}")
            if r["spec"].get("allocateOnce", True) and name in allocated:
                seen = self._owner_bound_seen.setdefault(name, now)
                if now - seen >= grace:
                    late(f"{name} once", f"allocateOnce reservation {name} allocated, {phase}")
        return found


@dataclass
class _Placements:
    """Where pods are (bound, or nominated), read once per snapshot for the rules between
    pods in the liveness check."""

    snap: Snapshot
    labels: dict[str, dict[str, str]]
    there: list[tuple[Obj, str]]
    guarded: list[tuple[Obj, str]]  # those with required anti-affinity of their own

    @classmethod
    def of(cls, snap: Snapshot, live: list[Obj], waiting: list[Obj]) -> _Placements:
        labels = {n: (o["metadata"].get("labels") or {}) for n, o in snap.nodes.items()}
        there = [(p, p["spec"]["nodeName"]) for p in live] + [
            (p, p["status"]["nominatedNodeName"])
            for p in waiting
            if (p.get("status") or {}).get("nominatedNodeName")
        ]
        return cls(snap, labels, there, [(p, w) for p, w in there if _anti_terms(p)])


def _pod_rules_allow(pod: Obj, placements: _Placements) -> Callable[[str], bool]:
    """Which nodes the pod's anti-affinity (and other pods' against it) and its
    DoNotSchedule spread surely let it on now, counting pessimistically: pods being
    deleted and pods nominated count where they add to the pod's domain, not where they
    would lower the least-loaded one."""
    snap, labels = placements.snap, placements.labels
    namespace = pod["metadata"]["namespace"]
    barred: set[tuple[str, str]] = set()  # (topology key, value) the pod may not join
    for term in _anti_terms(pod):
        topology = term.get("topologyKey") or ""
        namespaces = term.get("namespaces") or [namespace]
        for other, where in placements.there:
            value = labels.get(where, {}).get(topology)
            if (
                other is not pod
                and value is not None
                and other["metadata"]["namespace"] in namespaces
                and _selected(term.get("labelSelector"), other)
            ):
                barred.add((topology, value))
    for other, where in placements.guarded:
        for term in _anti_terms(other):
            topology = term.get("topologyKey") or ""
            value = labels.get(where, {}).get(topology)
            namespaces = term.get("namespaces") or [other["metadata"]["namespace"]]
            if (
                other is not pod
                and value is not None
                and namespace in namespaces
                and _selected(term.get("labelSelector"), pod)
            ):
                barred.add((topology, value))
    spread: list[tuple[str, set[str]]] = []  # (topology key, the values it may join)
    for c in pod["spec"].get("topologySpreadConstraints") or ():
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        topology = c.get("topologyKey") or ""
        eligible = {
            n for n in snap.nodes if topology in labels[n] and selects(pod["spec"], snap.nodes[n])
        }
        selector = c.get("labelSelector")
        most: Counter[str] = Counter()
        fewest: Counter[str] = Counter()
        for other, where in placements.there:
            if (
                other is not pod
                and where in eligible
                and other["metadata"]["namespace"] == namespace
                and _selected(selector, other)
            ):
                most[labels[where][topology]] += 1
                if other["spec"].get("nodeName") and not other["metadata"].get("deletionTimestamp"):
                    fewest[labels[where][topology]] += 1
        domains = {labels[n][topology] for n in eligible}
        least = min((fewest[d] for d in domains), default=0)
        room = int(c.get("maxSkew") or 1) + least - int(_selected(selector, pod))
        spread.append((topology, {d for d in domains if most[d] <= room}))

    def allows(node: str) -> bool:
        mine = labels.get(node, {})
        if any(mine.get(topology) == value for topology, value in barred):
            return False
        return all(mine.get(topology) in values for topology, values in spread)

    return allows


def _has(node: str, free: Mapping[str, Decimal]) -> str:
    return f"{node} has {_show(free)}"


def _show(free: Mapping[str, Decimal]) -> str:
    return ", ".join(
        f"{k} {v.normalize():f}" for k, v in sorted(free.items()) if k in ("cpu", "pods")
    )
