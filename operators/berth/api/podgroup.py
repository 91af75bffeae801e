"""PodGroup (``scheduling.x-k8s.io/v1alpha1``, namespaced): a gang of pods scheduled all or
nothing, wire-compatible with scheduler-plugins' Coscheduling.

Pods join a group with the label ``scheduling.x-k8s.io/pod-group: <name>`` in the group's
own namespace. The status is what scheduler-plugins' PodGroup controller writes (phase and
counts), plus a ``conditions`` list of Berth's saying why the gang waits.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import Field

from berth.api.base import ApiModel, Time
from berth.api.meta import Condition, KubeObject
from berth.api.quantity import ResourceList
from berth.api.resource import CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "GROUP",
    "POD_GROUP_LABEL",
    "VERSION",
    "PodGroup",
    "PodGroupPhase",
    "PodGroupSpec",
    "PodGroupStatus",
]

GROUP: Final = "scheduling.x-k8s.io"
VERSION: Final = "v1alpha1"
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""The pod label naming the PodGroup (in the pod's namespace) the pod is a member of."""


class PodGroupPhase(StrEnum):
    """scheduler-plugins' phases, with their meaning."""

    PENDING = "Pending"
    """Fewer pods than minMember exist."""
    SCHEDULING = "Scheduling"
    """minMember pods exist; fewer than minMember run or have succeeded."""
    RUNNING = "Running"
    """At least minMember pods run or have succeeded."""
    UNKNOWN = "Unknown"
    """Part of the group runs, and part cannot be scheduled."""
    FINISHED = "Finished"
    """At least minMember pods have succeeded."""
    FAILED = "Failed"
    """A pod failed and too few are left to make up minMember."""


class PodGroupSpec(ApiModel):
    """The gang: how many pods must be placed together, and what they need."""

    min_member: int | None = Field(default=None, ge=1)
    """How many member pods must be placed together; fewer are never bound (absent: 1)."""
    min_resources: ResourceList | None = None
    """The least the gang needs to run: checked against the free capacity of the cluster and
    against its ElasticQuota as one demand before any member is placed."""
    schedule_timeout_seconds: int | None = Field(default=None, ge=0)
    """How long members may wait at Permit for their siblings (seconds). Berth decides a
    gang at once and parks no member at Permit, so no member ever waits on it."""


class PodGroupStatus(ApiModel):
    """Phase and counts as scheduler-plugins' controller writes them, and why the gang waits."""

    phase: PodGroupPhase | None = None
    """Where the gang is: Pending, Scheduling, Running, Unknown, Finished or Failed."""
    occupied_by: str | None = None
    """The owners (namespace/name) of the group's pods, sorted and comma-separated."""
    running: int | None = None
    """Member pods running."""
    succeeded: int | None = None
    """Member pods succeeded."""
    failed: int | None = None
    """Member pods failed."""
    schedule_start_time: Time | None = None
    """When the gang first had minMember pods."""
    conditions: list[Condition] | None = Field(default=None, max_length=8)
    """``Scheduled``: whether the gang is placed, and if not why it waits."""


class PodGroup(KubeObject):
    """A PodGroup: its member pods are placed together, at least minMember of them, or none."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "PodGroup"
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    """The gang's size and needs."""
    status: PodGroupStatus | None = None
    """Phase and counts, written by Berth."""

    @property
    def quorum(self) -> int:
        """minMember, 1 when absent (each pod is then placed on its own, as upstream)."""
        return self.spec.min_member or 1


CRD: Final = CustomResource(
    model=PodGroup,
    group=GROUP,
    version=VERSION,
    kind="PodGroup",
    plural="podgroups",
    singular="podgroup",
    scope="Namespaced",
    short_names=("pg", "pgs"),
    categories=("berth",),
    printer_columns=(
        PrinterColumn("Phase", ".status.phase", description="Where the gang is"),
        PrinterColumn(
            "MinMember", ".spec.minMember", type="integer", description="Pods placed together"
        ),
        PrinterColumn("Running", ".status.running", type="integer", description="Pods running"),
        PrinterColumn(
            "Succeeded", ".status.succeeded", type="integer", description="Pods succeeded"
        ),
        PrinterColumn("Failed", ".status.failed", type="integer", description="Pods failed"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
        PrinterColumn(
            "Scheduled",
            '.status.conditions[?(@.type=="Scheduled")].reason',
            description="Why the gang waits, or that it is placed",
            priority=1,
        ),
    ),
)
