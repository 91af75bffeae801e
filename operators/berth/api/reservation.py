"""Reservation (``scheduling.koordinator.sh/v1alpha1``, cluster-scoped): capacity held on a
node for the pods of chosen owners, wire-compatible with Koordinator.

Expiry and the ``ttl`` default: a reservation with neither ``ttl`` nor ``expires`` expires
24 hours after creation. That default is NOT in the CRD schema: the API server applies
schema defaults before validation, so a defaulted ``ttl`` would trip the rule that rejects
``ttl`` and ``expires`` together whenever a user sets ``expires``. The 24 hours are applied
by :meth:`ReservationSpec.effective_ttl` and :meth:`Reservation.expiry_time` instead, which
the operator uses; ``ttl: 0s`` means never.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pydantic import ConfigDict, Field

from berth.api.base import SERVER_DEFAULT, ApiModel, Time
from berth.api.duration import Duration, parse_duration
from berth.api.meta import (
    Condition,
    ControllerReference,
    KubeObject,
    LabelSelector,
    ObjectReference,
    PodTemplateSpec,
    Taint,
)
from berth.api.quantity import ResourceList
from berth.api.resource import CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "DEFAULT_TTL",
    "GROUP",
    "TERMINAL_PHASES",
    "VERSION",
    "AllocatePolicy",
    "Reservation",
    "ReservationCondition",
    "ReservationConditionType",
    "ReservationOwner",
    "ReservationPhase",
    "ReservationReason",
    "ReservationSpec",
    "ReservationStatus",
]

GROUP: Final = "scheduling.koordinator.sh"
VERSION: Final = "v1alpha1"
DEFAULT_TTL: Final = timedelta(hours=24)
"""Lifetime of a reservation that sets neither ``ttl`` nor ``expires``."""


class ReservationPhase(StrEnum):
    """Where a reservation is in its life."""

    PENDING = "Pending"
    """Not placed yet (new, or no node fits)."""
    AVAILABLE = "Available"
    """Placed and holding capacity that owners can allocate."""
    WAITING = "Waiting"
    """Placed with ``preAllocation``, waiting for the node to free enough capacity."""
    SUCCEEDED = "Succeeded"
    """Allocated by an owner (``allocateOnce``); holds nothing any more."""
    FAILED = "Failed"
    """Expired, or its node went away; holds nothing any more."""


TERMINAL_PHASES: Final = frozenset({ReservationPhase.SUCCEEDED, ReservationPhase.FAILED})
"""Phases a reservation never leaves; terminal reservations are garbage-collected."""


class ReservationConditionType(StrEnum):
    """The conditions a reservation reports."""

    SCHEDULED = "Scheduled"
    READY = "Ready"


class ReservationReason(StrEnum):
    """Reasons of reservation conditions."""

    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    AVAILABLE = "Available"
    WAITING = "Waiting"
    SUCCEEDED = "Succeeded"
    EXPIRED = "Expired"
    NODE_DELETED = "NodeDeleted"


class AllocatePolicy(StrEnum):
    """How an owner pod may combine reserved capacity with the node's free capacity."""

    ALIGNED = "Aligned"
    """Take what is left of the reservation, and the rest from the node's free capacity."""
    RESTRICTED = "Restricted"
    """Resources the reservation holds must come from the reservation alone."""


class ReservationCondition(Condition):
    """A reservation condition: the ``metav1.Condition`` shape plus ``lastProbeTime``."""

    last_probe_time: Time | None = None
    """When the condition was last checked."""


class ReservationOwner(ApiModel):
    """Pods allowed to use a reservation; the parts that are set must all match (AND)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.object) || has(self.controller) || has(self.labelSelector)",
                    "message": "each owner must set at least one of object, controller or "
                    "labelSelector",
                }
            ]
        }
    )

    object: ObjectReference | None = None
    """A specific object, usually a pod (namespace and name, or uid)."""
    controller: ControllerReference | None = None
    """Pods controlled by this controller (e.g. a ReplicaSet or Job)."""
    label_selector: LabelSelector | None = None
    """Pods with these labels."""


class ReservationSpec(ApiModel):
    """What to reserve, for whom, and for how long."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.ttl) && has(self.expires))",
                    "message": "ttl and expires are mutually exclusive: set at most one of them",
                }
            ]
        }
    )

    template: PodTemplateSpec
    """The pod to reserve capacity for, as a pod template (resources, node selector,
    affinity, tolerations, priority; ``spec.nodeName`` pins the node). Kept as written."""
    owners: list[ReservationOwner] = Field(
        min_length=1,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "size(self) > 0",
                    "message": "at least one owner is required: owners say which pods may "
                    "use the reserved capacity",
                }
            ]
        },
    )
    """Who may use the reservation; a pod matching any entry is an owner (OR)."""
    ttl: Duration | None = None
    """How long the reservation lives after creation (e.g. ``24h``); ``0s`` means forever.
    Defaults to 24h when neither ttl nor expires is set. Mutually exclusive with expires."""
    expires: Time | None = None
    """When the reservation expires. Mutually exclusive with ttl."""
    pre_allocation: bool | None = None
    """Place the reservation even if the node has not enough free capacity yet; it waits
    (phase Waiting) until enough is freed, and keeps others from taking it meanwhile."""
    allocate_once: bool = Field(default=True, json_schema_extra=SERVER_DEFAULT)
    """The first owner pod to allocate ends the reservation (phase Succeeded); what it did
    not use is released."""
    allocate_policy: AllocatePolicy = Field(
        default=AllocatePolicy.ALIGNED, json_schema_extra=SERVER_DEFAULT
    )
    """``Aligned`` (owners may add free node capacity) or ``Restricted`` (reserved
    resources only from the reservation)."""
    unschedulable: bool | None = None
    """When true, no new owner pods are placed into the reservation."""
    taints: list[Taint] | None = None
    """Taints new owner pods must tolerate to use the reservation."""

    def effective_ttl(self) -> timedelta | None:
        """The time-to-live that applies, or ``None`` when the ttl does not expire it.

        ``ttl`` when set (``0s`` gives ``None``: never); ``None`` when only ``expires`` is
        set; 24 hours when neither is set (the default the schema cannot carry).
        """
        if self.ttl is not None:
            ttl = parse_duration(self.ttl)
            return ttl or None
        if self.expires is not None:
            return None
        return DEFAULT_TTL


class ReservationStatus(ApiModel):
    """What the scheduler and the operator observed."""

    phase: ReservationPhase | None = None
    """``Pending``, ``Available``, ``Waiting``, ``Succeeded`` or ``Failed``."""
    conditions: list[ReservationCondition] | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    """``Scheduled`` and ``Ready``, with reasons such as ``Unschedulable`` or ``Expired``."""
    node_name: str | None = None
    """The node the reservation is placed on."""
    allocatable: ResourceList | None = None
    """The capacity reserved (the template's effective requests)."""
    allocated: ResourceList | None = None
    """The sum of the current owners' requests."""
    current_owners: list[ObjectReference] | None = None
    """The pods that currently use the reservation (namespace, name, uid)."""


class Reservation(KubeObject):
    """A Reservation: capacity held on one node for the pods of its owners."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "Reservation"
    spec: ReservationSpec
    """What to reserve, for whom, and for how long."""
    status: ReservationStatus | None = None
    """Placement and allocation state, written by Berth."""

    def expiry_time(self) -> datetime | None:
        """When the reservation expires, or ``None`` if it never does.

        ``expires`` wins when set (also on objects that set both, as Koordinator does);
        otherwise creation time plus :meth:`ReservationSpec.effective_ttl` (24h by default).
        Raises :class:`ValueError` for an object not created yet (no creation time).
        """
        if self.spec.expires is not None:
            return self.spec.expires
        ttl = self.spec.effective_ttl()
        if ttl is None:
            return None
        created = self.metadata.creation_timestamp
        if created is None:
            raise ValueError("the reservation has no creationTimestamp yet; create it first")
        return created + ttl

    def is_expired(self, now: datetime) -> bool:
        """Whether the reservation has expired at ``now`` (timezone-aware)."""
        expiry = self.expiry_time()
        return expiry is not None and now >= expiry

    @property
    def phase(self) -> ReservationPhase | None:
        """The phase, or ``None`` before anyone has set it."""
        return self.status.phase if self.status else None


CRD: Final = CustomResource(
    model=Reservation,
    group=GROUP,
    version=VERSION,
    kind="Reservation",
    plural="reservations",
    singular="reservation",
    scope="Cluster",
    short_names=("rsv",),
    categories=("berth",),
    printer_columns=(
        PrinterColumn("Phase", ".status.phase", description="The phase of the reservation"),
        PrinterColumn("Node", ".status.nodeName", description="The node it is placed on"),
        PrinterColumn("CPU", ".status.allocatable.cpu", description="Reserved CPU"),
        PrinterColumn("Memory", ".status.allocatable.memory", description="Reserved memory"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
        PrinterColumn(
            "Reason",
            '.status.conditions[?(@.type=="Ready")].reason',
            description="Why it is in its phase: Unschedulable, Waiting, Expired, NodeDeleted...",
            priority=1,
        ),
        PrinterColumn(
            "Allocated CPU",
            ".status.allocated.cpu",
            description="CPU its current owners use",
            priority=1,
        ),
        PrinterColumn("TTL", ".spec.ttl", description="Time to live", priority=1),
        PrinterColumn("Expires", ".spec.expires", description="Expiry time", priority=1),
    ),
)
