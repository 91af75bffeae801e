"""The table the demo ends with: each story, shown or failed, and how long it took."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    key: str
    title: str
    shown: bool
    seconds: float
    failure: str = ""


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def table(outcomes: Sequence[Outcome], total_seconds: float) -> str:
    width = max([len(o.title) for o in outcomes] + [5])
    lines = [f"{'':2} {'story':<{width}}  result  {'time':>6}"]
    for o in outcomes:
        result = "shown" if o.shown else "FAILED"
        lines.append(f"{o.key:<2} {o.title:<{width}}  {result:<6}  {duration(o.seconds):>6}")
        if o.failure:
            lines.append(f"{'':2}   {o.failure}")
    shown = sum(o.shown for o in outcomes)
    lines.append(
        f"{'':2} {f'{shown} of {len(outcomes)} shown':<{width}}  {'':<6}  "
        f"{duration(total_seconds):>6}"
    )
    return "\n".join(lines) + "\n"
