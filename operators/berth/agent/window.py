"""The samples the agent keeps, and means and statistics over the most recent of them.

Each sample says when it was taken and since when its CPU figure runs (the previous
sample), so the time a run of samples covers is known exactly. Every query is about "the
last ``d`` seconds" and is bounded by the history actually kept: right after a start, the
mean over 300 seconds is the mean of what there is. Statistics over a window follow
Koordinator's cold-start rule: they are reported only once the samples cover at least half
of the window. Percentiles interpolate linearly between the two nearest ranks, as
Prometheus's ``quantile_over_time`` (and so Koordinator's metric cache) does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from berth.api.nodemetric import AggregationType

__all__ = ["COLD_START_RATIO", "Part", "Sample", "Usage", "Window", "node_of", "system_of"]

COLD_START_RATIO = 0.5
"""A window's statistics need samples covering at least this share of it (Koordinator's)."""

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


Part = Callable[[Sample], Usage]
"""Which usage of a sample a query is about: the node's or the system's."""


def node_of(sample: Sample) -> Usage:
    return sample.node


def system_of(sample: Sample) -> Usage:
    """The node's usage outside every pod cgroup in the sample (floored at 0)."""
    pods = sample.pods.values()
    return Usage(
        cpu=max(sample.node.cpu - sum(u.cpu for u in pods), 0.0),
        memory=max(sample.node.memory - sum(u.memory for u in pods), 0.0),
    )


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

    def covered(self, seconds: float) -> float:
        """How much of the last ``seconds`` the kept samples cover (0 without samples)."""
        samples = self.recent(seconds)
        if not samples:
            return 0.0
        return min(samples[-1].time - samples[0].since, seconds)

    def mean(self, seconds: float, part: Part = node_of) -> Usage | None:
        """Mean usage over the last ``seconds``, or what is kept of them; None before the
        first sample."""
        samples = self.recent(seconds)
        return _mean([part(s) for s in samples]) if samples else None

    def pod_usages(self, seconds: float) -> dict[str, Usage]:
        """Mean usage over the last ``seconds`` of each pod sampled in that time."""
        by_pod: dict[str, list[Usage]] = {}
        for sample in self.recent(seconds):
            for uid, usage in sample.pods.items():
                by_pod.setdefault(uid, []).append(usage)
        return {uid: _mean(usages) for uid, usages in by_pod.items()}

    def aggregate(
        self, seconds: float, part: Part = node_of
    ) -> dict[AggregationType, Usage] | None:
        """Statistics over the last ``seconds``, once the samples cover half of them."""
        if not self._samples or self.covered(seconds) < COLD_START_RATIO * seconds:
            return None
        return statistics([part(s) for s in self.recent(seconds)])
