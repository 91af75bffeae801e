"""An independent invariant checker: reads the cluster and judges what the scheduler and
the operators did, sharing no code with their accounting (its own request arithmetic, the
Kubernetes client library's quantity parser).

Invariants:
- no node's bound pods plus the capacity Available reservations still hold there exceed
  its allocatable;
- no quota's bound pods exceed its max;
- every pod carrying ``reservation-allocated`` is an owner of that reservation, and a
  Restricted reservation's owners fit in it;
- no pod was bound twice (one ``Scheduled`` event per pod at most);
- at rest: every Reservation's ``currentOwners`` and every quota's ``used`` agree with the
  pods, and every Pending pod really cannot be placed (a schedulable pod left Pending is a
  violation).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
TERMINAL = {"Succeeded", "Failed"}
Amounts = dict[str, Decimal]


def amounts(resources: Mapping[str, Any] | None) -> Amounts:
    return {k: Decimal(str(parse_quantity(str(v)))) for k, v in (resources or {}).items()}


def _add(into: Amounts, other: Mapping[str, Decimal]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Decimal(0)) + v


def requests_of(spec: Mapping[str, Any]) -> Amounts:
    """Containers summed, the largest init container if bigger, plus overhead."""

    def one(container: Mapping[str, Any]) -> Amounts:
        resources = container.get("resources") or {}
        out = amounts(resources.get("limits"))
        out.update(amounts(resources.get("requests")))
        return out

    total: Amounts = {}
    for container in spec.get("containers") or ():
        _add(total, one(container))
    for container in spec.get("initContainers") or ():
        for k, v in one(container).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    _add(total, amounts(spec.get("overhead")))
    return total


def holds(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL
    )


@dataclass
class Snapshot:
    nodes: dict[str, Amounts]
    pods: list[dict[str, Any]]
    quotas: list[dict[str, Any]]
    reservations: list[dict[str, Any]]
    scheduled_events: Counter[str] = field(default_factory=Counter)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)


async def snapshot(api: ApiClient, namespaces: Iterable[str] | None = None) -> Snapshot:
    core = CoreV1Api(api)
    custom = CustomObjectsApi(api)
    listed_nodes = (await core.list_node()).items
    nodes = {n.metadata.name: amounts(n.status.allocatable) for n in listed_nodes}
    node_labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in listed_nodes}
    pods = [
        api.sanitize_for_serialization(p) for p in (await core.list_pod_for_all_namespaces()).items
    ]
    quotas = (
        await custom.list_cluster_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
        )
    )["items"]
    reservations = (
        await custom.list_cluster_custom_object(
            "scheduling.koordinator.sh", "v1alpha1", "reservations"
        )
    )["items"]
    events: Counter[str] = Counter()
    for namespace in namespaces or ():
        listed = await core.list_namespaced_event(namespace, field_selector="reason=Scheduled")
        for event in listed.items:
            events[event.involved_object.uid] += event.count or 1
    return Snapshot(nodes, pods, quotas, reservations, events, node_labels)


def _owner_matches(owner: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    obj = owner.get("object")
    if obj:
        for key in ("uid", "name", "namespace"):
            if obj.get(key) and obj[key] != meta.get(key):
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
        if selector.get("matchExpressions"):
            return True  # not judged here: trust the scheduler on expressions
    return True


def violations(snap: Snapshot, *, at_rest: bool = False) -> list[str]:
    found: list[str] = []
    live = [p for p in snap.pods if holds(p)]
    reservations = {r["metadata"]["name"]: r for r in snap.reservations}

    # Owners per reservation, and each owner's legitimacy.
    owners: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in live:
        text = (pod["metadata"].get("annotations") or {}).get(ALLOCATED)
        if not text:
            continue
        name = json.loads(text).get("name")
        reservation = reservations.get(name)
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if reservation is None:
            continue  # ended and collected since: its owners keep running
        if not any(_owner_matches(o, pod) for o in reservation["spec"]["owners"]):
            found.append(f"pod {key} allocated from reservation {name} but is not its owner")
        owners[name].append(pod)

    # Node capacity: pods plus what Available reservations still hold.
    used: dict[str, Amounts] = defaultdict(dict)
    for pod in live:
        _add(used[pod["spec"]["nodeName"]], requests_of(pod["spec"]))
    for name, reservation in reservations.items():
        status = reservation.get("status") or {}
        if status.get("phase") != "Available" or not status.get("nodeName"):
            continue
        spec = reservation["spec"]
        held = requests_of(spec["template"].get("spec") or {})
        if spec.get("allocateOnce", True) and owners.get(name):
            continue  # used up: it holds nothing more
        taken: Amounts = {}
        for pod in owners.get(name, []):
            _add(taken, requests_of(pod["spec"]))
        remaining = {k: max(Decimal(0), v - taken.get(k, Decimal(0))) for k, v in held.items()}
        _add(used[status["nodeName"]], remaining)
        if spec.get("allocatePolicy") == "Restricted":
            for k, v in taken.items():
                if k in held and v > held[k]:
                    found.append(f"reservation {name}: owners use {v} {k} > {held[k]} reserved")
    for node, resources in used.items():
        allocatable = snap.nodes.get(node)
        if allocatable is None:
            continue  # deleted meanwhile
        for k, v in resources.items():
            if k in allocatable and v > allocatable[k]:
                found.append(f"node {node}: {v} {k} used > {allocatable[k]} allocatable")

    # Quotas: bound pods within max (the oldest quota of a namespace governs).
    governing: dict[str, dict[str, Any]] = {}
    for quota in sorted(
        snap.quotas, key=lambda q: (q["metadata"]["creationTimestamp"], q["metadata"]["name"])
    ):
        governing.setdefault(quota["metadata"]["namespace"], quota)
    # Pods being deleted (preemption victims on their way out) are not counted against a
    # quota: their capacity is already promised to the pod nominated in their place.
    per_namespace: dict[str, Amounts] = defaultdict(dict)
    for pod in live:
        if not pod["metadata"].get("deletionTimestamp"):
            _add(per_namespace[pod["metadata"]["namespace"]], requests_of(pod["spec"]))
    for namespace, quota in governing.items():
        maximum = amounts((quota.get("spec") or {}).get("max"))
        for k, v in per_namespace.get(namespace, {}).items():
            if k in maximum and v > maximum[k]:
                found.append(f"quota {namespace}: {v} {k} used > max {maximum[k]}")
        if at_rest:
            reported = amounts((quota.get("status") or {}).get("used"))
            actual = per_namespace.get(namespace, {})
            for k, v in reported.items():
                if v != actual.get(k, Decimal(0)):
                    found.append(
                        f"quota {namespace}: status.used {k} {v} != pods' {actual.get(k, 0)}"
                    )

    # Bound at most once.
    for uid, count in snap.scheduled_events.items():
        if count > 1:
            found.append(f"pod {uid} was bound {count} times")

    if at_rest:
        for name, reservation in reservations.items():
            status = reservation.get("status") or {}
            if status.get("phase") not in ("Available", "Waiting"):
                continue
            listed = sorted(
                f"{o['namespace']}/{o['name']}" for o in status.get("currentOwners") or []
            )
            actual = sorted(
                f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in owners.get(name, [])
            )
            if listed != actual:
                found.append(f"reservation {name}: currentOwners {listed} != pods {actual}")
    return found


def stranded(snap: Snapshot, scheduler: str) -> list[str]:
    """Pending pods of ``scheduler`` that some node could take now: schedulable, yet not
    bound. Free capacity is counted pessimistically (every held reservation taken in
    full), so "fits" here means it surely fits; pods under a quota or with a
    reservation-affinity are left to the rules that decide them."""
    free: dict[str, Amounts] = {n: dict(a) for n, a in snap.nodes.items()}

    def take(node: str, spec: Mapping[str, Any]) -> None:
        if node in free:
            for k, v in requests_of(spec).items():
                free[node][k] = free[node].get(k, Decimal(0)) - v

    for pod in snap.pods:
        if holds(pod):
            take(pod["spec"]["nodeName"], pod["spec"])
    for reservation in snap.reservations:
        status = reservation.get("status") or {}
        if status.get("phase") in ("Available", "Waiting") and status.get("nodeName"):
            take(status["nodeName"], reservation["spec"]["template"].get("spec") or {})
    quota_namespaces = {q["metadata"]["namespace"] for q in snap.quotas}

    def fits_somewhere(pod: Mapping[str, Any]) -> bool:
        wanted = requests_of(pod["spec"])
        selector = pod["spec"].get("nodeSelector") or {}
        return any(
            all(free[n].get(k, Decimal(0)) >= v for k, v in wanted.items())
            and all(snap.node_labels.get(n, {}).get(k) == v for k, v in selector.items())
            for n in free
        )

    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in snap.pods
        if (p.get("spec") or {}).get("schedulerName") == scheduler
        and not p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["namespace"] not in quota_namespaces
        and "scheduling.koordinator.sh/reservation-affinity"
        not in (p["metadata"].get("annotations") or {})
        and fits_somewhere(p)
    ]
