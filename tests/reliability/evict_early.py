"""``berth run`` with one rule of pod migration broken on purpose, for the mutation run in
test_migration_reliability.py: a ReservationFirst job evicts its pod while its reservation
is still waiting to be placed, instead of waiting for it to be Available.

The break is a patch of one decision in this process (``python -m
tests.reliability.evict_early run ...`` takes ``berth run``'s arguments); Berth itself has
no switch for it.
"""

from __future__ import annotations

import sys
from typing import Any

from berth.cli import main
from berth.migration import steps

_waiting = steps._waiting_for_reservation


def _evict_at_once(facts: steps.Facts, reservation: Any, out: steps.Json) -> steps.Decision:
    """The eviction step where the job should wait; waiting once the pod is gone."""
    eviction = steps._eviction(facts, out, [])
    return eviction if eviction is not None else _waiting(facts, reservation, out)


if __name__ == "__main__":
    steps._waiting_for_reservation = _evict_at_once
    sys.exit(main())
