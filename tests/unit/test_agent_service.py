"""The agent's sampling and reporting arithmetic with an injected clock: a /proc on disk
whose counters the test advances, a policy delivered as the watch would deliver it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from berth.agent.report import build_status
from berth.agent.service import Agent, AgentOptions
from berth.api.nodemetric import ResourceMap

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
MEMINFO = "MemTotal: 8000 kB\nMemFree: 2000 kB\nMemAvailable: 5000 kB\nActive(file): 500 kB\n"


class Proc:
    """A /proc with 4 CPUs whose tick counters advance 100 ticks per simulated second."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.busy = self.idle = 0
        root.mkdir()
        (root / "meminfo").write_text(MEMINFO)
        self.write()

    def advance(self, cores: float) -> None:
        busy = round(100 * cores / 4)
        self.busy += busy
        self.idle += 100 - busy
        self.write()

    def write(self) -> None:
        cpus = "".join(f"cpu{i} 0 0 0 0 0 0 0 0 0 0\n" for i in range(4))
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 {self.idle} 0 0 0 0 0 0\n{cpus}")


def cpu_of(usage: ResourceMap | None) -> str:
    assert usage is not None
    assert usage.resources is not None
    return str(usage.resources["cpu"])


def test_usage_is_averaged_over_the_period_and_windows_grow_with_the_history(
    tmp_path: Path,
) -> None:
    clock = [0.0]
    proc = Proc(tmp_path / "proc")
    options = AgentOptions("n1", proc_root=proc.root, cgroup_root=tmp_path / "no-cgroups")
    agent = Agent(options, clock=lambda: clock[0])
    spec = {
        "metricCollectPolicy": {
            "reportIntervalSeconds": 2,
            "aggregateDurationSeconds": 10,
            "nodeAggregatePolicy": {"durations": ["4s", "40s"]},
        }
    }
    agent._metric_event("ADDED", {"metadata": {"name": "n1"}, "spec": spec})
    assert agent.window.history == 40  # the longest window, not the 10 s period

    def run_until(end: int, cores: float) -> None:
        while clock[0] < end:
            clock[0] += 1
            proc.advance(cores)
            agent.sample()

    agent.sample()  # the baseline at t = 0
    run_until(15, cores=1.0)
    status = build_status(NOW, agent.window, agent.policy, {})
    assert status is not None
    assert status.node_metric is not None
    # 15 s kept: 4s is covered, 40s not half covered yet.
    assert [a.duration for a in status.node_metric.aggregated_node_usages or []] == ["4s"]

    run_until(20, cores=1.0)
    run_until(30, cores=3.0)
    status = build_status(NOW, agent.window, agent.policy, {})
    assert status is not None
    assert status.node_metric is not None
    # nodeUsage: the last 10 s (t = 21..30), all at 3 cores; the report interval is 2 s.
    assert cpu_of(status.node_metric.node_usage) == "3"
    windows = {a.duration: a.usage or {} for a in status.node_metric.aggregated_node_usages or []}
    assert list(windows) == ["4s", "40s"]
    assert cpu_of(windows["4s"]["avg"]) == "3"
    # 40s: half covered by the 30 s kept, over all of them: (20 x 1 + 10 x 3) / 30 cores.
    assert cpu_of(windows["40s"]["avg"]) == "1667m"
    assert cpu_of(windows["40s"]["p50"]) == "1"

    # A shorter period and windows from a new spec: the history shrinks with them.
    spec["metricCollectPolicy"] |= {
        "aggregateDurationSeconds": 5,
        "nodeAggregatePolicy": {"durations": ["2s"]},
    }
    agent._metric_event("MODIFIED", {"metadata": {"name": "n1"}, "spec": spec})
    assert agent.window.history == 5
    assert len(agent.window) == 5
