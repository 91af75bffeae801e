"""Backoff per gang (scheduler-plugins' ``podGroupBackoffSeconds``): a gang that could not
be placed is not tried again for a while, whichever member comes up, so a large gang that
does not fit does not take the scheduler's attempts from the smaller gangs and pods behind
it. Zero seconds switches it off."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GangBackoff:
    seconds: float
    until: dict[str, float] = field(default_factory=dict)

    def failed(self, key: str, now: float) -> None:
        """The gang could not be placed at ``now``."""
        if self.seconds > 0:
            self.until[key] = now + self.seconds

    def backed_off(self, key: str, now: float) -> float | None:
        """When the gang's backoff ends, while it lasts."""
        end = self.until.get(key)
        if end is None:
            return None
        if end <= now:
            del self.until[key]
            return None
        return end

    def placed(self, key: str) -> None:
        self.until.pop(key, None)
