"""Setting one condition in a reservation's list, in the ``metav1.Condition`` way.

``lastTransitionTime`` moves only when the status flips (``False`` to ``True`` or back),
so it says how long the condition has held. ``lastProbeTime`` is when the operator last
set the condition; a terminal reservation's Ready condition carries the moment it ended,
which garbage collection measures from.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from berth.api.meta import ConditionStatus
from berth.api.reservation import ReservationCondition

__all__ = ["find", "with_condition"]


def find(
    conditions: Sequence[ReservationCondition] | None, kind: str
) -> ReservationCondition | None:
    return next((c for c in conditions or () if c.type == kind), None)


def with_condition(
    conditions: Sequence[ReservationCondition] | None,
    kind: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
) -> list[dict[str, Any]]:
    """The whole list (wire form) with condition ``kind`` set; the others as they were.

    The whole list because a merge patch replaces lists: the scheduler's ``Scheduled``
    condition must be written back unchanged.
    """
    previous = find(conditions, kind)
    transition = now
    if previous is not None and previous.status == status and previous.last_transition_time:
        transition = previous.last_transition_time
    updated = ReservationCondition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=transition,
        last_probe_time=now,
    )
    if previous is None:
        return [*(c.to_dict() for c in conditions or ()), updated.to_dict()]
    return [updated.to_dict() if c.type == kind else c.to_dict() for c in conditions or ()]
