"""How many pods of a workload may be migrating or unavailable at once.

Koordinator's arithmetic: a percentage is of the desired replicas, rounded up; an unset
maxUnavailable is 10% above 10 replicas, 2 for 4 to 10 and 1 below 4; a result of 0 is 1,
so a small workload can still move one pod at a time.
"""

from __future__ import annotations

import math

from berth.migration.args import IntOrPercent

__all__ = ["max_migrating", "max_unavailable", "scaled"]


def scaled(value: IntOrPercent, replicas: int) -> int:
    """An absolute count, or a percentage of ``replicas`` rounded up."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%"):
        return int(text)
    return math.ceil(int(text[:-1]) * replicas / 100)


def max_unavailable(replicas: int, value: IntOrPercent | None) -> int:
    """Pods of a workload of ``replicas`` that may be unavailable at once."""
    if value is None:
        value = "10%" if replicas > 10 else 2 if replicas >= 4 else 1
    return max(scaled(value, replicas), 1)


def max_migrating(replicas: int, value: IntOrPercent | None) -> int:
    """Pods of a workload that may be migrating at once; unset follows maxUnavailable."""
    if value is None:
        return max_unavailable(replicas, None)
    return max(scaled(value, replicas), 1)
