"""Admission rules of the quota tree: which ElasticQuota (and pod) changes would break it,
and why.

The operator's status (``Active=False, Refused``) tells after the fact that a quota cannot
take part; these rules refuse the change before it is stored, as Koordinator's webhook
does: a parent that exists and is labelled ``is-parent``, no cycle, the children's min
adding up to no more than the parent's min (per resource), a parent that runs no pods (a
quota with pods does not become one, a pod does not name one), a parent or ``is-parent``
change only while no pod uses the quota (or, for a parent, its subtree), a name and a
``namespaces`` entry no other tree quota has, and no deletion of a quota that still has
children. An ElasticQuota named as one of Koordinator's root, default or system quotas
must read as that quota (``berth.quota.tree.parse_reserved``), once across namespaces; no
quota hangs from the default or system quota, and no pod names the root.

Pure: the handler hands in the objects (and, when :func:`needs_pods` says so, the live
pods) it read from the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from berth.api.quantity import QuantityError
from berth.podresources import Resources
from berth.quota.check import precedence
from berth.quota.tree import (
    ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME,
    BERTH_PREFIX,
    LABEL_IS_PARENT,
    LABEL_NAME,
    LABEL_PARENT,
    OUTSIDE,
    PREFIX,
    RESERVED,
    ROOT,
    TreeError,
    TreeQuota,
    build_tree,
    is_tree_quota,
    parse_pod,
    parse_quota,
    parse_reserved,
)
from berth.quota.usage import format_units

CREATE: Final = "CREATE"
UPDATE: Final = "UPDATE"
DELETE: Final = "DELETE"
SHOWN_PODS: Final = 3
_WRITTEN_BY_BERTH: Final = frozenset({ANNOTATION_RUNTIME, ANNOTATION_REQUEST})

Json = Mapping[str, Any]


@dataclass(frozen=True)
class LivePod:
    """A pod not finished: what decides which quota it is in."""

    namespace: str
    name: str
    labels: Mapping[str, str]


def _ours(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(PREFIX)}


def _tree_keys(obj: Json) -> tuple[Any, ...]:
    """What the tree rules read of a quota: its spec and its tree labels and annotations
    (not the runtime and request Berth writes back)."""
    meta = obj.get("metadata") or {}

    def ours(values: Mapping[str, str] | None) -> dict[str, str]:
        return {
            k: v
            for k, v in (values or {}).items()
            if (k.startswith(PREFIX) or k.startswith(BERTH_PREFIX)) and k not in _WRITTEN_BY_BERTH
        }

    return (
        obj.get("spec") or {},
        ours(meta.get("labels")),
        ours(meta.get("annotations")),
    )


def _parsed(objects: Iterable[Json]) -> dict[str, TreeQuota]:
    """The readable tree quotas by name (the oldest of a duplicated name)."""
    quotas: dict[str, TreeQuota] = {}
    readable = []
    for obj in objects:
        if not is_tree_quota(obj) or (obj.get("metadata") or {}).get("name") in RESERVED:
            continue
        try:
            readable.append(parse_quota(obj))
        except (TreeError, QuantityError):
            continue
    for quota in sorted(readable, key=lambda q: precedence(q.created, q.name)):
        quotas.setdefault(quota.name, quota)
    return quotas


def _try_parse(obj: Json | None) -> TreeQuota | None:
    if obj is None or not is_tree_quota(obj):
        return None
    if (obj.get("metadata") or {}).get("name") in RESERVED:
        return None
    try:
        return parse_quota(obj)
    except (TreeError, QuantityError):
        return None


def _over(total: Resources, limit: Resources) -> list[str]:
    """Each resource where ``total`` exceeds ``limit``, with both amounts."""
    return [
        f"{r} {format_units(r, v)} > {format_units(r, limit.get(r, 0))}"
        for r, v in sorted(total.items())
        if v > limit.get(r, 0)
    ]


def _sum_min(quotas: Iterable[TreeQuota]) -> Resources:
    total: Resources = {}
    for quota in quotas:
        for resource, value in quota.min.items():
            total[resource] = total.get(resource, 0) + value
    return total


def _names(pods: Sequence[LivePod]) -> str:
    shown = ", ".join(f"{p.namespace}/{p.name}" for p in pods[:SHOWN_PODS])
    more = len(pods) - SHOWN_PODS
    return f"{len(pods)} pod(s): {shown}" + (f" and {more} more" if more > 0 else "")


def touches_tree(operation: str, old: Json | None, new: Json | None) -> bool:
    """Whether a change can matter to the tree: a tree quota is made, changed in what the
    rules read, or deleted. Berth's own runtime and request writes do not."""
    if not any(obj is not None and is_tree_quota(obj) for obj in (old, new)):
        return False
    return not (
        operation == UPDATE
        and old is not None
        and new is not None
        and _tree_keys(old) == _tree_keys(new)
    )


def needs_pods(operation: str, old: Json | None, new: Json | None) -> bool:
    """Whether deciding this change needs the live pods: a parent made, a quota that
    becomes a parent or moves to another parent."""
    after = _try_parse(new)
    if operation == CREATE:
        return after is not None and after.is_parent
    if operation != UPDATE or old is None or new is None:
        return False
    before = _try_parse(old)
    if before is None or after is None:
        return False
    return (after.is_parent and not before.is_parent) or before.parent != after.parent


def _pods_in(
    names: set[str], old: Json, others: Sequence[Json], pods: Iterable[LivePod]
) -> list[LivePod]:
    """The live pods that belong to any of ``names`` in the tree as it stands."""
    tree = build_tree([*others, old])
    found = []
    for pod in pods:
        try:
            quota = tree.resolve(pod.namespace, pod.labels)
        except TreeError:
            continue
        if quota in names:
            found.append(pod)
    return sorted(found, key=lambda p: (p.namespace, p.name))


def _subtree(name: str, quotas: Mapping[str, TreeQuota]) -> set[str]:
    below = {name}
    grew = True
    while grew:
        grew = False
        for quota in quotas.values():
            if quota.parent in below and quota.name not in below:
                below.add(quota.name)
                grew = True
    return below


def review_quota(
    operation: str,
    old: Json | None,
    new: Json | None,
    others: Sequence[Json],
    pods: Iterable[LivePod] = (),
) -> str | None:
    """Why the change to one ElasticQuota is refused, or None to admit it.

    ``others`` are every other ElasticQuota in the cluster; ``pods`` the live pods (read
    only when :func:`needs_pods` says so).
    """
    if operation == DELETE:
        return _review_delete(old, others)
    assert new is not None
    if not touches_tree(operation, old, new):
        return None  # Berth's own runtime/request writes, status, other labels, flat quotas
    meta = new.get("metadata") or {}
    name = meta.get("name") or ""
    quotas = _parsed(others)
    children = sorted(q.name for q in quotas.values() if q.parent == name)
    if name in RESERVED:
        return _review_reserved(new, others)
    if not is_tree_quota(new):
        if children:
            return (
                f"ElasticQuota {name} has children ({', '.join(children)}): it cannot leave "
                "the quota tree; move or delete them first"
            )
        return None
    try:
        quota = parse_quota(new)
    except (TreeError, QuantityError) as error:
        return f"ElasticQuota {name}: {error}"
    return (
        _identity(quota, quotas)
        or _parent(quota, quotas)
        or _children(quota, quotas, children)
        or _emptiness(quota, old, others, quotas, pods)
    )


def _review_reserved(new: Json, others: Sequence[Json]) -> str | None:
    """A quota named as Koordinator's root, default or system quota reads as that quota,
    and is the only one of its name; the system quota's namespaces are no tree quota's."""
    meta = new.get("metadata") or {}
    name = meta.get("name") or ""
    try:
        reserved = parse_reserved(new)
    except (TreeError, QuantityError) as error:
        return f"ElasticQuota {name}: {error}"
    for other in others:
        other_meta = other.get("metadata") or {}
        if other_meta.get("name") == name and other_meta.get("namespace") != reserved.namespace:
            return (
                f"ElasticQuota {other_meta.get('namespace')}/{name} already has the name "
                f"{name}: tree quotas are known by name across namespaces"
            )
    for namespace in reserved.namespaces:
        for quota in _parsed(others).values():
            if namespace in quota.namespaces:
                return (
                    f"ElasticQuota {name}: namespace {namespace} already belongs to "
                    f"ElasticQuota {quota.name} (its namespaces annotation)"
                )
    return None


def _review_delete(old: Json | None, others: Sequence[Json]) -> str | None:
    if old is None or not is_tree_quota(old):
        return None
    name = (old.get("metadata") or {}).get("name") or ""
    children = sorted(q.name for q in _parsed(others).values() if q.parent == name)
    if children:
        return (
            f"ElasticQuota {name} has children ({', '.join(children)}); delete or move them first"
        )
    return None


def _identity(quota: TreeQuota, quotas: Mapping[str, TreeQuota]) -> str | None:
    """Tree quotas are known by name, and a namespace names at most one of them."""
    same = quotas.get(quota.name)
    if same is not None and same.namespace != quota.namespace:
        return (
            f"ElasticQuota {same.namespace}/{quota.name} already has the name {quota.name}: "
            "tree quotas are known by name across namespaces"
        )
    for namespace in quota.namespaces:
        for other in quotas.values():
            if other.name != quota.name and namespace in other.namespaces:
                return (
                    f"ElasticQuota {quota.name}: namespace {namespace} already belongs to "
                    f"ElasticQuota {other.name} (its namespaces annotation)"
                )
    return None


def _parent(quota: TreeQuota, quotas: Mapping[str, TreeQuota]) -> str | None:
    """The parent exists, is a parent, is not below the quota, and has min for it."""
    if quota.parent == ROOT:
        return None
    if quota.parent in OUTSIDE:
        return (
            f"ElasticQuota {quota.name}: {LABEL_PARENT} names {quota.parent}, Koordinator's "
            "quota for pods outside the tree quotas: it holds pods, not quotas"
        )
    parent = quotas.get(quota.parent)
    if parent is None:
        return (
            f"ElasticQuota {quota.name}: parent ElasticQuota {quota.parent} ({LABEL_PARENT}) "
            "does not exist; create the parent first"
        )
    if not parent.is_parent:
        return (
            f"ElasticQuota {quota.name}: parent ElasticQuota {parent.name} is not labelled "
            f'{LABEL_IS_PARENT}: "true"'
        )
    with_quota = {**quotas, quota.name: quota}
    seen: set[str] = set()
    current: TreeQuota | None = parent
    while current is not None and current.name not in seen:
        if current.name == quota.name:
            return (
                f"ElasticQuota {quota.name}: {LABEL_PARENT} {quota.parent} would make a cycle "
                f"(ElasticQuota {quota.parent} is below {quota.name})"
            )
        seen.add(current.name)
        current = with_quota.get(current.parent)
    unlimited = sorted(set(quota.max) - set(parent.max))
    if unlimited:
        return (
            f"ElasticQuota {quota.name}: its max names {', '.join(unlimited)}, which the max "
            f"of its parent ElasticQuota {parent.name} does not; add it to the parent's max, "
            "or remove it here"
        )
    siblings = [q for q in quotas.values() if q.parent == parent.name and q.name != quota.name]
    over = _over(_sum_min([*siblings, quota]), parent.min)
    if over:
        return (
            f"ElasticQuota {quota.name}: the children's min of ElasticQuota {parent.name} would "
            f"add up to more than its min ({'; '.join(over)})"
        )
    return None


def _children(quota: TreeQuota, quotas: Mapping[str, TreeQuota], children: list[str]) -> str | None:
    if not children:
        return None
    if not quota.is_parent:
        return (
            f"ElasticQuota {quota.name} has children ({', '.join(children)}): it must stay "
            f'{LABEL_IS_PARENT}: "true"'
        )
    over = _over(_sum_min(quotas[c] for c in children), quota.min)
    if over:
        return (
            f"ElasticQuota {quota.name}: its children's min would add up to more than its "
            f"min ({'; '.join(over)})"
        )
    for child in sorted(children):
        dropped = sorted(set(quotas[child].max) - set(quota.max))
        if dropped:
            return (
                f"ElasticQuota {quota.name}: its max would drop {', '.join(dropped)}, which "
                f"the max of its child ElasticQuota {child} names; remove it from the child "
                "first"
            )
    return None


def _emptiness(
    quota: TreeQuota,
    old: Json | None,
    others: Sequence[Json],
    quotas: Mapping[str, TreeQuota],
    pods: Iterable[LivePod],
) -> str | None:
    """A quota becomes a parent, or moves, only while no pod uses it (or its subtree); a
    parent is not made while pods name it."""
    pods = list(pods)
    if old is None and quota.is_parent:
        naming = sorted(
            (p for p in pods if p.labels.get(LABEL_NAME) == quota.name),
            key=lambda p: (p.namespace, p.name),
        )
        if naming:
            return (
                f'ElasticQuota {quota.name} cannot be a parent ({LABEL_IS_PARENT}: "true") '
                f"while pods name it in {LABEL_NAME} (a parent runs none): {_names(naming)}"
            )
    before = _try_parse(old)
    if before is None or old is None:
        return None
    if quota.is_parent and not before.is_parent:
        inside = _pods_in({quota.name}, old, others, pods)
        if inside:
            return (
                f'ElasticQuota {quota.name} cannot become a parent ({LABEL_IS_PARENT}: "true") '
                f"while it runs pods (a parent runs none): {_names(inside)}"
            )
    if quota.parent != before.parent:
        below = _subtree(quota.name, {**quotas, quota.name: before})
        inside = _pods_in(below, old, others, pods)
        if inside:
            return (
                f"ElasticQuota {quota.name} cannot move from {before.parent} to {quota.parent} "
                f"while pods use it: {_names(inside)}"
            )
    return None


def review_pod(
    labels: Mapping[str, str],
    quotas: Iterable[Json],
    old_labels: Mapping[str, str] | None = None,
) -> str | None:
    """Why a pod's quota labels are refused: unreadable, or naming a parent quota. An
    update that leaves them as they were passes (other writers' patches to the pod)."""
    if old_labels is not None and _ours(old_labels) == _ours(labels):
        return None
    try:
        named = parse_pod(labels).name
    except TreeError as error:
        return str(error)
    if named is None:
        return None
    if named == ROOT:
        return f"{LABEL_NAME} names {ROOT}, the root of the quota tree: it runs no pods"
    if named in OUTSIDE:
        try:
            build_tree(()).resolve("", labels)
        except TreeError as error:
            return str(error)
        return None
    quota = _parsed(quotas).get(named)
    if quota is not None and quota.is_parent:
        return (
            f"{LABEL_NAME} names ElasticQuota {named}, a parent quota "
            f'({LABEL_IS_PARENT}: "true"): a parent runs no pods; name one of its children'
        )
    return None
