"""Garbage collection of ended reservations: when a Failed or Succeeded one is deleted.

An ended reservation stays for a period (24 hours unless ``BERTH_RESERVATION_GC_PERIOD``
says otherwise, a Go duration such as ``1h`` or ``90s``) so that ``kubectl describe``
can still tell what happened; one whose node no longer exists goes at once. The period
counts from the moment it ended: its Ready condition's ``lastProbeTime`` (written with
the terminal phase), else that condition's ``lastTransitionTime``, else its creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from berth.api.duration import DurationError, parse_duration
from berth.api.reservation import Reservation, ReservationConditionType
from berth.reservation.conditions import find

__all__ = ["DEFAULT_GC_PERIOD", "GC_PERIOD_ENV", "collect_at", "ended_at", "gc_period"]

GC_PERIOD_ENV: Final = "BERTH_RESERVATION_GC_PERIOD"
DEFAULT_GC_PERIOD: Final = timedelta(hours=24)


def gc_period(environ: Mapping[str, str]) -> timedelta:
    """The period from the environment; raises DurationError naming the variable if bad."""
    text = environ.get(GC_PERIOD_ENV, "").strip()
    if not text:
        return DEFAULT_GC_PERIOD
    try:
        return parse_duration(text)
    except DurationError as err:
        raise DurationError(f"{GC_PERIOD_ENV}: {err}") from err


def ended_at(reservation: Reservation) -> datetime | None:
    """When the reservation reached its terminal phase, as best its status tells."""
    status = reservation.status
    ready = find(status.conditions if status else None, ReservationConditionType.READY)
    if ready is not None and (ready.last_probe_time or ready.last_transition_time):
        return ready.last_probe_time or ready.last_transition_time
    return reservation.metadata.creation_timestamp


def collect_at(reservation: Reservation, period: timedelta) -> datetime | None:
    """When an ended reservation is due for deletion (None: no time known, never)."""
    ended = ended_at(reservation)
    return None if ended is None else ended + period
