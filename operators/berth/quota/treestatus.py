"""What the tree quotas' status and annotations should say: used, request, runtime,
borrowed and lent, and whether the quota takes part in the tree.

The same numbers go to ``status`` (Berth's columns) and to the annotations Koordinator's
tools read (``quota.scheduling.koordinator.sh/runtime`` and ``.../request``, JSON resource
lists). A parent's used and request are its subtree's. ``borrowed`` is what is used over
min, ``lent`` the min left unused that others may take (none when the quota does not lend,
at most its lending limit).

Koordinator's default and system quotas, when an ElasticQuota of their name is stored, get
their pods' used and request and a runtime equal to their max; a stored root gets what the
whole tree and those two use and request, and as runtime what it hands down to the tree
quotas (the cluster's allocatable less what the default, system and flat quotas' pods hold).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.api.base import format_time
from berth.podresources import Resources, add, pod_requests
from berth.podstate import TERMINAL_PHASES
from berth.quota.check import quota_request
from berth.quota.runtime import tree_resources
from berth.quota.tree import (
    ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME,
    DEFAULT,
    LABEL_NAME,
    OUTSIDE,
    PREFIX,
    ROOT,
    OutsideQuota,
    QuotaTree,
    TreeError,
    TreeQuota,
    build_tree,
    parse_pod,
)
from berth.quota.treeadmission import TreePod, TreeState, tree_state
from berth.quota.usage import as_resource_list, counts_against_quota

ACTIVE = "Active"


@dataclass(frozen=True)
class PodSeen:
    """A live pod as the operator's index keeps it for the tree."""

    namespace: str
    labels: dict[str, str]  # only those under the tree's prefix
    requests: dict[str, int]
    bound: bool


def pod_seen(body: Mapping[str, Any]) -> PodSeen | None:
    """A pod as the tree counts it: placed (its request is used) or waiting (requested
    only); None for a pod finished, being deleted unplaced, or of no namespace."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    phase = (body.get("status") or {}).get("phase")
    bound = counts_against_quota(body)
    waiting = (
        not spec.get("nodeName")
        and phase not in TERMINAL_PHASES
        and not meta.get("deletionTimestamp")
    )
    namespace = meta.get("namespace")
    if not namespace or not (bound or waiting):
        return None
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(PREFIX)}
    return PodSeen(namespace, labels, pod_requests(spec), bound)


def tree_pods(
    tree: QuotaTree, pods: Iterable[PodSeen], flat_namespaces: Collection[str] = ()
) -> tuple[list[TreePod], Resources]:
    """The pods of tree quotas and of the default and system quotas, and what the bound
    pods of flat quotas (those of ``flat_namespaces`` that name no quota) hold."""
    counted: list[TreePod] = []
    flat: Resources = {}
    for pod in pods:
        try:
            quota = tree.resolve(pod.namespace, pod.labels)
            preemptible = parse_pod(pod.labels).preemptible
        except TreeError:
            quota, preemptible = None, True
        if quota is None:
            governed = not pod.labels.get(LABEL_NAME) and pod.namespace in flat_namespaces
            quota = tree.outside_quota(pod.namespace, pod.labels, governed)
        request = quota_request(pod.requests)
        if quota is not None:
            counted.append(TreePod(quota, request, pod.bound, preemptible))
        elif pod.bound:
            for resource, value in request.items():
                flat[resource] = flat.get(resource, 0) + value
    return counted, flat


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(datetime.now(UTC)),
    }


def _active(tree: QuotaTree, quota: TreeQuota) -> tuple[str, str, str]:
    if quota.is_parent:
        over = tree.min_overcommitted(quota.name)
        if over:
            return (
                "True",
                "ChildrenMinExceedsMin",
                f"the children's min add up to more than this quota's min for {', '.join(over)}"
                " (Σ children's min must not exceed the parent's min); their mins are scaled "
                "down in proportion",
            )
    return "True", "InQuotaTree", f"in the quota tree under {quota.parent}"


def _differs(current: Mapping[str, Any] | None, wanted: Mapping[str, str]) -> bool:
    return dict(current or {}) != dict(wanted)


def _patch_map(current: Mapping[str, Any] | None, wanted: dict[str, str]) -> dict[str, Any]:
    """A merge patch from ``current`` to ``wanted``: keys no longer wanted go to null."""
    gone: dict[str, Any] = dict.fromkeys(set(current or {}) - set(wanted))
    return {**gone, **wanted}


def _lent(quota: TreeQuota, used: Mapping[str, int], resource: str) -> int:
    """The unused min others may use: none when the quota does not lend, at most its limit."""
    if not quota.allow_lent:
        return 0
    unused = max(quota.min.get(resource, 0) - used.get(resource, 0), 0)
    limit = quota.lending_limit.get(resource)
    return unused if limit is None else min(unused, limit)


def _resources(values: Mapping[str, int], names: Iterable[str]) -> dict[str, str]:
    return as_resource_list({r: values.get(r, 0) for r in names})


@dataclass(frozen=True)
class TreePatch:
    """What to write to one quota: a status patch and an annotations patch (either empty)."""

    namespace: str
    name: str
    status: dict[str, Any]
    annotations: dict[str, Any]


def _outside_status(
    tree: QuotaTree, state: TreeState, quota: OutsideQuota
) -> tuple[dict[str, dict[str, str]], tuple[str, str, str]]:
    """The default or system quota's status fields (for the resources its max or the tree
    names; all it holds when neither names any), and its Active condition."""
    used = state.outside_used.get(quota.name, {})
    request = state.outside_request.get(quota.name, {})
    names = sorted((quota.max.keys() | tree_resources(tree)) or (used.keys() | request.keys()))
    wanted = {
        "used": _resources(used, names),
        "request": _resources(request, names),
        "runtime": _resources(quota.max, sorted(quota.max)),
    }
    if quota.name == DEFAULT:
        message = "Koordinator's default quota: the pods of no quota"
    else:
        message = "Koordinator's system quota: the pods that name it or its namespaces"
    message += "; what they use is taken off what the root hands down; its runtime is its max"
    return wanted, ("True", "OutsideTree", message)


def _root_status(
    tree: QuotaTree, state: TreeState
) -> tuple[dict[str, dict[str, str]], tuple[str, str, str]]:
    """The root's status: what every quota under it uses and requests, and what it hands
    down to the tree quotas."""
    used: Resources = {}
    request: Resources = {}
    for name in tree.children.get(ROOT, ()):
        add(used, state.used.get(name, {}))
        add(request, state.request.get(name, {}))
    for name in OUTSIDE:
        add(used, state.outside_used.get(name, {}))
        add(request, state.outside_request.get(name, {}))
    names = sorted(tree_resources(tree) or (used.keys() | request.keys()))
    runtime_names = sorted(tree_resources(tree))
    wanted = {
        "used": _resources(used, names),
        "request": _resources(request, names),
        "runtime": _resources(state.handed_down, runtime_names),
    }
    message = (
        "Koordinator's root: hands down the cluster's allocatable less what the default, "
        "system and flat quotas' pods hold"
    )
    return wanted, ("True", "TreeRoot", message)


def _reserved(tree: QuotaTree, namespace: str, name: str) -> OutsideQuota | None:
    """The root, default or system quota this stored object is (None: another object of
    the name is the one in use, or this one is refused)."""
    found = tree.root if name == ROOT else tree.outside.get(name)
    if found is None or not found.raw or found.namespace != namespace:
        return None
    return found


def desired_tree(
    objects: Iterable[Mapping[str, Any]],
    pods: Iterable[PodSeen],
    allocatable: Mapping[str, int],
    flat_namespaces: Collection[str] = (),
) -> list[TreePatch]:
    """The patches that bring every tree quota's status and annotations up to date (and
    those of a stored root, default or system quota). ``flat_namespaces`` are the
    namespaces a flat quota governs: their pods hold capacity outside the tree, not in the
    default quota."""
    objects = list(objects)
    tree = build_tree(objects)
    counted, flat = tree_pods(tree, pods, flat_namespaces)
    total = {r: v - flat.get(r, 0) for r, v in allocatable.items()}
    state = tree_state(tree, counted, total)
    patches: list[TreePatch] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        current_status = obj.get("status") or {}
        current_active = next(
            (
                (c.get("status"), c.get("reason"), c.get("message"))
                for c in current_status.get("conditions") or ()
                if c.get("type") == ACTIVE
            ),
            None,
        )
        refused = tree.refused.get((namespace, name))
        quota = tree.quotas.get(name)
        reserved = _reserved(tree, namespace, name)
        if reserved is not None:
            if reserved.name == ROOT:
                wanted, active = _root_status(tree, state)
            else:
                wanted, active = _outside_status(tree, state, reserved)
        elif refused is not None or quota is None:
            if refused is None:
                continue  # not a tree quota: the namespace's flat rules write its status
            status: dict[str, Any] = {}
            if current_active != ("False", "Refused", refused):
                status["conditions"] = [_condition("False", "Refused", refused)]
            if status:
                patches.append(TreePatch(namespace, name, status, {}))
            continue
        else:
            names = sorted(quota.max.keys() | quota.min.keys())
            used = state.used.get(name, {})
            wanted = {
                "used": _resources(used, names),
                "request": _resources(state.request.get(name, {}), names),
                "runtime": _resources(state.runtime.get(name, {}), sorted(quota.max)),
                "borrowed": _resources(
                    {r: max(used.get(r, 0) - quota.min.get(r, 0), 0) for r in names}, names
                ),
                "lent": _resources({r: _lent(quota, used, r) for r in names}, names),
            }
            active = _active(tree, quota)
        status = {
            field: _patch_map(current_status.get(field), value)
            for field, value in wanted.items()
            if _differs(current_status.get(field), value)
        }
        if current_active != active:
            status["conditions"] = [_condition(*active)]
        annotations = meta.get("annotations") or {}
        wanted_annotations = {
            ANNOTATION_RUNTIME: json.dumps(wanted["runtime"], sort_keys=True),
            ANNOTATION_REQUEST: json.dumps(wanted["request"], sort_keys=True),
        }
        changed = {k: v for k, v in wanted_annotations.items() if annotations.get(k) != v}
        if status or changed:
            patches.append(TreePatch(namespace, name, status, changed))
    return patches
