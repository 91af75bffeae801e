"""Node memory usage from ``/proc/meminfo``, per the NodeMetric's memory collect policy.

- ``usageWithPageCache``: MemTotal - MemFree (everything in use, page cache included).
- ``usageWithoutPageCache``: MemTotal - MemAvailable (what the kernel could not hand out
  without swapping: reclaimable page cache and slab do not count).
- ``usageWithHotPageCache``: the above plus the active file cache, at most the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from berth.api.nodemetric import NodeMemoryCollectPolicy

__all__ = ["node_memory", "parse_meminfo", "read_node_memory"]


def parse_meminfo(text: str) -> dict[str, int]:
    """Field name to bytes (the file says ``kB`` and means KiB)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def node_memory(meminfo: Mapping[str, int], policy: NodeMemoryCollectPolicy) -> int:
    total = meminfo["MemTotal"]
    with_cache = total - meminfo["MemFree"]
    without_cache = total - meminfo["MemAvailable"]
    match policy:
        case NodeMemoryCollectPolicy.USAGE_WITH_PAGE_CACHE:
            return with_cache
        case NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE:
            return without_cache
        case NodeMemoryCollectPolicy.USAGE_WITH_HOT_PAGE_CACHE:
            return min(without_cache + meminfo.get("Active(file)", 0), with_cache)


def read_node_memory(proc_root: Path, policy: NodeMemoryCollectPolicy) -> int:
    return node_memory(parse_meminfo((proc_root / "meminfo").read_text()), policy)
