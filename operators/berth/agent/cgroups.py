"""Per-pod usage from the pods' cgroups, cgroup v2 or v1, systemd or cgroupfs driver.

kubelet puts each pod in a cgroup named after its uid, under a ``kubepods`` tree:

- cgroupfs driver: ``kubepods/pod<uid>``, ``kubepods/burstable/pod<uid>``,
  ``kubepods/besteffort/pod<uid>``;
- systemd driver: ``kubepods.slice/kubepods-pod<uid_>.slice``,
  ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`` (the
  uid's dashes become underscores), possibly nested under ``kubelet.slice`` (kind).

With cgroup v2 one tree holds every controller; with v1 the cpu accounting and memory
controllers are separate trees with the same layout. Pod memory follows the node's
collect policy: all of it, without the page cache, or without the inactive page cache.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from berth.api.nodemetric import NodeMemoryCollectPolicy

__all__ = ["Hierarchy", "find_hierarchy", "find_pods", "parse_flat_keyed"]

_POD_DIR = re.compile(
    r"(?:^|-)pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$"
)
_MAX_DEPTH = 4  # kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/pod
_V1_CPU_TREES = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


def parse_flat_keyed(text: str) -> dict[str, int]:
    """A cgroup ``key value`` file (``cpu.stat``, ``memory.stat``)."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


@dataclass(frozen=True)
class Hierarchy:
    """Where a host's cgroup controllers are, and how to read a pod's usage from them."""

    v2: bool
    cpu: Path
    memory: Path

    def cpu_nanoseconds(self, pod: Path) -> int:
        """Cumulative CPU time of the pod's cgroup (``pod`` is relative to the trees)."""
        if self.v2:
            return parse_flat_keyed((self.cpu / pod / "cpu.stat").read_text())["usage_usec"] * 1000
        return _read_int(self.cpu / pod / "cpuacct.usage")

    def memory_bytes(self, pod: Path, policy: NodeMemoryCollectPolicy) -> int:
        directory = self.memory / pod
        if self.v2:
            usage = _read_int(directory / "memory.current")
            cache_key, inactive_key = "file", "inactive_file"
        else:
            usage = _read_int(directory / "memory.usage_in_bytes")
            cache_key, inactive_key = "total_cache", "total_inactive_file"
        stat = parse_flat_keyed((directory / "memory.stat").read_text())
        match policy:
            case NodeMemoryCollectPolicy.USAGE_WITH_PAGE_CACHE:
                return usage
            case NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE:
                return max(usage - stat.get(cache_key, 0), 0)
            case NodeMemoryCollectPolicy.USAGE_WITH_HOT_PAGE_CACHE:
                return max(usage - stat.get(inactive_key, 0), 0)


def find_hierarchy(root: Path) -> Hierarchy | None:
    """The controllers under a cgroup mount point; None when it holds neither layout."""
    if (root / "cgroup.controllers").is_file():
        return Hierarchy(v2=True, cpu=root, memory=root)
    cpu = next((root / name for name in _V1_CPU_TREES if (root / name).is_dir()), None)
    if cpu is None or not (root / "memory").is_dir():
        return None
    return Hierarchy(v2=False, cpu=cpu, memory=root / "memory")


def find_pods(hierarchy: Hierarchy) -> dict[str, Path]:
    """Pod uid to its cgroup, relative to the controller trees."""
    base = hierarchy.cpu
    found: dict[str, Path] = {}

    def walk(directory: str, depth: int, in_kubepods: bool) -> None:
        """Down the kubepods tree (and kubelet.slice, which may hold it), nowhere else."""
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            match = _POD_DIR.search(entry.name) if in_kubepods else None
            if match is not None:
                found[match["uid"].replace("_", "-")] = Path(entry.path).relative_to(base)
                continue
            kubepods = in_kubepods or "kubepods" in entry.name
            if depth < _MAX_DEPTH and (kubepods or "kubelet" in entry.name):
                walk(entry.path, depth + 1, kubepods)

    walk(str(base), 1, False)
    return found
