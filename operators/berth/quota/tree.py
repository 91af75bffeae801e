"""Koordinator's quota tree on ElasticQuota objects: labels and annotations, parsed and checked.

A quota joins the tree when it carries any label or annotation under
``quota.scheduling.koordinator.sh/``; one without keeps scheduler-plugins' flat, per-namespace
rules. Tree quotas are known by name (as in Koordinator); ``parent`` names the parent
(the root when absent), ``is-parent: "true"`` marks a quota that only groups children,
``allow-lent-resource: "false"`` keeps a quota's unused min from being lent, and the
``shared-weight`` annotation (a resource list, defaulting to max) splits what is left among
siblings. A pod belongs to the quota its ``quota.scheduling.koordinator.sh/name`` label names,
else to the tree quota whose ``namespaces`` annotation lists its namespace, else to the tree
quota of its namespace.

Kueue's limits come as optional annotations under Berth's own prefix, resource lists like
the shared weight: ``berth.io/lending-limit`` is the most of its unused min a quota lends
(the rest it keeps even when idle; at most its min), ``berth.io/borrowing-limit`` the most
it uses beyond its min. Two more tune sharing and reclaim: ``berth.io/weight`` (a number,
default 1) divides a quota's dominant resource share when quotas waiting for the same
capacity are ordered (Kueue's fair-sharing weight), and ``berth.io/min-runtime`` (a Go
duration) protects a pod of the quota younger than it from reclaim. Any of these also puts
a quota in the tree.

Three names are Koordinator's own. ``koordinator-root-quota`` is the root every quota
without a ``parent`` hangs from; ``koordinator-default-quota`` holds the pods no quota
holds, and ``koordinator-system-quota`` the pods that name it (or whose namespace its
``namespaces`` annotation lists). The default and system quotas stand beside the tree
quotas under the root but take no part in sharing: their runtime is their max, and what
their pods use is taken off what the root hands down. Berth keeps the three implicit; an
ElasticQuota with one of these names is read as that quota (a default or system quota's
max is honoured, as Koordinator honours the objects it finds), or refused with why.

Koordinator quietly falls back to defaults on malformed values; here a value that cannot be
read, or a key Berth does not honour, refuses the quota (or the pod) with a message naming
it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from berth.api.duration import DurationError, parse_duration
from berth.api.quantity import QuantityError
from berth.podresources import Resources, resource_list
from berth.quota.check import precedence

PREFIX: Final = "quota.scheduling.koordinator.sh/"
LABEL_PARENT: Final = PREFIX + "parent"
LABEL_IS_PARENT: Final = PREFIX + "is-parent"
LABEL_ALLOW_LENT_RESOURCE: Final = PREFIX + "allow-lent-resource"
LABEL_NAME: Final = PREFIX + "name"
LABEL_PREEMPTIBLE: Final = PREFIX + "preemptible"
ANNOTATION_SHARED_WEIGHT: Final = PREFIX + "shared-weight"
ANNOTATION_NAMESPACES: Final = PREFIX + "namespaces"
ANNOTATION_RUNTIME: Final = PREFIX + "runtime"
ANNOTATION_REQUEST: Final = PREFIX + "request"
BERTH_PREFIX: Final = "berth.io/"
ANNOTATION_LENDING_LIMIT: Final = BERTH_PREFIX + "lending-limit"
ANNOTATION_BORROWING_LIMIT: Final = BERTH_PREFIX + "borrowing-limit"
LIMIT_ANNOTATIONS: Final = (ANNOTATION_LENDING_LIMIT, ANNOTATION_BORROWING_LIMIT)
ANNOTATION_WEIGHT: Final = BERTH_PREFIX + "weight"
ANNOTATION_MIN_RUNTIME: Final = BERTH_PREFIX + "min-runtime"
BERTH_ANNOTATIONS: Final = (*LIMIT_ANNOTATIONS, ANNOTATION_WEIGHT, ANNOTATION_MIN_RUNTIME)
ROOT: Final = "koordinator-root-quota"
"""The implicit root: a quota without a ``parent`` label hangs from it."""
DEFAULT: Final = "koordinator-default-quota"
"""Koordinator's default quota: the pods of no quota (tree or flat) count in it."""
SYSTEM: Final = "koordinator-system-quota"
"""Koordinator's system quota: the pods that name it (or live in a namespace it lists)."""
OUTSIDE: Final = (DEFAULT, SYSTEM)
"""The two quotas beside the tree quotas under the root, outside the water-filling."""
RESERVED: Final = frozenset({ROOT, *OUTSIDE})
OUTSIDE_MAX_ARGS: Final = {DEFAULT: "defaultQuotaGroupMax", SYSTEM: "systemQuotaGroupMax"}
"""Koordinator's ElasticQuota plugin arguments: the default and system quotas' max."""

QUOTA_LABELS: Final = frozenset({LABEL_PARENT, LABEL_IS_PARENT, LABEL_ALLOW_LENT_RESOURCE})
QUOTA_ANNOTATIONS: Final = frozenset(
    # runtime and request are what Berth writes back; reading them changes nothing.
    {ANNOTATION_SHARED_WEIGHT, ANNOTATION_NAMESPACES, ANNOTATION_RUNTIME, ANNOTATION_REQUEST}
)
POD_LABELS: Final = frozenset({LABEL_NAME, LABEL_PREEMPTIBLE})
_BOOLEANS: Final = {"true": True, "false": False}


class TreeError(ValueError):
    """A label or annotation Berth cannot honour; the message names it."""


def is_tree_quota(obj: Mapping[str, Any]) -> bool:
    """Whether an ElasticQuota takes part in the tree (any key under the Koordinator prefix,
    or one of Berth's limits, or one of Koordinator's three reserved names)."""
    meta = obj.get("metadata") or {}
    if meta.get("name") in RESERVED:
        return True
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return any(key.startswith(PREFIX) or key in BERTH_ANNOTATIONS for key in keys)


@dataclass(frozen=True)
class TreeQuota:
    """One quota of the tree, in scheduler units."""

    name: str
    namespace: str
    parent: str
    is_parent: bool
    allow_lent: bool
    min: Resources
    max: Resources
    shared_weight: Resources
    namespaces: tuple[str, ...] = ()
    lending_limit: Resources = field(default_factory=dict)  # a resource not listed: all
    borrowing_limit: Resources = field(default_factory=dict)  # a resource not listed: to max
    fair_weight: float = 1.0  # divides the dominant resource share in the queue's order
    min_runtime: float = 0.0  # seconds a pod runs before it may be reclaimed
    created: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def weight(self, resource: str) -> int:
        return self.shared_weight.get(resource, 0)


@dataclass(frozen=True)
class OutsideQuota:
    """The root, or the default or system quota: Koordinator's own, implicit unless an
    ElasticQuota of that name is stored (``namespace`` and ``raw`` then say which)."""

    name: str
    max: Resources = field(default_factory=dict)  # a resource not listed: unlimited
    namespaces: tuple[str, ...] = ()  # the system quota's: pods of these namespaces
    namespace: str = ""
    created: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _boolean(key: str, value: str) -> bool:
    if value not in _BOOLEANS:
        raise TreeError(f'{key} must be "true" or "false", not {value!r}')
    return _BOOLEANS[value]


def _resource_annotation(key: str, value: str) -> Resources:
    """A JSON resource list annotation (shared weight, limits) in scheduler units."""
    try:
        parsed = json.loads(value)
        if not isinstance(parsed, dict):
            raise TypeError("not an object")
        values = resource_list(parsed)
    except (ValueError, TypeError, QuantityError) as error:
        raise TreeError(
            f"{key} must be a JSON resource list such as "
            f'{{"cpu": "4", "memory": "8Gi"}}, not {value!r} ({error})'
        ) from error
    if any(v < 0 for v in values.values()):
        raise TreeError(f"{key} must not be negative: {value!r}")
    return values


def _weight(value: str) -> float:
    try:
        weight = float(Decimal(value))
    except InvalidOperation:
        weight = -1.0
    if not weight >= 0 or weight == float("inf"):
        raise TreeError(
            f'{ANNOTATION_WEIGHT} must be a non-negative number such as "1" or "0.5", not {value!r}'
        )
    return weight


def _min_runtime(value: str) -> float:
    try:
        return parse_duration(value).total_seconds()
    except DurationError as error:
        raise TreeError(f"{ANNOTATION_MIN_RUNTIME}: {error}") from error


def _namespaces(value: str) -> tuple[str, ...]:
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(n, str) and n for n in parsed):
        raise TreeError(
            f'{ANNOTATION_NAMESPACES} must be a JSON list of namespace names such as ["a", "b"], '
            f"not {value!r}"
        )
    return tuple(parsed)


def _unknown(keys: Iterable[str], known: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in keys if k.startswith(PREFIX) and k not in known)
    if unknown:
        raise TreeError(f"{what} {', '.join(unknown)} not supported by Berth")


def parse_quota(obj: Mapping[str, Any]) -> TreeQuota:
    """The tree quota an ElasticQuota describes; raises :class:`TreeError` naming what is wrong."""
    meta = obj.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    spec = obj.get("spec") or {}
    name = meta.get("name") or ""
    _unknown(labels, QUOTA_LABELS, "label")
    _unknown(annotations, QUOTA_ANNOTATIONS, "annotation")
    parent = labels.get(LABEL_PARENT) or ROOT
    if parent == name:
        raise TreeError(f"{LABEL_PARENT} names the quota itself ({name!r})")
    maximum = resource_list(spec.get("max"))
    weight = (
        _resource_annotation(ANNOTATION_SHARED_WEIGHT, annotations[ANNOTATION_SHARED_WEIGHT])
        if ANNOTATION_SHARED_WEIGHT in annotations
        else {}
    )
    if not any(weight.values()):  # Koordinator: absent or all zero means "as max"
        weight = dict(maximum)
    minimum = resource_list(spec.get("min"))
    limits = {
        key: _resource_annotation(key, annotations[key]) if key in annotations else {}
        for key in LIMIT_ANNOTATIONS
    }
    lending = limits[ANNOTATION_LENDING_LIMIT]
    over = sorted(r for r, v in lending.items() if v > minimum.get(r, 0))
    if over:
        raise TreeError(
            f"{ANNOTATION_LENDING_LIMIT} must not exceed min (a quota lends only its own min); "
            f"it does for {', '.join(over)}"
        )
    return TreeQuota(
        name=name,
        namespace=meta.get("namespace") or "",
        parent=parent,
        is_parent=_boolean(LABEL_IS_PARENT, labels.get(LABEL_IS_PARENT, "false")),
        allow_lent=_boolean(
            LABEL_ALLOW_LENT_RESOURCE, labels.get(LABEL_ALLOW_LENT_RESOURCE, "true")
        ),
        min=minimum,
        max=maximum,
        shared_weight=weight,
        namespaces=_namespaces(annotations[ANNOTATION_NAMESPACES])
        if ANNOTATION_NAMESPACES in annotations
        else (),
        lending_limit=lending,
        borrowing_limit=limits[ANNOTATION_BORROWING_LIMIT],
        fair_weight=_weight(annotations[ANNOTATION_WEIGHT])
        if ANNOTATION_WEIGHT in annotations
        else 1.0,
        min_runtime=_min_runtime(annotations[ANNOTATION_MIN_RUNTIME])
        if ANNOTATION_MIN_RUNTIME in annotations
        else 0.0,
        created=str(meta.get("creationTimestamp") or ""),
        raw=dict(obj),
    )


_ROOT_LABELS: Final = frozenset({LABEL_PARENT, LABEL_IS_PARENT, LABEL_ALLOW_LENT_RESOURCE})
_OUTSIDE_ANNOTATIONS: Final = QUOTA_ANNOTATIONS - {ANNOTATION_NAMESPACES}


def parse_reserved(obj: Mapping[str, Any]) -> OutsideQuota:
    """An ElasticQuota named ``koordinator-root-quota``, ``-default-quota`` or
    ``-system-quota``, read as Koordinator's quota of that name; raises :class:`TreeError`
    naming what Berth cannot honour.

    The root hands down the cluster's capacity: it takes no min or max, and must be a parent
    under nothing. The default and system quotas hang from the root and are outside the
    water-filling: a max is honoured, a min (a guarantee they do not get), a parent other
    than the root, ``is-parent: "true"`` or Berth's limits are refused; the system quota may
    list namespaces whose pods it holds (the default quota holds every pod of no quota
    already)."""
    meta = obj.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    spec = obj.get("spec") or {}
    name = meta.get("name") or ""
    berth = sorted(k for k in annotations if k in BERTH_ANNOTATIONS)
    if berth:
        raise TreeError(f"{', '.join(berth)} cannot be set on {name}: it shares nothing")
    _unknown(labels, _ROOT_LABELS, "label")
    minimum = resource_list(spec.get("min"))
    maximum = resource_list(spec.get("max"))
    if ANNOTATION_SHARED_WEIGHT in annotations:  # read and checked; it shares nothing here
        _resource_annotation(ANNOTATION_SHARED_WEIGHT, annotations[ANNOTATION_SHARED_WEIGHT])
    if name == ROOT:
        _unknown(annotations, _OUTSIDE_ANNOTATIONS, "annotation")
        if labels.get(LABEL_PARENT):
            raise TreeError(f"{ROOT} is the root: {LABEL_PARENT} must be empty")
        if not _boolean(LABEL_IS_PARENT, labels.get(LABEL_IS_PARENT, "true")):
            raise TreeError(f'{ROOT} is the root: {LABEL_IS_PARENT} must be "true"')
        _boolean(LABEL_ALLOW_LENT_RESOURCE, labels.get(LABEL_ALLOW_LENT_RESOURCE, "false"))
        if any(minimum.values()) or maximum:
            raise TreeError(
                f"{ROOT} hands down the cluster's allocatable: its min and max are not "
                "honoured; leave spec empty"
            )
        return OutsideQuota(
            ROOT,
            namespace=meta.get("namespace") or "",
            created=str(meta.get("creationTimestamp") or ""),
            raw=dict(obj),
        )
    known = QUOTA_ANNOTATIONS if name == SYSTEM else _OUTSIDE_ANNOTATIONS
    _unknown(annotations, known, "annotation")
    parent = labels.get(LABEL_PARENT) or ROOT
    if parent != ROOT:
        raise TreeError(f"{name} hangs from the root: {LABEL_PARENT} must be {ROOT} or absent")
    if _boolean(LABEL_IS_PARENT, labels.get(LABEL_IS_PARENT, "false")):
        raise TreeError(f"{name} holds pods, not quotas: it cannot be {LABEL_IS_PARENT}")
    _boolean(LABEL_ALLOW_LENT_RESOURCE, labels.get(LABEL_ALLOW_LENT_RESOURCE, "true"))
    if any(minimum.values()):
        raise TreeError(
            f"{name} gets no min: it is outside the root's sharing (its runtime is its max, "
            "and what its pods use is taken off what the root hands down); remove spec.min"
        )
    return OutsideQuota(
        name,
        max=maximum,
        namespaces=_namespaces(annotations[ANNOTATION_NAMESPACES])
        if ANNOTATION_NAMESPACES in annotations
        else (),
        namespace=meta.get("namespace") or "",
        created=str(meta.get("creationTimestamp") or ""),
        raw=dict(obj),
    )


def outside_max_args(args: Mapping[str, Any]) -> dict[str, Resources]:
    """The default and system quotas' max from Koordinator's ``defaultQuotaGroupMax`` and
    ``systemQuotaGroupMax`` (resource lists; absent: no max); raises ``ValueError`` naming
    the argument."""
    found: dict[str, Resources] = {}
    for quota, name in OUTSIDE_MAX_ARGS.items():
        given = args.get(name)
        if given is None:
            continue
        if not isinstance(given, dict):
            raise ValueError(f"{name}: expected a resource list such as {{cpu: 10}}, not {given!r}")
        try:
            values = resource_list(given)
        except (QuantityError, TypeError) as error:
            raise ValueError(f"{name}: {error}") from error
        negative = sorted(r for r, v in values.items() if v < 0)
        if negative:
            raise ValueError(f"{name} must not be negative: {', '.join(negative)}")
        found[quota] = values
    return found


def _reserved_parent(name: str) -> str | None:
    """Why a quota cannot hang from ``name`` when it is the default or system quota."""
    if name in OUTSIDE:
        return (
            f"parent ElasticQuota {name} is Koordinator's {name.split('-')[1]} quota: it "
            "holds pods, not quotas"
        )
    return None


@dataclass(frozen=True)
class PodQuota:
    """What a pod's labels say about its quota."""

    name: str | None
    preemptible: bool


def parse_pod(labels: Mapping[str, str]) -> PodQuota:
    """The pod's quota label and preemptibility; raises :class:`TreeError` naming what is wrong."""
    _unknown(labels, POD_LABELS, "pod label")
    preemptible = _boolean(LABEL_PREEMPTIBLE, labels.get(LABEL_PREEMPTIBLE, "true"))
    return PodQuota(labels.get(LABEL_NAME) or None, preemptible)


def _outside_quotas() -> dict[str, OutsideQuota]:
    return {name: OutsideQuota(name) for name in OUTSIDE}


@dataclass
class QuotaTree:
    """The tree quotas by name, their children, and the quotas refused with why; beside
    them the default and system quotas (always there, implicit unless stored) and the root's
    object when one is stored."""

    quotas: dict[str, TreeQuota] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, name) -> why
    by_namespace: dict[str, str] = field(default_factory=dict)
    outside: dict[str, OutsideQuota] = field(default_factory=_outside_quotas)
    root: OutsideQuota | None = None

    def chain(self, name: str) -> list[TreeQuota]:
        """The quota and its ancestors, nearest first (the root is not a quota)."""
        chain: list[TreeQuota] = []
        while name in self.quotas:
            chain.append(self.quotas[name])
            name = self.quotas[name].parent
        return chain

    def sum_of_children_min(self, name: str) -> Resources:
        total: Resources = {}
        for child in self.children.get(name, ()):
            for resource, value in self.quotas[child].min.items():
                total[resource] = total.get(resource, 0) + value
        return total

    def min_overcommitted(self, name: str) -> list[str]:
        """Resources whose children's mins add up to more than the parent's min."""
        parent = self.quotas[name]
        return sorted(
            resource
            for resource, value in self.sum_of_children_min(name).items()
            if value > parent.min.get(resource, 0)
        )

    def resolve(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """The name of the tree quota a pod belongs to (None: none of the tree's);
        raises :class:`TreeError` when its label names a quota the tree cannot use."""
        named = parse_pod(labels).name
        if named is None:
            found = self.by_namespace.get(namespace)
            if found is None:
                # A namespace whose tree quota is refused is not left unchecked.
                for (ns, name), reason in sorted(self.refused.items()):
                    if ns == namespace and name not in RESERVED:  # those govern no namespace
                        raise TreeError(f"ElasticQuota {ns}/{name} is refused: {reason}")
            return found
        if named in self.outside:
            if not parse_pod(labels).preemptible:
                raise TreeError(
                    f'{LABEL_PREEMPTIBLE}: "false" is honoured in tree quotas only; {named} '
                    "has no min to keep a non-preemptible pod within"
                )
            return None  # the default or system quota's: see outside_quota
        if named == ROOT:
            raise TreeError(
                f"{LABEL_NAME} names {ROOT}, the root of the quota tree: it runs no pods; "
                "name a leaf quota"
            )
        if named in self.quotas:
            if self.quotas[named].is_parent:
                raise TreeError(
                    f"{LABEL_NAME} names ElasticQuota {named}, a parent quota "
                    f"({LABEL_IS_PARENT}=true): a parent runs no pods"
                )
            return named
        why = next((w for (_, n), w in self.refused.items() if n == named), None)
        if why is not None:
            raise TreeError(f"{LABEL_NAME} names ElasticQuota {named}, which is refused: {why}")
        raise TreeError(f"{LABEL_NAME} names ElasticQuota {named}, which does not exist")

    def outside_quota(self, namespace: str, labels: Mapping[str, str], flat: bool) -> str | None:
        """Where a pod that no tree quota holds counts (``resolve`` found none, or refused
        its labels): the default or system quota its label names, else the system quota
        when its namespace is listed by the system quota, else the default quota, unless a
        flat quota governs its namespace (``flat``; None: the flat quota's)."""
        named = labels.get(LABEL_NAME)
        if named in self.outside:
            return named
        if flat:
            return None
        if namespace in self.outside[SYSTEM].namespaces:
            return SYSTEM
        return DEFAULT

    def outside_limited(self) -> bool:
        """Whether the default or system quota has a max (else it refuses no pod)."""
        return any(quota.max for quota in self.outside.values())


def build_tree(
    objects: Iterable[Mapping[str, Any]], outside_max: Mapping[str, Resources] | None = None
) -> QuotaTree:
    """The tree of the tree-labelled quotas among ``objects``; any quota that cannot take
    part (malformed, duplicate name, missing or non-parent parent, a cycle) is refused,
    and so is everything below it. ``outside_max`` is the default and system quotas' max
    when no ElasticQuota of their name is stored (the scheduler's configuration)."""
    tree = QuotaTree()
    for name, maximum in (outside_max or {}).items():
        if name in tree.outside:
            tree.outside[name] = OutsideQuota(name, max=dict(maximum))
    parsed: list[TreeQuota] = []
    reserved: list[OutsideQuota] = []
    for obj in objects:
        if not is_tree_quota(obj):
            continue
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        try:
            if key[1] in RESERVED:
                reserved.append(parse_reserved(obj))
            else:
                parsed.append(parse_quota(obj))
        except (TreeError, QuantityError) as error:
            tree.refused[key] = str(error)
    kept: dict[str, OutsideQuota] = {}
    for special in sorted(reserved, key=lambda q: precedence(q.created, q.name)):
        if special.name in kept:
            tree.refused[(special.namespace, special.name)] = (
                f"ElasticQuota {kept[special.name].namespace}/{special.name} already has this "
                "name (tree quotas are known by name)"
            )
            continue
        kept[special.name] = special
        if special.name == ROOT:
            tree.root = special
        else:
            tree.outside[special.name] = special
    candidates: dict[str, TreeQuota] = {}
    for quota in sorted(parsed, key=lambda q: precedence(q.created, q.name)):
        if quota.name in candidates:
            first = candidates[quota.name]
            tree.refused[(quota.namespace, quota.name)] = (
                f"ElasticQuota {first.namespace}/{quota.name} already has this name "
                "(tree quotas are known by name)"
            )
        else:
            candidates[quota.name] = quota
    # A quota stays when its ancestors, up to the root, all stay and are parents.
    for quota in candidates.values():
        seen = {quota.name}
        current = quota
        why = None
        while current.parent != ROOT:
            parent = candidates.get(current.parent)
            if parent is None:
                why = _reserved_parent(current.parent) or (
                    f"parent ElasticQuota {current.parent} does not exist"
                )
            elif not parent.is_parent:
                why = f"parent ElasticQuota {parent.name} is not labelled {LABEL_IS_PARENT}=true"
            elif parent.name in seen:
                why = f"{LABEL_PARENT} labels form a cycle through {parent.name}"
            if why is not None:
                break
            assert parent is not None
            seen.add(parent.name)
            current = parent
        if why is None:
            tree.quotas[quota.name] = quota
        else:
            tree.refused[(quota.namespace, quota.name)] = why
    for quota in sorted(tree.quotas.values(), key=lambda q: precedence(q.created, q.name)):
        tree.children.setdefault(quota.parent, []).append(quota.name)
        if quota.is_parent:
            continue
        for namespace in quota.namespaces:
            tree.by_namespace.setdefault(namespace, quota.name)
    for quota in sorted(tree.quotas.values(), key=lambda q: precedence(q.created, q.name)):
        if not quota.is_parent and not quota.namespaces:
            tree.by_namespace.setdefault(quota.namespace, quota.name)
    return tree
