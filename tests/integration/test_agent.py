"""The node agent (a real `berth agent` process) reporting this machine's real usage from
/proc into a kwok node's NodeMetric, plus one pod's usage from a cgroup tree the test writes
and keeps growing, and following changes to the NodeMetric's spec without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from berth.agent.memory import parse_meminfo
from berth.api.quantity import parse_quantity
from tests.integration.cluster import Nodes, Pods, pod_body
from tests.integration.nodemetrics import GROUP, PLURAL, VERSION, Metrics, made_nodes
from tests.integration.processes import process

MERGE = "application/merge-patch+json"
MIB = 1024 * 1024
POD_CORES = 0.5  # the pod cgroup's counter grows by this much CPU time per second


@pytest.fixture
async def nodes(api: ApiClient) -> AsyncIterator[Nodes]:
    async with made_nodes(api, "agent") as made:
        yield made


def pod_cgroup(root: Path, uid: str) -> Path:
    """A pod in a cgroup v2 tree, systemd layout: 100Mi used, 30Mi of it page cache."""
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    slice_ = root / "kubepods.slice" / "kubepods-burstable.slice"
    directory = slice_ / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    directory.mkdir(parents=True)
    (directory / "cpu.stat").write_text("usage_usec 0\n")
    (directory / "memory.current").write_text(str(100 * MIB))
    (directory / "memory.stat").write_text(f"file {30 * MIB}\ninactive_file {20 * MIB}\n")
    return directory / "cpu.stat"


async def burn(cpu_stat: Path) -> None:
    """Advance the pod's CPU counter at POD_CORES against the monotonic clock."""
    start = time.monotonic()
    while True:
        used_usec = int((time.monotonic() - start) * POD_CORES * 1e6)
        partial = cpu_stat.with_suffix(".tmp")
        partial.write_text(f"usage_usec {used_usec}\n")
        partial.replace(cpu_stat)
        await asyncio.sleep(0.05)


def memory_now(policy: str) -> int:
    info = parse_meminfo(Path("/proc/meminfo").read_text())
    free = info["MemFree"] if policy == "usageWithPageCache" else info["MemAvailable"]
    return info["MemTotal"] - free


class MemorySeen:
    """The range this machine's memory (by both policies) went through while the agent
    sampled it: on a shared machine it moves by more than any fixed tolerance between
    the agent's samples and one reading here, but never outside what was seen."""

    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {"usageWithPageCache": [], "usageWithoutPageCache": []}

    async def sample(self) -> None:
        while True:
            for policy, values in self.seen.items():
                values.append(memory_now(policy))
            await asyncio.sleep(0.05)

    def assert_reported(self, status: dict[str, Any], policy: str) -> None:
        usage = status["nodeMetric"]["nodeUsage"]["resources"]
        cpu, memory = parse_quantity(usage["cpu"]), parse_quantity(usage["memory"])
        assert 0 <= cpu <= (os.cpu_count() or 1), usage
        values = self.seen[policy]
        # Kernel accounting between two reads of /proc/meminfo: a few pages, not more.
        low, high = min(values) - 16 * MIB, max(values) + 16 * MIB
        assert low <= memory <= high, (usage, policy, low, high)


def durations(status: dict[str, Any]) -> list[str]:
    return [a["duration"] for a in status.get("nodeMetric", {}).get("aggregatedNodeUsages", [])]


def pod_usage(status: dict[str, Any]) -> dict[str, str]:
    pods = status.get("podsMetric") or [{}]
    return dict(pods[0].get("podUsage", {}).get("resources", {}))


async def test_agent_reports_real_usage_and_follows_its_spec(
    api: ApiClient,
    crds: None,
    namespace: str,
    kubeconfig_path: str,
    nodes: Nodes,
    tmp_path: Path,
) -> None:
    node = await nodes.add("a")
    pods = Pods(api, namespace)
    await pods.create(pod_body("web", "nobody", cpu="500m", nodeName=node))
    uid = (await pods.get("web")).metadata.uid
    cpu_stat = pod_cgroup(tmp_path / "cgroup", uid)
    # A pod cgroup with no pod of this node in the API: not reported.
    pod_cgroup(tmp_path / "cgroup", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")

    metrics = Metrics(api)
    await metrics.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {
                "metricCollectPolicy": {
                    "reportIntervalSeconds": 1,
                    "aggregateDurationSeconds": 4,
                    "nodeAggregatePolicy": {"durations": ["2s", "1m"]},
                }
            },
        },
    )
    argv = [sys.executable, "-m", "berth.cli", "agent", f"--node-name={node}"]
    argv += [f"--kubeconfig={kubeconfig_path}", f"--cgroup-root={tmp_path / 'cgroup'}"]
    argv += ["--sample-interval=0.25", "--log-level=debug"]
    burner = asyncio.create_task(burn(cpu_stat))
    memory = MemorySeen()
    sampler = asyncio.create_task(memory.sample())
    try:
        with process(argv, tmp_path / "agent.log") as agent:
            # A 2s window once the agent has run half as long; 1m only after 30 s.
            status = await metrics.wait_status(
                node, lambda s: durations(s) == ["2s"] and bool(s.get("podsMetric"))
            )
            memory.assert_reported(status, "usageWithoutPageCache")
            (aggregated,) = status["nodeMetric"]["aggregatedNodeUsages"]
            assert set(aggregated["usage"]) == {"avg", "p50", "p90", "p95", "p99"}
            assert [(p["namespace"], p["name"]) for p in status["podsMetric"]] == [
                (namespace, "web")
            ]
            usage = pod_usage(status)
            assert usage["memory"] == "70Mi"  # without the page cache
            assert abs(parse_quantity(usage["cpu"]) - parse_quantity(str(POD_CORES))) <= 0.1

            # The spec changes; the agent follows without a restart.
            await metrics.custom.patch_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                node,
                {
                    "spec": {
                        "metricCollectPolicy": {
                            "nodeMemoryCollectPolicy": "usageWithPageCache",
                            "nodeAggregatePolicy": {"durations": ["1s", "3s"]},
                        }
                    }
                },
                _content_type=MERGE,
            )
            status = await metrics.wait_status(
                node,
                lambda s: pod_usage(s).get("memory") == "100Mi" and durations(s) == ["1s", "3s"],
            )
            memory.assert_reported(status, "usageWithPageCache")
            first = status["updateTime"]
            await metrics.wait_status(node, lambda s: s["updateTime"] != first, within=10)

            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=15) == 0
    finally:
        for task in (burner, sampler):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            await metrics.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    assert "agent stopped" in (tmp_path / "agent.log").read_text()


async def test_agent_averages_over_the_aggregation_period_and_reports_every_window(
    api: ApiClient,
    crds: None,
    namespace: str,
    kubeconfig_path: str,
    nodes: Nodes,
    tmp_path: Path,
) -> None:
    """aggregateDurationSeconds is the period usage is averaged over (here longer than the
    test), not the history kept: every window of nodeAggregatePolicy appears, each once the
    agent has run half of it, with the durations asked for."""
    node = await nodes.add("w")
    pods = Pods(api, namespace)
    await pods.create(pod_body("batch", "nobody", cpu="500m", nodeName=node))
    uid = (await pods.get("batch")).metadata.uid
    cpu_stat = pod_cgroup(tmp_path / "cgroup", uid)
    windows = ["2s", "6s", "20s"]
    metrics = Metrics(api)
    await metrics.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {
                "metricCollectPolicy": {
                    "reportIntervalSeconds": 1,
                    "aggregateDurationSeconds": 600,
                    "nodeAggregatePolicy": {"durations": windows},
                }
            },
        },
    )
    argv = [sys.executable, "-m", "berth.cli", "agent", f"--node-name={node}"]
    argv += [f"--kubeconfig={kubeconfig_path}", f"--cgroup-root={tmp_path / 'cgroup'}"]
    argv += ["--sample-interval=0.25"]
    burner = asyncio.create_task(burn(cpu_stat))
    try:
        with process(argv, tmp_path / "agent.log") as agent:
            # The windows appear in order as the history grows, never all at once.
            seen: list[list[str]] = []

            def grows(status: dict[str, Any]) -> bool:
                reported = durations(status)
                if reported and (not seen or seen[-1] != reported):
                    seen.append(reported)
                return reported == windows

            status = await metrics.wait_status(node, grows, within=120)
            assert all(s == windows[: len(s)] for s in seen), seen
            assert ["2s", "6s"] in seen, seen  # 20s was held back until 10 s were kept
            node_metric = status["nodeMetric"]
            for aggregated in node_metric["aggregatedNodeUsages"]:
                assert set(aggregated["usage"]) == {"avg", "p50", "p90", "p95", "p99"}
            assert [a["duration"] for a in node_metric["aggregatedSystemUsages"]] == windows
            (pod,) = status["podsMetric"]
            # Burstable, no Koordinator labels: Koordinator's defaults.
            assert (pod["name"], pod["qos"], pod["priority"]) == ("batch", "LS", "koord-prod")
            assert pod_usage(status)["memory"] == "70Mi"

            # The pod's memory doubles: averaged over 600 s, the reported usage rises
            # report after report but stays below the new level (a mean over the 1 s report
            # interval would reach it at once).
            (cpu_stat.parent / "memory.current").write_text(str(200 * MIB))
            status = await metrics.wait_status(
                node, lambda s: parse_quantity(pod_usage(s)["memory"]) > 70 * MIB
            )
            levels = [parse_quantity(pod_usage(status)["memory"])]
            for _ in range(3):
                first = status["updateTime"]
                status = await metrics.wait_status(
                    node, lambda s, first=first: s["updateTime"] != first
                )
                levels.append(parse_quantity(pod_usage(status)["memory"]))
            assert levels == sorted(levels), levels
            assert levels[-1] > levels[0], levels
            assert levels[-1] < 170 * MIB, levels

            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=15) == 0
    finally:
        burner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await burner
        with contextlib.suppress(Exception):
            await metrics.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)
