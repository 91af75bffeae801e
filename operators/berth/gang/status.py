"""A PodGroup's status from its member pods: phase and counts as scheduler-plugins'
controller writes them, and a ``Scheduled`` condition saying why the gang waits.

Phases, later rules winning: fewer pods than minMember is Pending; then Scheduling;
Running once minMember run or have succeeded; Failed when a pod failed and the failed,
running and succeeded make up minMember; Finished once minMember have succeeded.
Finished and Failed are final. Unlike upstream, ``scheduleStartTime`` is set (when the
gang first has its quorum) and ``occupiedBy`` names the owners of every member.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from berth.api.base import format_time
from berth.api.meta import Condition, ConditionStatus
from berth.api.podgroup import PodGroup, PodGroupPhase
from berth.gang.group import WaitReason

SCHEDULED = "Scheduled"
FINAL = (PodGroupPhase.FINISHED, PodGroupPhase.FAILED)


@dataclass(frozen=True)
class MemberSeen:
    """What the status needs of a member pod."""

    name: str
    phase: str
    bound: bool
    owners: tuple[str, ...] = ()
    waiting: str = ""
    """Why the scheduler has not placed it (its PodScheduled=False message)."""


def member_seen(body: Mapping[str, Any]) -> MemberSeen:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    namespace = meta.get("namespace") or ""
    owners = tuple(f"{namespace}/{o.get('name')}" for o in meta.get("ownerReferences") or ())
    waiting = next(
        (
            c.get("message") or ""
            for c in status.get("conditions") or ()
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        "",
    )
    bound = bool((body.get("spec") or {}).get("nodeName"))
    return MemberSeen(meta.get("name") or "", status.get("phase") or "", bound, owners, waiting)


def phase(current: PodGroupPhase | None, quorum: int, members: list[MemberSeen]) -> PodGroupPhase:
    if current in FINAL:
        return current
    running = sum(1 for m in members if m.phase == "Running")
    succeeded = sum(1 for m in members if m.phase == "Succeeded")
    failed = sum(1 for m in members if m.phase == "Failed")
    found = PodGroupPhase.PENDING if len(members) < quorum else PodGroupPhase.SCHEDULING
    if running + succeeded >= quorum:
        found = PodGroupPhase.RUNNING
    if failed and failed + running + succeeded >= quorum:
        found = PodGroupPhase.FAILED
    if succeeded >= quorum:
        found = PodGroupPhase.FINISHED
    return found


def scheduled(group: PodGroup, members: list[MemberSeen]) -> tuple[ConditionStatus, str, str]:
    """The ``Scheduled`` condition's status, reason and message."""
    quorum = group.quorum
    alive = [m for m in members if m.phase not in ("Succeeded", "Failed")]
    bound = sum(1 for m in members if m.bound)
    if bound >= quorum:
        return ConditionStatus.TRUE, SCHEDULED, f"{bound} members placed (minMember {quorum})"
    if len(alive) < quorum:
        return (
            ConditionStatus.FALSE,
            WaitReason.WAITING_FOR_MEMBERS,
            f"waiting for members: {len(alive)} of {quorum} (minMember) exist",
        )
    why = next((m.waiting for m in members if m.waiting and not m.bound), "")
    if why:
        return ConditionStatus.FALSE, "Unschedulable", why
    return ConditionStatus.FALSE, "Scheduling", f"{bound} of {quorum} members placed"


def desired(
    group: Mapping[str, Any], members: Iterable[MemberSeen], now: datetime
) -> dict[str, Any]:
    """The status patch that brings the group's status to what its members say; empty
    when it already does."""
    model = PodGroup.from_dict(group)
    seen = sorted(members, key=lambda m: m.name)
    current = model.status.phase if model.status is not None else None
    new_phase = phase(current, model.quorum, seen)
    owners = sorted({o for m in seen for o in m.owners})
    status, reason, message = scheduled(model, seen)
    old = group.get("status") or {}
    previous = next((c for c in old.get("conditions") or () if c.get("type") == SCHEDULED), None)
    since = format_time(now)
    if previous is not None and previous.get("status") == status:
        since = previous.get("lastTransitionTime") or since
    condition = Condition(
        type=SCHEDULED, status=status, reason=reason, message=message
    ).to_dict() | {"lastTransitionTime": since}
    wanted: dict[str, Any] = {
        "phase": str(new_phase),
        "running": sum(1 for m in seen if m.phase == "Running"),
        "succeeded": sum(1 for m in seen if m.phase == "Succeeded"),
        "failed": sum(1 for m in seen if m.phase == "Failed"),
        "conditions": [condition],
    }
    if owners:
        wanted["occupiedBy"] = ",".join(owners)
    if new_phase is not PodGroupPhase.PENDING and not old.get("scheduleStartTime"):
        wanted["scheduleStartTime"] = format_time(now)
    return {k: v for k, v in wanted.items() if old.get(k) != v}
