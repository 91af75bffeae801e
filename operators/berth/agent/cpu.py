"""Node CPU usage from the deltas of ``/proc/stat``'s aggregate ``cpu`` line.

The counters are cumulative ticks since boot; usage over an interval is the busy share of
the ticks that passed, times the number of CPUs. Busy is user, nice, system, irq and
softirq (guest time is already inside user and nice); idle, iowait and steal are not busy:
steal is time the hypervisor gave to someone else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuTimes", "cores_used", "parse_cpu_times", "read_cpu_times"]

BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system . . irq softirq
IDLE_FIELDS = (3, 4, 7)  # idle iowait steal


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative ticks of all CPUs, and how many CPUs there are."""

    busy: int
    total: int
    cpus: int


def parse_cpu_times(text: str) -> CpuTimes:
    """The aggregate line and the per-CPU count of a ``/proc/stat``."""
    busy = total = cpus = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "cpu":
            ticks = [int(v) for v in rest.split()]
            ticks += [0] * (8 - len(ticks))  # old kernels lack steal
            busy = sum(ticks[i] for i in BUSY_FIELDS)
            total = busy + sum(ticks[i] for i in IDLE_FIELDS)
            found = True
        elif name.startswith("cpu") and name[3:].isdigit():
            cpus += 1
    if not found:
        raise ValueError("no aggregate cpu line in /proc/stat")
    return CpuTimes(busy=busy, total=total, cpus=max(cpus, 1))


def read_cpu_times(proc_root: Path) -> CpuTimes:
    return parse_cpu_times((proc_root / "stat").read_text())


def cores_used(before: CpuTimes, after: CpuTimes) -> float:
    """CPUs' worth of busy time between two readings (0 when no tick passed)."""
    total = after.total - before.total
    if total <= 0:
        return 0.0
    busy = min(max(after.busy - before.busy, 0), total)
    return busy / total * after.cpus
