"""One reading of the node and its pods every sample interval, turned into usage.

CPU figures are rates, so each sample needs the reading before it: the first reading only
sets the baseline, and a pod seen for the first time (or whose counter went backwards,
a new cgroup under the same uid) gets a CPU figure from its second reading on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from berth import log
from berth.agent.cgroups import Hierarchy, find_hierarchy, find_pods
from berth.agent.cpu import CpuTimes, cores_used, read_cpu_times
from berth.agent.memory import read_node_memory
from berth.agent.window import Sample, Usage
from berth.api.nodemetric import NodeMemoryCollectPolicy

__all__ = ["Sampler"]

logger = log.get(__name__)


@dataclass(frozen=True)
class _Reading:
    time: float
    cpu: CpuTimes
    pod_cpu: dict[str, int]  # uid -> cumulative nanoseconds


class Sampler:
    """Reads ``/proc`` and the cgroup tree under the given roots."""

    def __init__(self, proc_root: Path, cgroup_root: Path) -> None:
        self.proc_root = proc_root
        self.hierarchy: Hierarchy | None = find_hierarchy(cgroup_root)
        self._last: _Reading | None = None

    def sample(self, now: float, memory_policy: NodeMemoryCollectPolicy) -> Sample | None:
        """Usage since the previous call; None on the first (the baseline).

        Raises OSError or ValueError when ``/proc`` cannot be read: there is no node usage
        without it. A pod whose cgroup cannot be read is left out of this sample.
        """
        cpu = read_cpu_times(self.proc_root)
        memory = read_node_memory(self.proc_root, memory_policy)
        pod_cpu, pod_memory = self._read_pods(memory_policy)
        last, self._last = self._last, _Reading(now, cpu, pod_cpu)
        if last is None or now <= last.time:
            return None
        elapsed_ns = (now - last.time) * 1e9
        pod_usage = {}
        for uid, used_ns in pod_cpu.items():
            before = last.pod_cpu.get(uid)
            if before is not None and before <= used_ns:
                cores = (used_ns - before) / elapsed_ns
                pod_usage[uid] = Usage(cpu=cores, memory=pod_memory[uid])
        node = Usage(cpu=cores_used(last.cpu, cpu), memory=memory)
        return Sample(time=now, since=last.time, node=node, pods=pod_usage)

    def _read_pods(self, policy: NodeMemoryCollectPolicy) -> tuple[dict[str, int], dict[str, int]]:
        """Cumulative CPU nanoseconds and memory bytes of every pod cgroup found."""
        cpu: dict[str, int] = {}
        memory: dict[str, int] = {}
        hierarchy = self.hierarchy
        if hierarchy is None:
            return cpu, memory
        for uid, path in find_pods(hierarchy).items():
            try:
                used_ns = hierarchy.cpu_nanoseconds(path)
                used_bytes = hierarchy.memory_bytes(path, policy)
            except (OSError, ValueError, KeyError) as err:
                # Gone between the scan and the read, or not a pod cgroup after all.
                logger.debug("pod cgroup unreadable", uid=uid, path=str(path), error=str(err))
                continue
            cpu[uid], memory[uid] = used_ns, used_bytes
        return cpu, memory
