"""Evictions per second: a token bucket (Koordinator's evictQPS 10, evictBurst 1).

In memory only: after a restart the bucket starts full, which allows at most ``burst``
evictions early; every other limit is counted from the jobs themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TokenBucket"]


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    rate: float
    burst: int
    _tokens: float = field(init=False)
    _at: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._tokens = float(self.burst)

    def take(self, now: float) -> float:
        """Take a token at ``now`` (seconds, monotonic): 0 when taken, else how long to wait."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate
