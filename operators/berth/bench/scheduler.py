"""``berth bench``: Berth's scheduler beside kube-scheduler on the same local cluster.

Each scheduler runs as its own process with the same client QPS and burst, on the same
kwok nodes; the harness creates the pods (schedulerName set to the scheduler under test)
and watches them, timing create-to-bound on one clock. Printed side by side: pods per
second from the first creation to the last binding, p50 and p99 create-to-bound, and the
peak resident memory of the scheduler process.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.kube.client import client_from_kubeconfig
from berth.kube.watch import Informer
from berth.kube.write import POD, ApiWriter
from berth.localcluster.build import ensure_built
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from berth.run import run_command

CREATE_CONCURRENCY = 32


@dataclass(frozen=True)
class Result:
    scheduler: str
    pods: int
    bound: int
    seconds: float
    p50: float
    p99: float
    peak_rss_mib: float

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


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


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def _measure(
    api: ApiClient, namespace: str, scheduler: str, count: int
) -> tuple[list[float], float]:
    """Create ``count`` pods and wait for all bound: (create-to-bound seconds, wall seconds).

    The watch is an Informer: on a loaded machine the API server drops watchers that fall
    behind, and a plain watch would lose the bindings that happen meanwhile.
    """
    core = CoreV1Api(api)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = asyncio.Event()

    def seen(kind: str, pod: dict[str, Any]) -> None:
        name = str(pod["metadata"]["name"])
        if kind != "DELETED" and (pod.get("spec") or {}).get("nodeName") and name not in bound:
            bound[name] = time.perf_counter()
            if len(bound) >= count:
                done.set()

    informer = Informer("pods", functools.partial(core.list_namespaced_pod, namespace), seen)
    stop = asyncio.Event()
    watcher = asyncio.create_task(informer.run(stop))
    await informer.synced.wait()
    writer = ApiWriter(api)
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)
    start = time.perf_counter()

    async def create(i: int) -> None:
        name = f"bench-{i:05d}"
        async with limit:
            created[name] = time.perf_counter()
            await writer.create(POD, _pod(name, scheduler), namespace=namespace)

    try:
        await asyncio.gather(*(create(i) for i in range(count)))
        await asyncio.wait_for(done.wait(), timeout=max(300.0, count / 5))
    except TimeoutError:
        raise RuntimeError(f"only {len(bound)} of {count} pods bound in time") from None
    finally:
        stop.set()
        watcher.cancel()
    wall = max(bound.values()) - start
    latencies = [bound[n] - created[n] for n in bound if n in created]
    return latencies, wall


def _scheduler_config(name: str, kubeconfig: str, qps: float, burst: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": burst},
        "profiles": [{"schedulerName": name}],
    }


async def _run_one(
    label: str,
    argv: list[str],
    scheduler_name: str,
    kubeconfig: str,
    pods: int,
    say: Callable[[str], None],
) -> Result:
    namespace = f"bench-{label}"
    kubectl = Kubectl(kubeconfig)
    kubectl("create", "namespace", namespace)
    log_path = Path(tempfile.gettempdir()) / f"berth-bench-{label}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log)
        try:
            await asyncio.sleep(3)  # the scheduler lists the cluster before the pods arrive
            if process.returncode is not None:
                raise RuntimeError(f"{label} exited at start; see {log_path}")
            async with await client_from_kubeconfig(kubeconfig) as api:
                say(f"{label}: creating {pods} pods")
                latencies, wall = await _measure(api, namespace, scheduler_name, pods)
            rss = _peak_rss_mib(process.pid)
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 15)
                except TimeoutError:
                    process.kill()
                    await process.wait()
    say(f"{label}: cleaning up")
    kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=600s")
    return Result(
        label,
        pods,
        len(latencies),
        wall,
        _percentile(latencies, 0.5),
        _percentile(latencies, 0.99),
        rss,
    )


def table(results: list[Result]) -> str:
    lines = [
        f"{'scheduler':<16}{'pods':>7}{'bound':>7}{'seconds':>9}{'pods/s':>9}"
        f"{'p50 s':>8}{'p99 s':>8}{'peak MiB':>10}"
    ]
    for r in results:
        lines.append(
            f"{r.scheduler:<16}{r.pods:>7}{r.bound:>7}{r.seconds:>9.1f}{r.pods_per_second:>9.1f}"
            f"{r.p50:>8.2f}{r.p99:>8.2f}{r.peak_rss_mib:>10.0f}"
        )
    if len(results) == 2 and results[0].pods_per_second > 0:
        kube, berth = results
        throughput = berth.pods_per_second / kube.pods_per_second
        lines.append(
            f"ratio berth/kube-scheduler: pods/s {throughput:.2f}, p99 {berth.p99 / kube.p99:.2f}"
        )
    return "\n".join(lines)


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
    from berth.scheduler.framework import CycleState
    from berth.scheduler.podinfo import PodInfo

    profile = Profile()
    if installed:
        configmap = yaml.safe_load((REPO_DIR / "manifests" / "scheduler-config.yaml").read_text())
        profile = parse(yaml.safe_load(configmap["data"]["scheduler-config.yaml"])).profiles[0]
    parts = assemble([profile])
    view, events = parts.view, parts.events
    fwk, cycle = parts.profile().framework, parts.profile().cycle
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
        state = CycleState()
        placement = cycle.schedule(state, pod)
        view.assume(pod, placement.node)
        fwk.run_reserve(state, pod, placement.node)
        durations.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    return (
        f"{pods} pods onto {nodes} nodes in {wall:.2f}s ({pods / wall:.0f} pods/s; "
        f"cycle p50 {_percentile(durations, 0.5) * 1e3:.2f} ms, "
        f"p99 {_percentile(durations, 0.99) * 1e3:.2f} ms)"
    )


def bench(
    nodes: int,
    pods: int,
    qps: float,
    burst: int,
    keep: bool,
    say: Callable[[str], None],
    only: str | None = None,
) -> int:
    cluster = LocalCluster.default()
    binaries = ensure_built(say)
    started = not cluster.is_up()
    cluster.up(nodes=nodes, say=say)
    kubeconfig = str(cluster.kubeconfig)
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp:
            kube_config = Path(tmp) / "kube-scheduler.yaml"
            kube_config.write_text(
                yaml.safe_dump(_scheduler_config("default-scheduler", kubeconfig, qps, burst))
            )
            berth_config = Path(tmp) / "berth-scheduler.yaml"
            berth_config.write_text(
                yaml.safe_dump(_scheduler_config("berth-scheduler", kubeconfig, qps, burst))
            )
            runs = [
                (
                    "kube-scheduler",
                    [
                        str(binaries["kube-scheduler"]),
                        f"--config={kube_config}",
                        "--secure-port=0",
                        "--v=0",
                    ],
                    "default-scheduler",
                ),
                (
                    "berth",
                    run_command(kubeconfig, str(berth_config)),
                    "berth-scheduler",
                ),
            ]
            for label, argv, name in runs:
                if only is not None and label != only:
                    continue
                say(f"{label}: {pods} pods onto {nodes} nodes, client qps {qps} burst {burst}")
                results.append(asyncio.run(_run_one(label, argv, name, kubeconfig, pods, say)))
    finally:
        if started and not keep:
            cluster.down()
    sys.stdout.write(table(results) + "\n")
    return 0
