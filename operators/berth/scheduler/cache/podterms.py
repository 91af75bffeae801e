"""A pod's inter-pod affinity terms and topology spread constraints, parsed once.

``PodInfo`` holds these so that InterPodAffinity and PodTopologySpread never read the raw
object in a scheduling cycle. Selector semantics are ``metav1.LabelSelector``'s as the
scheduler reads them: an absent selector selects nothing, an empty one everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from berth.api.meta import LabelSelector, LabelSelectorRequirement

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def selector_of(raw: dict[str, Any] | None) -> LabelSelector | None:
    return None if raw is None else LabelSelector.model_validate(raw)


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """An absent selector selects nothing (LabelSelectorAsSelector(nil) is Nothing)."""
    return selector is not None and selector.matches(labels)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One podAffinityTerm: which pods (namespaces and labels), in which topology."""

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str]
    # namespaceSelector: None when absent; ``all_namespaces`` when it is ``{}``.
    namespace_selector: LabelSelector | None
    all_namespaces: bool

    @classmethod
    def parse(cls, raw: dict[str, Any], own_namespace: str) -> AffinityTerm:
        namespaces = frozenset(raw.get("namespaces") or ())
        ns_raw = raw.get("namespaceSelector")
        ns_selector = selector_of(ns_raw)
        everything = ns_raw is not None and not (
            ns_raw.get("matchLabels") or ns_raw.get("matchExpressions")
        )
        if not namespaces and ns_raw is None:
            namespaces = frozenset((own_namespace,))
        return cls(
            topology_key=raw.get("topologyKey") or "",
            selector=selector_of(raw.get("labelSelector")),
            namespaces=namespaces,
            namespace_selector=None if everything else ns_selector,
            all_namespaces=everything,
        )

    def matches(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]
    ) -> bool:
        """Whether a pod of ``namespace`` with ``labels`` is one this term is about."""
        in_namespace = (
            self.all_namespaces
            or namespace in self.namespaces
            or selects(self.namespace_selector, namespace_labels)
        )
        return in_namespace and selects(self.selector, labels)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """spec.affinity.podAffinity and podAntiAffinity."""

    required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedAffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred_anti: tuple[WeightedAffinityTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.required or self.preferred or self.required_anti or self.preferred_anti)

    @classmethod
    def parse(cls, affinity: dict[str, Any], namespace: str) -> PodAffinity:
        def terms(kind: str) -> tuple[AffinityTerm, ...]:
            section = affinity.get(kind) or {}
            raws = section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
            return tuple(AffinityTerm.parse(t, namespace) for t in raws)

        def weighted(kind: str) -> tuple[WeightedAffinityTerm, ...]:
            section = affinity.get(kind) or {}
            raws = section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
            return tuple(
                WeightedAffinityTerm(
                    int(t.get("weight") or 0),
                    AffinityTerm.parse(t.get("podAffinityTerm") or {}, namespace),
                )
                for t in raws
            )

        return cls(
            terms("podAffinity"),
            weighted("podAffinity"),
            terms("podAntiAffinity"),
            weighted("podAntiAffinity"),
        )


NO_AFFINITY = PodAffinity()


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topologySpreadConstraint, its selector already narrowed by matchLabelKeys."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy (default Honor)
    honor_node_taints: bool = False  # nodeTaintsPolicy (default Ignore)

    @classmethod
    def parse(cls, raw: dict[str, Any], labels: Mapping[str, str]) -> SpreadConstraint:
        selector = selector_of(raw.get("labelSelector"))
        keys = [k for k in raw.get("matchLabelKeys") or () if k in labels]
        if selector is not None and keys:
            # The pod's own values for matchLabelKeys narrow the selector (idempotent with
            # the API server's merge).
            extra = [
                LabelSelectorRequirement.model_validate(
                    {"key": key, "operator": "In", "values": [labels[key]]}
                )
                for key in keys
            ]
            selector = selector.model_copy(
                update={"match_expressions": [*(selector.match_expressions or []), *extra]}
            )
        return cls(
            max_skew=int(raw.get("maxSkew") or 1),
            topology_key=raw.get("topologyKey") or "",
            hard=(raw.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule",
            selector=selector,
            min_domains=int(raw.get("minDomains") or 1),
            honor_node_affinity=(raw.get("nodeAffinityPolicy") or "Honor") == "Honor",
            honor_node_taints=(raw.get("nodeTaintsPolicy") or "Ignore") == "Honor",
        )


def spread_constraints(
    spec: dict[str, Any], labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    return tuple(
        SpreadConstraint.parse(raw, labels) for raw in spec.get("topologySpreadConstraints") or ()
    )


def image_names(spec: dict[str, Any]) -> tuple[str, ...]:
    """Images of init and app containers, normalized as the kubelet reports them."""
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    return tuple(normalized_image(c.get("image") or "") for c in containers if c.get("image"))


def normalized_image(name: str) -> str:
    """A name without tag or digest gets ``:latest`` (kube-scheduler's normalizedImageName)."""
    if name.rfind(":") <= name.rfind("/"):
        return f"{name}:latest"
    return name
