"""Node CPU usage from /proc/stat deltas."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.agent.cpu import CpuTimes, cores_used, parse_cpu_times, read_cpu_times

#                user nice system idle iowait irq softirq steal guest guest_nice
STAT_BEFORE = """cpu  1000 100 500 8000 200 10 40 150 30 0
cpu0 500 50 250 4000 100 5 20 75 15 0
cpu1 500 50 250 4000 100 5 20 75 15 0
intr 12345 0 0
ctxt 999
cpu_not_a_cpu 1
"""
STAT_AFTER = """cpu  1300 100 600 8500 300 20 80 200 90 0
cpu0 650 50 300 4250 150 10 40 100 45 0
cpu1 650 50 300 4250 150 10 40 100 45 0
"""


def test_parse_counts_busy_idle_and_cpus() -> None:
    times = parse_cpu_times(STAT_BEFORE)
    # busy: user + nice + system + irq + softirq (guest is inside user already)
    assert times == CpuTimes(busy=1000 + 100 + 500 + 10 + 40, total=1650 + 8000 + 200 + 150, cpus=2)


def test_usage_is_the_busy_share_of_the_ticks_times_the_cpus() -> None:
    before, after = parse_cpu_times(STAT_BEFORE), parse_cpu_times(STAT_AFTER)
    busy = 300 + 0 + 100 + 10 + 40  # 450
    total = busy + 500 + 100 + 50  # idle, iowait, steal: 1100
    assert cores_used(before, after) == pytest.approx(busy / total * 2)
    assert cores_used(before, after) == pytest.approx(0.8181818, rel=1e-6)


def test_no_ticks_no_usage_and_never_more_than_all_cpus() -> None:
    times = parse_cpu_times(STAT_BEFORE)
    assert cores_used(times, times) == 0.0
    odd = CpuTimes(busy=times.busy + 500, total=times.total + 100, cpus=2)
    assert cores_used(times, odd) == 2.0


def test_old_kernels_without_steal() -> None:
    assert parse_cpu_times("cpu  10 0 10 80 0 0 0\ncpu0 10 0 10 80 0 0 0\n") == CpuTimes(
        busy=20, total=100, cpus=1
    )


def test_read_from_a_proc_root(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(STAT_AFTER)
    assert read_cpu_times(tmp_path).cpus == 2
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        parse_cpu_times("intr 1\n")
