"""PodMigrationJob (``scheduling.koordinator.sh/v1alpha1``, cluster-scoped): move one pod to
another node safely, wire-compatible with Koordinator.

In ``ReservationFirst`` mode (the default) capacity is reserved elsewhere first, and the pod
is evicted only once that reservation is Available; its controller's replacement then goes
into the reservation. ``EvictDirectly`` only evicts. The phases, condition types and reasons
are Koordinator's, so its tooling reads Berth's jobs unchanged.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from pydantic import ConfigDict, Field

from berth.api.base import SERVER_DEFAULT, ApiModel, OpenModel, Time
from berth.api.duration import Duration, parse_duration
from berth.api.meta import KubeObject, ObjectReference
from berth.api.reservation import GROUP, VERSION
from berth.api.resource import CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "DEFAULT_TTL",
    "TERMINAL_PHASES",
    "DeleteOptions",
    "PodMigrateReservationOptions",
    "PodMigrationJob",
    "PodMigrationJobCondition",
    "PodMigrationJobConditionType",
    "PodMigrationJobMode",
    "PodMigrationJobPhase",
    "PodMigrationJobReason",
    "PodMigrationJobSpec",
    "PodMigrationJobStatus",
    "ReservationTemplateSpec",
]

DEFAULT_TTL: Final = timedelta(minutes=5)
"""How long a job that sets no ``ttl`` may run before it fails with ``Timeout``."""


class PodMigrationJobMode(StrEnum):
    """How the pod is moved."""

    RESERVATION_FIRST = "ReservationFirst"
    """Reserve capacity on another node, then evict the pod; its replacement uses the
    reservation."""
    EVICT_DIRECTLY = "EvictDirectly"
    """Evict the pod and leave its replacement to the scheduler."""


class PodMigrationJobPhase(StrEnum):
    """Where a job is in its life."""

    PENDING = "Pending"
    """Not started yet: waiting for arbitration (the migration limits)."""
    RUNNING = "Running"
    """Reserving, evicting, or waiting for the replacement pod."""
    SUCCEEDED = "Succeeded"
    """The pod was moved (or, with EvictDirectly, evicted)."""
    FAILED = "Failed"
    """Stopped by a timeout, a missing pod or reservation, a refused eviction..."""
    ABORTED = "Aborted"
    """Stopped by the user."""


TERMINAL_PHASES: Final = frozenset(
    {PodMigrationJobPhase.SUCCEEDED, PodMigrationJobPhase.FAILED, PodMigrationJobPhase.ABORTED}
)
"""Phases a job never leaves."""


class PodMigrationJobConditionType(StrEnum):
    """The steps of a migration, as conditions."""

    RESERVATION_CREATED = "ReservationCreated"
    RESERVATION_SCHEDULED = "ReservationScheduled"
    PREEMPTION = "Preemption"
    EVICTION = "Eviction"
    POD_SCHEDULED = "PodScheduled"
    POD_BOUND_RESERVATION = "PodBoundReservation"
    RESERVATION_BOUND = "ReservationBound"


class PodMigrationJobReason(StrEnum):
    """Reasons of a job's status and conditions (Koordinator's words)."""

    TIMEOUT = "Timeout"
    FAILED_CREATE_RESERVATION = "FailedCreateReservation"
    INVALID_RESERVATION = "InvalidReservation"
    UNSCHEDULABLE = "Unschedulable"
    MISSING_POD = "MissingPod"
    MISSING_RESERVATION = "MissingReservation"
    PREEMPTING = "Preempting"
    PREEMPT_COMPLETE = "PreemptComplete"
    EVICTING = "Evicting"
    FAILED_EVICT = "FailedEvict"
    EVICT_COMPLETE = "EvictComplete"
    WAIT_FOR_POD_BIND_RESERVATION = "WaitForPodBindReservation"
    RESERVATION_EXPIRED = "ReservationExpired"
    FORBIDDEN_MIGRATE_POD = "ForbiddenMigratePod"


class ReservationTemplateSpec(OpenModel):
    """The Reservation to create for the pod (metadata and spec), kept as written.

    Parts left out are filled from the pod: the pod template (its spec without
    ``nodeName``), the owners (the pod's controller) and the ttl (the job's).
    """

    metadata: dict[str, Any] | None = None
    """Labels and annotations of the Reservation."""
    spec: dict[str, Any] | None = None
    """A Reservation spec (``template``, ``owners``, ``ttl``, ``allocatePolicy``...)."""


class PodMigrateReservationOptions(ApiModel):
    """Which Reservation the pod moves into."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.preemptionOptions)",
                    "message": "preemptionOptions is not supported by Berth: a migration "
                    "never preempts other pods",
                }
            ]
        }
    )

    reservation_ref: ObjectReference | None = None
    """A Reservation to use; when unset, one is created from ``template`` and the pod and
    recorded here."""
    template: ReservationTemplateSpec | None = None
    """The Reservation to create when ``reservationRef`` is unset."""
    preemption_options: dict[str, Any] | None = None
    """Koordinator's preemption option (reserved, with no fields); refused by Berth."""


class DeleteOptions(OpenModel):
    """How the pod is evicted (``metav1.DeleteOptions``), kept as written."""

    grace_period_seconds: int | None = Field(default=None, ge=0)
    """Seconds the pod has to stop; unset uses the pod's own grace period."""


class PodMigrationJobSpec(ApiModel):
    """Which pod to move, how, and for how long to try."""

    paused: bool | None = None
    """While true, the job does nothing."""
    ttl: Duration = Field(default="5m", json_schema_extra=SERVER_DEFAULT)
    """How long the job may run before it fails with ``Timeout`` (``0s``: no limit)."""
    mode: PodMigrationJobMode = Field(
        default=PodMigrationJobMode.RESERVATION_FIRST, json_schema_extra=SERVER_DEFAULT
    )
    """``ReservationFirst`` (reserve, then evict) or ``EvictDirectly``."""
    pod_ref: ObjectReference = Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.name) && has(self.namespace)",
                    "message": "podRef must name the pod (namespace and name)",
                }
            ]
        }
    )
    """The pod to move: namespace and name (a uid, when set, must match too)."""
    reservation_options: PodMigrateReservationOptions | None = None
    """The Reservation to move into (ReservationFirst)."""
    delete_options: DeleteOptions | None = None
    """Options of the eviction."""

    def effective_ttl(self) -> timedelta | None:
        """The time limit, or ``None`` for ``0s`` (no limit)."""
        return parse_duration(self.ttl) or None


class PodMigrationJobCondition(ApiModel):
    """One step of the migration and how it went."""

    type: PodMigrationJobConditionType
    """Which step."""
    status: str = Field(json_schema_extra={"enum": ["True", "False", "Unknown"]})
    """``True``, ``False`` or ``Unknown``."""
    last_probe_time: Time | None = None
    """When the step was last checked."""
    last_transition_time: Time | None = None
    """When the status last changed."""
    reason: str | None = None
    """A CamelCase word saying why."""
    message: str | None = None
    """A human-readable explanation."""


class PodMigrationJobStatus(ApiModel):
    """What the migration operator did so far."""

    phase: PodMigrationJobPhase | None = None
    """``Pending``, ``Running``, ``Succeeded``, ``Failed`` or ``Aborted``."""
    status: str | None = None
    """The current step (e.g. ``ReservationCreated``), or ``Complete``."""
    reason: str | None = None
    """A CamelCase word saying why the job is where it is (e.g. ``FailedEvict``)."""
    message: str | None = None
    """A human-readable explanation."""
    conditions: list[PodMigrationJobCondition] | None = None
    """The steps: ReservationCreated, ReservationScheduled, Eviction, PodBoundReservation..."""
    node_name: str | None = None
    """The node the pod moves to (the reservation's node)."""
    pod_ref: ObjectReference | None = None
    """The replacement pod, once it is bound."""
    preempted_pods_ref: list[ObjectReference] | None = None
    """Koordinator's preempted pods; Berth does not preempt for migrations."""
    preempted_pods_reservation: list[dict[str, Any]] | None = None
    """Koordinator's reservations made for preempted pods; Berth makes none."""


class PodMigrationJob(KubeObject):
    """A PodMigrationJob: one pod, moved to another node."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.spec) || self.spec.podRef == oldSelf.spec.podRef",
                    "message": "spec.podRef is immutable: create another job to move another pod",
                }
            ]
        }
    )

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "PodMigrationJob"
    spec: PodMigrationJobSpec
    """Which pod to move, how, and for how long."""
    status: PodMigrationJobStatus | None = None
    """Progress, written by Berth."""

    @property
    def phase(self) -> PodMigrationJobPhase | None:
        """The phase, or ``None`` before anyone has set it."""
        return self.status.phase if self.status else None

    def deadline(self) -> datetime | None:
        """When the job times out, or ``None`` for no limit (or before it is created)."""
        ttl = self.spec.effective_ttl()
        created = self.metadata.creation_timestamp
        return None if ttl is None or created is None else created + ttl

    def condition(self, kind: PodMigrationJobConditionType) -> PodMigrationJobCondition | None:
        """The condition of that type, if reported."""
        conditions = self.status.conditions if self.status else None
        return next((c for c in conditions or () if c.type == kind), None)


CRD: Final = CustomResource(
    model=PodMigrationJob,
    group=GROUP,
    version=VERSION,
    kind="PodMigrationJob",
    plural="podmigrationjobs",
    singular="podmigrationjob",
    scope="Cluster",
    short_names=("pmj",),
    categories=("berth",),
    printer_columns=(
        PrinterColumn("Phase", ".status.phase", description="The phase of the job"),
        PrinterColumn("Status", ".status.status", description="The current step of the job"),
        PrinterColumn("Reason", ".status.reason", description="Why the job is where it is"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
        PrinterColumn("Node", ".status.nodeName", description="The node the pod moves to"),
        PrinterColumn(
            "Reservation",
            ".spec.reservationOptions.reservationRef.name",
            description="The reservation the pod moves into",
        ),
        PrinterColumn("PodNamespace", ".spec.podRef.namespace", description="The pod's namespace"),
        PrinterColumn("Pod", ".spec.podRef.name", description="The pod to move"),
        PrinterColumn("NewPod", ".status.podRef.name", description="The replacement pod"),
        PrinterColumn("TTL", ".spec.ttl", description="Time limit", priority=1),
        PrinterColumn("Message", ".status.message", description="Details", priority=1),
    ),
)
