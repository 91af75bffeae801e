"""The scheduling cycle alone, in process: no API server, no binding, no other process.
The hot path's cost (filters, scores, assume) apart from everything a cluster adds."""

from __future__ import annotations

import hashlib
import random
import statistics
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

from berth.bench.stats import percentile

if TYPE_CHECKING:
    from berth.scheduler.cache.podinfo import PodInfo
    from berth.scheduler.cache.view import ClusterView
    from berth.scheduler.schedule_one import Profile as BuiltProfile


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
    from berth.scheduler.framework.interface import CycleState

    state = CycleState()
    node = profile.cycle.schedule(state, pod).node
    view.assume(pod, node)
    profile.framework.run_reserve(state, pod, node)
    return node


def cycle_bench(nodes: int, pods: int) -> str:
    """The scheduling cycle alone, in process: no API, no binding. The hot path's cost,
    with kube-scheduler's default plugins and with the installed profile (quotas and
    load-awareness on, a NodeMetric report for every node, a quota for the pods, an
    Available reservation on one node in twenty that no pod may use), and the installed
    profile with none of those objects (its plugins have nothing to decide). Rates are over
    the process's CPU time, as a shared machine's wall clock counts other processes too."""
    default = _cycle_run(nodes, pods, installed=False)
    installed = _cycle_run(nodes, pods, installed=True)
    bare = _cycle_run(nodes, pods, installed=True, objects=False)
    return (
        f"cycle only, default profile:                  {default}\n"
        f"cycle only, installed profile:                {installed}\n"
        f"cycle only, installed profile, no objects:    {bare}"
    )


def _cycle_run(nodes: int, pods: int, *, installed: bool, objects: bool = True) -> str:
    from datetime import UTC, datetime

    from berth.bench.installed import NODES_PER_RESERVATION, reservation, reservation_status
    from berth.localcluster.nodes import node_manifest
    from berth.localcluster.paths import REPO_DIR
    from berth.scheduler.assembly import assemble
    from berth.scheduler.cache.podinfo import PodInfo
    from berth.scheduler.config import Profile, parse

    profile = Profile()
    if installed:
        configmap = yaml.safe_load((REPO_DIR / "manifests" / "scheduler-config.yaml").read_text())
        profile = parse(yaml.safe_load(configmap["data"]["scheduler-config.yaml"])).profiles[0]
    parts = assemble([profile])
    view, events = parts.view, parts.events
    for i in range(nodes):
        events.on_node("ADDED", node_manifest(i))
    if installed and objects:
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
        reserve = events.on_custom("Reservation")
        for index, i in enumerate(range(0, nodes, NODES_PER_RESERVATION)):
            node = node_manifest(i)["metadata"]["name"]
            body = reservation(index, node)
            body["metadata"].update(uid=f"reservation-{index}", resourceVersion="1")
            reserve("ADDED", {**body, "status": reservation_status(node)})
    durations = []
    started = time.process_time()
    for i in range(pods):
        raw = _pod(f"bench-{i:05d}", "berth-scheduler")
        raw["metadata"].update(namespace="bench", uid=f"uid-{i}")
        pod = PodInfo.from_pod(raw)
        t0 = time.process_time()
        place(parts.profile(), view, pod)
        durations.append(time.process_time() - t0)
    cpu = time.process_time() - started
    return (
        f"{pods} pods onto {nodes} nodes in {cpu:.2f} CPU s ({pods / cpu:.0f} pods/s; "
        f"cycle p50 {percentile(durations, 0.5) * 1e3:.2f} ms, "
        f"p99 {percentile(durations, 0.99) * 1e3:.2f} ms)"
    )


def workload_cycle_bench(names: Iterable[str], nodes: int, pods: int | None, repeats: int) -> str:
    """scheduler_perf's workloads, the scheduling cycle alone with the default profile:
    the workload's nodes, its initial pods counted as bound, its measured pods scheduled
    one after another. Ties are broken with a fixed seed, so the digest of the chosen
    nodes is the same from commit to commit as long as no decision changed. The rate is
    over the process's CPU time (one thread): on a shared machine the wall clock also
    counts the other processes' turns."""
    lines = []
    for name in names:
        runs = [_workload_run(name, nodes, pods) for _ in range(max(repeats, 1))]
        rates = sorted(r[0] for r in runs)
        p99s = sorted(r[2] for r in runs)
        digests = {r[3] for r in runs}
        _, placed, _, _, init, measured = runs[0]
        lines.append(
            f"{name}: {measured} pods onto {nodes} nodes ({init} bound before), "
            f"{placed} placed; median of {len(runs)}: "
            f"{statistics.median(rates):.1f} pods per CPU second "
            f"({rates[0]:.1f}-{rates[-1]:.1f}), cycle p99 {statistics.median(p99s) * 1e3:.2f} "
            "CPU ms; "
            f"placements {'/'.join(sorted(digests))}"
        )
    return "\n".join(lines)


def _workload_run(
    name: str, nodes: int, pods: int | None
) -> tuple[float, int, float, str, int, int]:
    """(pods per CPU second, pods placed, p99 cycle CPU seconds, digest of the
    placements, initial pods, measured pods) of one run."""
    from berth.bench.workloads import WORKLOADS
    from berth.scheduler.assembly import assemble
    from berth.scheduler.cache.podinfo import PodInfo
    from berth.scheduler.config import Profile
    from berth.scheduler.framework.interface import CycleState
    from berth.scheduler.framework.messages import FitError

    workload = WORKLOADS[name]
    init, measured = workload.sizes(nodes, pods)
    parts = assemble([Profile()])
    view, events = parts.view, parts.events
    fwk, cycle = parts.profile().framework, parts.profile().cycle
    cycle.rng = random.Random(0)
    for i in range(nodes):
        events.on_node("ADDED", workload.node(i))
    for i in range(init):
        raw = workload.init_pod(i, nodes)
        raw["metadata"]["uid"] = f"init-{i}"
        events.on_pod("ADDED", raw)
    chosen: list[str] = []
    durations = []
    started = time.process_time()
    for i in range(measured):
        raw = workload.measured_pod(i, "berth-scheduler")
        raw["metadata"]["uid"] = f"pod-{i}"
        pod = PodInfo.from_pod(raw)
        t0 = time.process_time()
        state = CycleState()
        try:
            placement = cycle.schedule(state, pod)
        except FitError:
            chosen.append("")
        else:
            view.assume(pod, placement.node)
            fwk.run_reserve(state, pod, placement.node)
            chosen.append(placement.node)
        durations.append(time.process_time() - t0)
    cpu = time.process_time() - started
    digest = hashlib.sha1("\n".join(chosen).encode()).hexdigest()[:10]
    placed = sum(1 for node in chosen if node)
    return measured / cpu, placed, percentile(durations, 0.99), digest, init, measured
