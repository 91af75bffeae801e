"""The scheduling cycle alone, in process: no API server, no binding, no other process.
The hot path's cost (filters, scores, assume) apart from everything a cluster adds."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import yaml

from berth.bench.stats import percentile

if TYPE_CHECKING:
    from berth.scheduler.podinfo import PodInfo
    from berth.scheduler.schedule_one import Profile as BuiltProfile
    from berth.scheduler.view import ClusterView


def _pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.local/bench",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def place(profile: BuiltProfile, view: ClusterView, pod: PodInfo) -> str:
    """One scheduling cycle and what follows it in process (assume, reserve); the node."""
    from berth.scheduler.framework import CycleState

    state = CycleState()
    node = profile.cycle.schedule(state, pod).node
    view.assume(pod, node)
    profile.framework.run_reserve(state, pod, node)
    return node


def cycle_bench(nodes: int, pods: int) -> str:
    """The scheduling cycle alone, in process: no API, no binding. The hot path's cost,
    with kube-scheduler's default plugins and with the installed profile (quotas and
    load-awareness on, a NodeMetric report for every node, a quota for the pods)."""
    default = _cycle_run(nodes, pods, installed=False)
    installed = _cycle_run(nodes, pods, installed=True)
    return f"cycle only, default profile:   {default}\ncycle only, installed profile: {installed}"


def _cycle_run(nodes: int, pods: int, *, installed: bool) -> str:
    from datetime import UTC, datetime

    from berth.localcluster.nodes import node_manifest
    from berth.localcluster.paths import REPO_DIR
    from berth.scheduler.assembly import assemble
    from berth.scheduler.config import Profile, parse
    from berth.scheduler.podinfo import PodInfo

    profile = Profile()
    if installed:
        configmap = yaml.safe_load((REPO_DIR / "manifests" / "scheduler-config.yaml").read_text())
        profile = parse(yaml.safe_load(configmap["data"]["scheduler-config.yaml"])).profiles[0]
    parts = assemble([profile])
    view, events = parts.view, parts.events
    for i in range(nodes):
        events.on_node("ADDED", node_manifest(i))
    if installed:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        report = events.on_custom("NodeMetric")
        for i in range(nodes):
            name = node_manifest(i)["metadata"]["name"]
            report(
                "ADDED",
                {
                    "metadata": {"name": name, "resourceVersion": "1"},
                    "status": {
                        "updateTime": now,
                        "nodeMetric": {"nodeUsage": {"resources": {"cpu": "2", "memory": "8Gi"}}},
                    },
                },
            )
        events.on_custom("ElasticQuota")(
            "ADDED",
            {
                "metadata": {"name": "bench", "namespace": "bench"},
                "spec": {"min": {"cpu": "100000"}, "max": {"cpu": "100000"}},
            },
        )
    durations = []
    started = time.perf_counter()
    for i in range(pods):
        raw = _pod(f"bench-{i:05d}", "berth-scheduler")
        raw["metadata"].update(namespace="bench", uid=f"uid-{i}")
        pod = PodInfo.from_pod(raw)
        t0 = time.perf_counter()
        place(parts.profile(), view, pod)
        durations.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    return (
        f"{pods} pods onto {nodes} nodes in {wall:.2f}s ({pods / wall:.0f} pods/s; "
        f"cycle p50 {percentile(durations, 0.5) * 1e3:.2f} ms, "
        f"p99 {percentile(durations, 0.99) * 1e3:.2f} ms)"
    )
