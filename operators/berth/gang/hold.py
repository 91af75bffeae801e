"""How long a placed gang's room is held for members whose binding fails, and what a
member's failure does to its siblings.

Upstream parks assumed members at Permit for the gang's wait time (scheduler-plugins:
``scheduleTimeoutSeconds``, else ``permitWaitingTimeSeconds``; Koordinator: ``waiting-time``,
else its default; kube-scheduler 1.36: five minutes), capacity and quota held meanwhile,
and gives the room back when the time is up. Berth decides a gang whole, so no member
waits for its siblings; what waits is a member whose binding the API server refused.
That member keeps its node (still assumed, its quota still charged) and retries for the
same time, so a passing API-server error does not leave the gang short of a member.
When the time is up the member's room is given back; in a Strict gang (scheduler-plugins
and kube-scheduler always, Koordinator's default mode) so is the room of every sibling
still retrying, while a NonStrict gang's siblings keep theirs until their own time is up.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_WAIT_SECONDS = 15 * 60.0
"""kube-scheduler caps any wait at Permit at 15 minutes; so does Berth's hold."""
FIRST_RETRY_SECONDS = 0.5
LONGEST_RETRY_SECONDS = 8.0


def wait_seconds(declared: float | None, default: float) -> float:
    """The gang's own wait when it declares one above zero, else the default; at most
    the cap."""
    chosen = declared if declared is not None and declared > 0 else default
    return min(chosen, MAX_WAIT_SECONDS)


@dataclass
class GangHold:
    """One placement of a gang: until when its members' room is held, and whether one
    member's failure gives back the others' (``strict``)."""

    key: str
    deadline: float
    strict: bool = True
    released: bool = False

    def next_try(self, now: float, tries: int) -> float | None:
        """Seconds to wait before a failed member binds again (doubling from half a
        second, at most eight, the last try at the deadline), or None when the hold is
        over: given back, or its time up."""
        if self.released or now >= self.deadline:
            return None
        return min(FIRST_RETRY_SECONDS * 2.0**tries, LONGEST_RETRY_SECONDS, self.deadline - now)

    def member_failed(self) -> None:
        """A member's binding failed for good: a Strict gang's siblings give back their
        room too."""
        if self.strict:
            self.released = True
