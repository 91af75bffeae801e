"""Shapes the four APIs share with core Kubernetes: metadata, references, selectors, taints,
conditions and the (partial) pod template.

Only what Berth reads is modelled. The pod template pieces are :class:`OpenModel`\\ s: they
keep every field they do not know, because a reservation's template is the user's pod
template and must come back exactly as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pydantic import ConfigDict, Field

from berth.api.base import ApiModel, OpenModel, Time
from berth.api.quantity import ResourceList

__all__ = [
    "Affinity",
    "Condition",
    "ConditionStatus",
    "Container",
    "ContainerPort",
    "ControllerReference",
    "KubeObject",
    "LabelSelector",
    "LabelSelectorOperator",
    "LabelSelectorRequirement",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "PodAffinity",
    "PodAffinityTerm",
    "PodAntiAffinity",
    "PodSpec",
    "PodTemplateMetadata",
    "PodTemplateSpec",
    "PreferredSchedulingTerm",
    "ResourceRequirements",
    "Taint",
    "TaintEffect",
    "Toleration",
    "WeightedPodAffinityTerm",
]


# --- conditions -----------------------------------------------------------------------------


class ConditionStatus(StrEnum):
    """Whether a condition holds; ``Unknown`` while nobody has decided yet."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """One aspect of an object's state, in the ``metav1.Condition`` shape."""

    type: str
    """Which aspect this is (e.g. ``Ready``); unique within the list."""
    status: ConditionStatus
    """``True``, ``False`` or ``Unknown``."""
    reason: str | None = None
    """A CamelCase word saying why the status is what it is (e.g. ``Unschedulable``)."""
    message: str | None = None
    """A human-readable explanation."""
    last_transition_time: Time | None = None
    """When the status last changed."""
    observed_generation: int | None = None
    """The ``metadata.generation`` the condition was computed from."""


# --- references ------------------------------------------------------------------------------


class ObjectReference(ApiModel):
    """A reference to an object (``corev1.ObjectReference``); unset parts are ignored."""

    api_version: str | None = None
    """API version of the referent."""
    kind: str | None = None
    """Kind of the referent (e.g. ``Pod``)."""
    namespace: str | None = None
    """Namespace of the referent."""
    name: str | None = None
    """Name of the referent."""
    uid: str | None = None
    """UID of the referent."""
    resource_version: str | None = None
    """Specific resourceVersion this reference is made to, if any."""
    field_path: str | None = None
    """A part of the referent (e.g. ``spec.containers{app}``), if any."""


class OwnerReference(ApiModel):
    """An entry of ``metadata.ownerReferences`` (``metav1.OwnerReference``)."""

    api_version: str
    """API version of the owner."""
    kind: str
    """Kind of the owner."""
    name: str
    """Name of the owner."""
    uid: str
    """UID of the owner."""
    controller: bool | None = None
    """True when the owner is the managing controller."""
    block_owner_deletion: bool | None = None
    """True to keep the owner until this object is deleted (foreground deletion)."""


class ControllerReference(ApiModel):
    """A controller that owns pods (e.g. a ReplicaSet), plus the namespace it lives in.

    Koordinator's ``ReservationControllerReference``: an owner reference with ``namespace``
    added because a reservation is cluster-scoped. ``uid`` is optional here so a reservation
    can name a controller by kind and name; when set it must match too.
    """

    api_version: str
    """API version of the controller (e.g. ``apps/v1``)."""
    kind: str
    """Kind of the controller (e.g. ``ReplicaSet``)."""
    name: str
    """Name of the controller."""
    uid: str | None = None
    """UID of the controller; when set, only the controller with this UID matches."""
    controller: bool | None = None
    """When true, only pods whose managing controller this is match."""
    block_owner_deletion: bool | None = None
    """Carried over from the owner reference shape; not used for matching."""
    namespace: str | None = None
    """Namespace of the controller (and so of its pods)."""


# --- selectors -------------------------------------------------------------------------------


class LabelSelectorOperator(StrEnum):
    """How a label selector requirement relates a label to its values."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    """One requirement of a label selector: a key, an operator and values."""

    key: str
    """The label key the requirement applies to."""
    operator: LabelSelectorOperator
    """``In``, ``NotIn``, ``Exists`` or ``DoesNotExist``."""
    values: list[str] | None = None
    """Values for ``In`` and ``NotIn``; empty for ``Exists`` and ``DoesNotExist``."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether labels satisfy this requirement, with ``metav1.LabelSelector`` semantics."""
        values = self.values or []
        match self.operator:
            case LabelSelectorOperator.IN:
                return self.key in labels and labels[self.key] in values
            case LabelSelectorOperator.NOT_IN:
                return self.key not in labels or labels[self.key] not in values
            case LabelSelectorOperator.EXISTS:
                return self.key in labels
            case LabelSelectorOperator.DOES_NOT_EXIST:
                return self.key not in labels


class LabelSelector(ApiModel):
    """A label query (``metav1.LabelSelector``); all its parts are ANDed."""

    match_labels: dict[str, str] | None = None
    """Labels that must all be present with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] | None = None
    """Requirements that must all hold."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels is selected; an empty selector selects all."""
        if any(labels.get(key) != value for key, value in (self.match_labels or {}).items()):
            return False
        return all(req.matches(labels) for req in self.match_expressions or [])


# --- taints and tolerations ------------------------------------------------------------------


class TaintEffect(StrEnum):
    """What a taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(ApiModel):
    """A taint (``corev1.Taint``): keeps away whatever does not tolerate it."""

    key: str
    """The taint key."""
    value: str | None = None
    """The taint value."""
    effect: TaintEffect
    """``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``."""
    time_added: Time | None = None
    """When the taint was added (``NoExecute`` taints only)."""


class Toleration(OpenModel):
    """A toleration (``corev1.Toleration``); empty key with ``Exists`` tolerates everything."""

    key: str | None = None
    """The taint key this toleration applies to; empty means all keys."""
    operator: str | None = None
    """``Exists`` or ``Equal`` (the default)."""
    value: str | None = None
    """The taint value to match with ``Equal``."""
    effect: str | None = None
    """The taint effect to match; empty means all effects."""
    toleration_seconds: int | None = None
    """How long a ``NoExecute`` taint is tolerated; unset means forever."""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration tolerates the taint, as ``corev1.Toleration.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in (None, "", "Equal"):
            return (self.value or "") == (taint.value or "")
        return False


# --- the partial pod template ----------------------------------------------------------------


class ResourceRequirements(OpenModel):
    """Compute resources of a container: what it requests and its limits."""

    requests: ResourceList | None = None
    """Minimum resources the container needs; what scheduling and quotas count."""
    limits: ResourceList | None = None
    """Maximum resources the container may use."""


class ContainerPort(OpenModel):
    """A port of a container; host ports matter to scheduling."""

    container_port: int = Field(ge=1, le=65535)
    """Port number on the pod's IP address."""
    host_port: int | None = Field(default=None, ge=0, le=65535)
    """Port number on the node, if the container binds one."""
    host_ip: str | None = Field(default=None, alias="hostIP")
    """Node IP address to bind the host port to."""
    protocol: str | None = None
    """``TCP`` (default), ``UDP`` or ``SCTP``."""
    name: str | None = None
    """Name of the port."""


class Container(OpenModel):
    """A container of the template; only its resources and ports are read."""

    name: str | None = None
    """Name of the container."""
    image: str | None = None
    """Container image; a reservation never runs it."""
    resources: ResourceRequirements | None = None
    """Resources the container requests."""
    ports: list[ContainerPort] | None = None
    """Ports the container exposes."""


class NodeSelectorOperator(StrEnum):
    """How a node selector requirement relates a node label or field to its values."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(OpenModel):
    """One requirement on a node's labels or fields."""

    key: str
    """The label key (or field name) the requirement applies to."""
    operator: NodeSelectorOperator
    """``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt`` or ``Lt``."""
    values: list[str] | None = None
    """The values to compare with."""


class NodeSelectorTerm(OpenModel):
    """Requirements that must all hold for a node to match the term."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    """Requirements on node labels."""
    match_fields: list[NodeSelectorRequirement] | None = None
    """Requirements on node fields (``metadata.name``)."""


class NodeSelector(OpenModel):
    """Terms of which at least one must match (the terms are ORed)."""

    node_selector_terms: list[NodeSelectorTerm]
    """The terms; a node matching any of them matches."""


class PreferredSchedulingTerm(OpenModel):
    """A node selector term that is preferred, with a weight."""

    weight: int = Field(ge=1, le=100)
    """How much matching the term adds to a node's score (1-100)."""
    preference: NodeSelectorTerm
    """The term."""


class NodeAffinity(OpenModel):
    """Rules for which nodes a pod may or prefers to run on."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    """Nodes that do not match are never chosen."""
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = (
        None
    )
    """Nodes matching more of these (by weight) score higher."""


class PodAffinityTerm(OpenModel):
    """Pods (by selector, in some namespaces) that must or must not run in the same domain."""

    label_selector: LabelSelector | None = None
    """Which pods."""
    namespaces: list[str] | None = None
    """Namespaces of those pods; empty means the pod's own namespace."""
    namespace_selector: LabelSelector | None = None
    """Namespaces of those pods, by label."""
    topology_key: str
    """The node label whose value defines a domain (e.g. ``kubernetes.io/hostname``)."""
    match_label_keys: list[str] | None = None
    """Pod label keys whose values are added to the selector."""
    mismatch_label_keys: list[str] | None = None
    """Pod label keys whose values are excluded by the selector."""


class WeightedPodAffinityTerm(OpenModel):
    """A preferred pod (anti-)affinity term with a weight."""

    weight: int = Field(ge=1, le=100)
    """How much satisfying the term adds to a node's score (1-100)."""
    pod_affinity_term: PodAffinityTerm
    """The term."""


class PodAffinity(OpenModel):
    """Pods this pod should run near."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    """Terms that must all be satisfied."""
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = (
        None
    )
    """Terms that add to a node's score."""


class PodAntiAffinity(OpenModel):
    """Pods this pod should run away from."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    """Terms that must all be satisfied."""
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = (
        None
    )
    """Terms that add to a node's score."""


class Affinity(OpenModel):
    """Node affinity and pod (anti-)affinity of a pod."""

    node_affinity: NodeAffinity | None = None
    """Which nodes."""
    pod_affinity: PodAffinity | None = None
    """Near which pods."""
    pod_anti_affinity: PodAntiAffinity | None = None
    """Away from which pods."""


class PodSpec(OpenModel):
    """The scheduling-relevant part of a pod spec; everything else is kept as written."""

    containers: list[Container] = Field(default_factory=list)
    """The containers; their requests are what gets reserved."""
    init_containers: list[Container] | None = None
    """Init containers; the largest one's requests count if above the containers' sum."""
    overhead: ResourceList | None = None
    """Resources the pod's sandbox needs on top of its containers (from its RuntimeClass)."""
    node_selector: dict[str, str] | None = None
    """Labels a node must have."""
    affinity: Affinity | None = None
    """Node affinity and pod (anti-)affinity."""
    tolerations: list[Toleration] | None = None
    """Taints the pod tolerates."""
    priority: int | None = None
    """The pod's priority value."""
    priority_class_name: str | None = None
    """The PriorityClass giving the pod its priority."""
    node_name: str | None = None
    """Pins the pod to this node; the scheduler still checks that it fits."""
    scheduler_name: str | None = None
    """The scheduler responsible for the pod."""


class PodTemplateMetadata(OpenModel):
    """Metadata of a pod template: the labels and annotations its pods would carry."""

    labels: dict[str, str] | None = None
    """Labels of the pod."""
    annotations: dict[str, str] | None = None
    """Annotations of the pod."""


class PodTemplateSpec(OpenModel):
    """A pod template (``corev1.PodTemplateSpec``), partially modelled, fully preserved."""

    metadata: PodTemplateMetadata | None = None
    """Labels and annotations of the pod."""
    spec: PodSpec = Field(default_factory=PodSpec)
    """The pod spec."""


# --- object metadata -------------------------------------------------------------------------


class ObjectMeta(ApiModel):
    """Object metadata (``metav1.ObjectMeta``); fields not listed here are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class KubeObject(ApiModel):
    """What every top-level object has: type information and metadata."""

    api_version: str
    """The group and version of the object (e.g. ``scheduling.koordinator.sh/v1alpha1``)."""
    kind: str
    """The kind of the object."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
