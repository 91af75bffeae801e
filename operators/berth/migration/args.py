"""The migration controller's arguments, with Koordinator's names and defaults.

Koordinator's descheduler reads these from ``MigrationControllerArgs``; Berth applies the
same defaults. A field Berth does not honour is not a field here, and unknown fields are
refused by name (``extra="forbid"``) rather than accepted and ignored.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import ConfigDict, Field

from berth.api.base import ApiModel
from berth.api.duration import Duration, parse_duration
from berth.api.meta import LabelSelector
from berth.api.podmigrationjob import PodMigrationJobMode

__all__ = [
    "IntOrPercent",
    "MigrationControllerArgs",
    "MigrationObjectLimiter",
    "Namespaces",
    "PriorityThreshold",
]

IntOrPercent = int | str
"""An absolute count (``5``) or a share of a workload's replicas (``"10%"``)."""

SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
"""Pods at or above this priority (system-cluster-critical and up) are system-critical."""


class _Args(ApiModel):
    model_config = ConfigDict(extra="forbid")


class Namespaces(_Args):
    """Namespaces a migration may (include) or may not (exclude) touch."""

    include: list[str] | None = None
    exclude: list[str] | None = None

    def allows(self, namespace: str) -> bool:
        if self.include is not None and namespace not in self.include:
            return False
        return namespace not in (self.exclude or [])


class PriorityThreshold(_Args):
    """Only pods below this priority (a value, or a PriorityClass's value) may move."""

    value: int | None = None
    name: str | None = None


class MigrationObjectLimiter(_Args):
    """At most ``maxMigrating`` migrations of one workload within ``duration``."""

    duration: Duration = "5m"
    max_migrating: IntOrPercent | None = None
    """Unset (or 0): the workload's maxMigrating."""

    def window(self) -> timedelta:
        return parse_duration(self.duration)


class MigrationControllerArgs(_Args):
    """What the migration operator may do, and how fast."""

    evict_failed_bare_pods: bool = False
    """Allow pods without a controller when they have failed (phase Failed)."""
    evict_local_storage_pods: bool = False
    """Allow pods with emptyDir or hostPath volumes."""
    evict_system_critical_pods: bool = False
    """Allow pods at system-critical priority."""
    ignore_pvc_pods: bool = False
    """Refuse pods that mount a PersistentVolumeClaim."""
    priority_threshold: PriorityThreshold | None = None
    """Only pods below this priority may move."""
    label_selector: LabelSelector | None = None
    """Only pods matching this selector may move."""
    namespaces: Namespaces | None = None
    """Only pods in these namespaces may move."""
    max_migrating_per_node: int | None = Field(default=2, ge=0)
    """Migrations at once whose pod is on one node."""
    max_migrating_per_namespace: int | None = Field(default=None, ge=0)
    """Migrations at once in one namespace (unset: no limit)."""
    max_migrating_globally: int | None = Field(default=None, ge=0)
    """Migrations at once in the cluster (unset: no limit)."""
    max_migrating_per_workload: IntOrPercent | None = None
    """Migrations at once of one workload (unset: as maxUnavailablePerWorkload)."""
    max_unavailable_per_workload: IntOrPercent | None = None
    """Pods of one workload unavailable at once, migrating ones included (unset: 10% over
    10 replicas, 2 for 4 to 10, 1 below)."""
    skip_check_expected_replicas: bool = False
    """Allow a workload whose replicas equal its maxMigrating or maxUnavailable."""
    object_limiters: dict[str, MigrationObjectLimiter] = Field(
        default_factory=lambda: {"workload": MigrationObjectLimiter()}
    )
    """Rate limits per object kind; only ``workload`` is known."""
    default_job_mode: PodMigrationJobMode = PodMigrationJobMode.RESERVATION_FIRST
    """Mode of jobs the balancer creates."""
    default_job_ttl: Duration = Field(default="5m", alias="defaultJobTTL")
    """Time limit of jobs the balancer creates."""
    evict_qps: float = Field(default=10.0, gt=0, alias="evictQPS")
    """Evictions per second."""
    evict_burst: int = Field(default=1, ge=1)
    """Evictions at once before the rate applies."""
