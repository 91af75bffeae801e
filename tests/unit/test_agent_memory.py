"""Node memory usage from /proc/meminfo per collect policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.agent.memory import node_memory, parse_meminfo, read_node_memory
from berth.api.nodemetric import NodeMemoryCollectPolicy as Policy

MEMINFO = """MemTotal:       16000000 kB
MemFree:         4000000 kB
MemAvailable:   10000000 kB
Buffers:          200000 kB
Cached:          5000000 kB
Active(file):    1500000 kB
Inactive(file):  3500000 kB
HugePages_Total:       0
"""
KIB = 1024


def test_parse_in_bytes() -> None:
    info = parse_meminfo(MEMINFO)
    assert info["MemTotal"] == 16_000_000 * KIB
    assert info["Active(file)"] == 1_500_000 * KIB
    assert info["HugePages_Total"] == 0  # no unit: a count


@pytest.mark.parametrize(
    ("policy", "expected_kib"),
    [
        (Policy.USAGE_WITH_PAGE_CACHE, 16_000_000 - 4_000_000),
        (Policy.USAGE_WITHOUT_PAGE_CACHE, 16_000_000 - 10_000_000),
        (Policy.USAGE_WITH_HOT_PAGE_CACHE, 16_000_000 - 10_000_000 + 1_500_000),
    ],
)
def test_policies(tmp_path: Path, policy: Policy, expected_kib: int) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    assert read_node_memory(tmp_path, policy) == expected_kib * KIB


def test_hot_page_cache_never_exceeds_all_usage() -> None:
    info = {"MemTotal": 100, "MemFree": 50, "MemAvailable": 60, "Active(file)": 40}
    assert node_memory(info, Policy.USAGE_WITH_HOT_PAGE_CACHE) == 50
