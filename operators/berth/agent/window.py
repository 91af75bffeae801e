"""The samples of the last ``aggregateDurationSeconds``, and statistics over parts of them.

Each sample says when it was taken and since when its CPU figure runs (the previous
sample). A window of ``d`` seconds is the samples taken in the last ``d`` seconds; it is
reported only once the kept samples cover all of it, so a window longer than the history
kept is never reported. Percentiles interpolate linearly between the two nearest ranks, as
Prometheus's ``quantile_over_time`` (and so Koordinator's metric cache) does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from berth.api.nodemetric import AggregationType

__all__ = ["Sample", "Usage", "Window", "statistics"]

_PERCENTILES = {
    AggregationType.P50: 50,
    AggregationType.P90: 90,
    AggregationType.P95: 95,
    AggregationType.P99: 99,
}


@dataclass(frozen=True)
class Usage:
    """CPU in cores, memory in bytes."""

    cpu: float
    memory: float


@dataclass(frozen=True)
class Sample:
    """Usage of the node and of each pod (by uid) over ``[since, time]`` (monotonic s)."""

    time: float
    since: float
    node: Usage
    pods: Mapping[str, Usage] = field(default_factory=dict)


def _mean(usages: Sequence[Usage]) -> Usage:
    return Usage(
        cpu=sum(u.cpu for u in usages) / len(usages),
        memory=sum(u.memory for u in usages) / len(usages),
    )


def statistics(usages: Sequence[Usage]) -> dict[AggregationType, Usage]:
    """avg, p50, p90, p95 and p99 of cpu and memory, each on its own."""
    values = np.array([[u.cpu, u.memory] for u in usages], dtype=float)
    stats = {AggregationType.AVG: _mean(usages)}
    for kind, q in _PERCENTILES.items():
        cpu, memory = np.percentile(values, q, axis=0)
        stats[kind] = Usage(cpu=float(cpu), memory=float(memory))
    return stats


class Window:
    """Samples no older than ``history`` seconds before the newest one."""

    def __init__(self, history: float) -> None:
        self.history = history
        self._samples: deque[Sample] = deque()

    def __len__(self) -> int:
        return len(self._samples)

    def set_history(self, history: float) -> None:
        self.history = history
        self._prune()

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)
        self._prune()

    def _prune(self) -> None:
        if not self._samples:
            return
        oldest_kept = self._samples[-1].time - self.history
        while self._samples[0].time <= oldest_kept:
            self._samples.popleft()

    def recent(self, seconds: float) -> list[Sample]:
        """The samples taken in the last ``seconds`` (the newest one at least)."""
        if not self._samples:
            return []
        start = self._samples[-1].time - seconds
        return [s for s in self._samples if s.time > start] or [self._samples[-1]]

    def covers(self, seconds: float) -> bool:
        """Whether the kept samples span the whole of the last ``seconds``."""
        return bool(self._samples) and (self._samples[0].since <= self._samples[-1].time - seconds)

    def node_usage(self, seconds: float) -> Usage | None:
        """Mean node usage over the last ``seconds``; None before the first sample."""
        samples = self.recent(seconds)
        return _mean([s.node for s in samples]) if samples else None

    def pod_usages(self, seconds: float) -> dict[str, Usage]:
        """Mean usage over the last ``seconds`` of each pod sampled in that time."""
        by_pod: dict[str, list[Usage]] = {}
        for sample in self.recent(seconds):
            for uid, usage in sample.pods.items():
                by_pod.setdefault(uid, []).append(usage)
        return {uid: _mean(usages) for uid, usages in by_pod.items()}

    def aggregate(self, seconds: float) -> dict[AggregationType, Usage] | None:
        """Node usage statistics over the last ``seconds``, once the samples cover it."""
        if not self.covers(seconds):
            return None
        return statistics([s.node for s in self.recent(seconds)])
