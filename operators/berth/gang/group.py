"""A gang and its members as the decisions see them, and why a gang waits.

Members are counted in the PodGroup's own namespace: a pod of another namespace carrying
the same label is not a member (scheduler-plugins' controller lists by label alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from berth.api.base import format_time
from berth.api.podgroup import POD_GROUP_LABEL, PodGroup
from berth.podresources import Resources, add, resource_list
from berth.quota.usage import format_units


class WaitReason(StrEnum):
    """The reason of the PodGroup's ``Scheduled`` condition and of its members' events."""

    WAITING_FOR_MEMBERS = "WaitingForMembers"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    RESOURCE_GAP = "ResourceGap"
    NO_PLACEMENT = "NoPlacement"
    BACKED_OFF = "BackedOff"
    PODGROUP_NOT_FOUND = "PodGroupNotFound"
    INVALID_GANG = "InvalidGang"


@dataclass(frozen=True)
class Wait:
    """Why a gang was not placed in an attempt: a reason and a sentence a person acts on."""

    reason: WaitReason
    message: str
    until: float | None = None
    """When the wait ends by itself (seconds since the epoch): a backoff. The members are
    tried again then, whatever happens meanwhile; other waits last until an event may
    change the answer."""


@dataclass(frozen=True)
class Gang:
    """A PodGroup's scheduling facts."""

    namespace: str
    name: str
    min_member: int
    min_resources: Resources = field(default_factory=dict)
    kind: str = "PodGroup"
    """What declares the gang: a PodGroup, or Koordinator's annotations (``Gang``)."""
    quorum_field: str = "minMember"
    """How its declaration names the minimum (kube-scheduler's PodGroup: ``minCount``)."""
    group: tuple[str, ...] = ()
    """The other gangs (``namespace/name``) it is placed with, all or none: Koordinator's
    gang group."""
    wait_seconds: float | None = None
    """How long a placement's room is held for members whose binding fails (gang/hold.py):
    the gang's own (``scheduleTimeoutSeconds``, ``waiting-time``), None for the
    plugin's ``permitWaitingTimeSeconds``."""
    strict: bool = True
    """One member's failed binding gives back its siblings' room too (Koordinator's
    ``mode`` Strict; scheduler-plugins and kube-scheduler always)."""
    total: int | None = None
    """How many members the job declares (Koordinator's ``total-number``), said in its
    reasons while it waits for members."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def title(self) -> str:
        """How messages name it: ``PodGroup team/train``."""
        return f"{self.kind} {self.key}"

    @staticmethod
    def of(group: PodGroup) -> Gang:
        meta = group.metadata
        spec = group.spec.to_dict()
        return Gang(
            meta.namespace or "",
            meta.name or "",
            group.quorum,
            resource_list(spec.get("minResources")),
            wait_seconds=spec.get("scheduleTimeoutSeconds"),
        )


def group_name(labels: Mapping[str, str]) -> str | None:
    """The PodGroup a pod's labels name, if any."""
    return labels.get(POD_GROUP_LABEL) or None


def missing_members(gang: Gang, present: int, gated: int = 0) -> Wait | None:
    """Fewer member pods than minMember exist, scheduling-gated ones aside (as upstream,
    a gated member does not count): the gang waits for the others."""
    if present >= gang.min_member:
        return None
    held = f", {gated} more held by scheduling gates" if gated else ""
    declared = f"; the job declares {gang.total} (total-number)" if gang.total else ""
    return Wait(
        WaitReason.WAITING_FOR_MEMBERS,
        f"{gang.title} is waiting for members: {present} of {gang.min_member} "
        f"({gang.quorum_field}) exist{held}{declared}",
    )


def still_needed(gang: Gang, bound: int) -> int:
    """How many pending members must be placed for the gang to reach minMember."""
    return max(gang.min_member - bound, 0)


def demand(
    gang: Gang, pending: Sequence[Mapping[str, int]], bound: Sequence[Mapping[str, int]]
) -> Resources:
    """What the gang asks of its quota as one entry: the requests of the pending members
    it needs to reach minMember (in the order they are placed), raised resource by
    resource to what ``minResources`` still lacks once the bound members' requests are
    counted."""
    total: Resources = {}
    for requests in pending[: still_needed(gang, len(bound))]:
        add(total, requests)
    used: Resources = {}
    for requests in bound:
        add(used, requests)
    for name, least in gang.min_resources.items():
        total[name] = max(total.get(name, 0), least - used.get(name, 0))
    return total


def resource_gap(gang: Gang, free: Mapping[str, int]) -> Wait | None:
    """``minResources`` beyond what the cluster has free (summed over nodes, as
    scheduler-plugins does): the gang cannot start however it is placed."""
    short = {
        name: least - free.get(name, 0)
        for name, least in gang.min_resources.items()
        if least > free.get(name, 0)
    }
    if not short:
        return None
    gap = ", ".join(f"{name} {format_units(name, value)}" for name, value in sorted(short.items()))
    return Wait(
        WaitReason.RESOURCE_GAP,
        f"{gang.title} needs more than the cluster has free (minResources): short of {gap}",
    )


def quota_wait(gang: Gang, rejection: str) -> Wait:
    """The gang's demand does not fit its quota (``rejection`` names it and the shortfall)."""
    return Wait(
        WaitReason.WAITING_FOR_QUOTA,
        f"{gang.title} is waiting for quota for its {gang.min_member} members: {rejection}",
    )


def backed_off(gang: Gang, until: float) -> Wait:
    at = format_time(datetime.fromtimestamp(until, UTC))
    return Wait(
        WaitReason.BACKED_OFF, f"{gang.title} failed recently and is backed off until {at}", until
    )
