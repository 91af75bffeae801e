"""The few statistics the benchmarks print: percentiles, the median with its spread, and
quantiles read back from a Prometheus histogram (the way ``histogram_quantile`` reads them),
so that Berth's and kube-scheduler's cycle times are estimated by one rule."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank value at quantile ``q`` (0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Spread:
    """The median of repeated runs with the lowest and highest beside it."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        finite = sorted(v for v in values if not math.isnan(v))
        if not finite:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        middle = len(finite) // 2
        median = finite[middle] if len(finite) % 2 else (finite[middle - 1] + finite[middle]) / 2
        return cls(median, finite[0], finite[-1], len(finite))

    def show(self, digits: int = 1) -> str:
        """``312.4 (298.0-320.1)``: the median, then the range of the runs."""
        if self.runs == 0:
            return "n/a"
        if self.runs == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


_BUCKET = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)_bucket\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LE = re.compile(r'(?:^|,)\s*le="(?P<le>[^"]+)"')


def histogram_buckets(
    text: str, name: str, match: dict[str, str] | None = None
) -> list[tuple[float, float]]:
    """Cumulative ``(upper bound, count)`` pairs of histogram ``name`` in Prometheus text,
    summed over every series whose labels include ``match``."""
    wanted = [f'{key}="{value}"' for key, value in (match or {}).items()]
    totals: dict[float, float] = {}
    for line in text.splitlines():
        found = _BUCKET.match(line)
        if not found or found["name"] != name:
            continue
        labels = found["labels"]
        if not all(w in labels for w in wanted):
            continue
        le = _LE.search(labels)
        if le is None:
            continue
        bound = math.inf if le["le"] == "+Inf" else float(le["le"])
        totals[bound] = totals.get(bound, 0.0) + float(found["value"])
    return sorted(totals.items())


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' estimate: linear within the bucket the rank falls in; a rank in the
    +Inf bucket gives the highest finite bound. NaN when nothing was observed."""
    if not buckets or buckets[-1][1] <= 0:
        return float("nan")
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def histogram_mean(text: str, name: str, match: dict[str, str] | None = None) -> tuple[int, float]:
    """(observations, their mean) of histogram ``name`` in Prometheus text, from its
    ``_sum`` and ``_count`` summed over every series whose labels include ``match``:
    scheduler_perf's ``Average`` of a histogram. (0, NaN) when nothing was observed."""
    wanted = [f'{key}="{value}"' for key, value in (match or {}).items()]
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if not found or not found["name"].startswith(f"{name}_"):
            continue
        part = found["name"].removeprefix(f"{name}_")
        if part in totals and all(w in (found["labels"] or "") for w in wanted):
            totals[part] += float(found["value"])
    count = int(totals["count"])
    return count, totals["sum"] / count if count else float("nan")


def counter_total(text: str, name: str, match: dict[str, str] | None = None) -> float:
    """Counter ``name`` in Prometheus text, summed over every series whose labels include
    ``match`` (0 when it has none)."""
    wanted = [f'{key}="{value}"' for key, value in (match or {}).items()]
    total = 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found and found["name"] == name and all(w in (found["labels"] or "") for w in wanted):
            total += float(found["value"])
    return total
