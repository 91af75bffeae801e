"""Go durations (``24h``, ``1h30m``, ``0s``), as ``metav1.Duration`` writes them on the wire.

Reservation ``ttl`` and NodeMetric aggregation windows are durations; users copy them from
Koordinator manifests, so the grammar is Go's ``time.ParseDuration`` (without a sign:
a negative window or time-to-live means nothing here).
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Final

from pydantic import AfterValidator, WithJsonSchema

__all__ = ["DURATION_PATTERN", "Duration", "DurationError", "format_duration", "parse_duration"]

_UNIT = "(ns|us|µs|μs|ms|s|m|h)"  # µ is U+00B5, μ is U+03BC; Go accepts both
DURATION_PATTERN: Final = rf"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+){_UNIT})+)$"
"""A non-negative Go duration: ``0`` or number-and-unit pairs (``1.5h``, ``2m30s``)."""

_PART_RE: Final = re.compile(rf"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<unit>{_UNIT[1:-1]})")
_WHOLE_RE: Final = re.compile(DURATION_PATTERN)
_NANOS_PER_UNIT: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


class DurationError(ValueError):
    """Text that Go's ``time.ParseDuration`` would reject (or a negative duration)."""


def parse_duration(text: str) -> timedelta:
    """The length of a Go duration (``"1h30m"`` -> 90 minutes), to the microsecond."""
    if not isinstance(text, str) or _WHOLE_RE.fullmatch(text) is None:
        raise DurationError(f"duration {text!r} is malformed (examples: 24h, 1h30m, 90s, 0s)")
    nanos = sum(
        (
            Decimal(part["number"]) * _NANOS_PER_UNIT[part["unit"]]
            for part in _PART_RE.finditer(text)
        ),
        start=Decimal(0),
    )
    # Go truncates each part to whole nanoseconds; timedelta holds microseconds.
    return timedelta(microseconds=int(nanos) // 1000)


def format_duration(value: timedelta) -> str:
    """Go's text for a whole-second duration (``timedelta(hours=24)`` -> ``"24h0m0s"``)."""
    total = int(value.total_seconds())
    if total < 0:
        raise DurationError("durations in these APIs are never negative")
    if total == 0:
        return "0s"
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


def _validate(text: Any) -> str:
    parse_duration(text)
    return str(text)


Duration = Annotated[
    str,
    AfterValidator(_validate),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""A Go duration kept as written (``"24h"``); :func:`parse_duration` gives its length."""
