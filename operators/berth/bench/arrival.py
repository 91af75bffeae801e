"""Latency at a fixed arrival rate: the side runs and has synced (a first pod bound), then
pods arrive open-loop at ``rate`` a second, below what the side can bind, and each pod is
timed from its creation request to the watch event showing it bound. This says how long a
pod waits when the scheduler keeps up; it is not a throughput figure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from berth.bench.backlog import deadline_for, side_until
from berth.bench.bindings import BindWatch
from berth.bench.fixture import Fixture
from berth.bench.process import SideProcess
from berth.bench.sides import Side
from berth.bench.stats import percentile
from berth.bench.workloads import MEASURED_NAMESPACE, Workload
from berth.kube.write import POD


@dataclass(frozen=True)
class Latency:
    workload: str
    side: str
    repeat: int
    nodes: int
    pods: int
    rate: float
    achieved_rate: float
    """Creations per second the harness really reached."""
    latencies: tuple[float, ...]
    collections: int = 0
    """Whole-heap collections of Python's cyclic collector while the pods arrived."""
    longest_collection_ms: float = float("nan")
    """The bound of the longest of them (0: none; NaN: a side that does not time them)."""

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99)


def schedule(count: int, rate: float) -> list[float]:
    """Offsets in seconds at which the pods are created: evenly spaced at ``rate``."""
    return [i / rate for i in range(count)]


async def run_latency(
    api: ApiClient,
    fixture: Fixture,
    side: Side,
    workload: Workload,
    *,
    repeat: int,
    nodes: int,
    init_pods: int,
    pods: int,
    rate: float,
    say: Callable[[str], None],
) -> Latency:
    await fixture.clear_pods((MEASURED_NAMESPACE,))
    await fixture.nodes_ready()
    batch = fixture.next_batch()
    process = SideProcess(side)
    await process.start()
    try:
        async with BindWatch(api, pods + 1) as watch:
            warmup = workload.measured_pod(0, side.scheduler_name, batch)
            name = warmup["metadata"]["name"] = f"b{batch}-warmup"
            await fixture.writer.create(POD, warmup, namespace=warmup["metadata"]["namespace"])
            await _wait(watch, process, lambda: name in watch.bound, deadline_for(1))
            say(f"{workload.name} {side.label} #{repeat + 1}: {pods} pods at {rate:g}/s")
            metrics_before = await process.metrics()
            created: dict[str, float] = {}
            begin = time.perf_counter()

            async def create(index: int, at: float) -> None:
                await asyncio.sleep(max(0.0, begin + at - time.perf_counter()))
                body = workload.measured_pod(index, side.scheduler_name, batch)
                created[body["metadata"]["name"]] = time.perf_counter()
                await fixture.writer.create(POD, body, namespace=body["metadata"]["namespace"])

            await asyncio.gather(*(create(i, at) for i, at in enumerate(schedule(pods, rate))))
            achieved = pods / (max(created.values()) - begin) if pods > 1 else rate
            await _wait(watch, process, watch.done.is_set, deadline_for(pods))
            collections = process.whole_heap_collections(metrics_before, await process.metrics())
    finally:
        await process.stop()
    latencies = tuple(watch.bound[n] - created[n] for n in created if n in watch.bound)
    result = Latency(
        workload.name, side.label, repeat, nodes, pods, rate, achieved, latencies, *collections
    )
    say(
        f"  p50 {result.p50:.3f}s p99 {result.p99:.3f}s (created at {achieved:.1f}/s); "
        f"{_collections(result)}"
    )
    return result


async def _wait(
    watch: BindWatch, process: SideProcess, ready: Callable[[], bool], seconds: float
) -> None:
    await side_until(process, ready, seconds, lambda: f"only {len(watch.bound)} pods bound in time")


def _collections(result: Latency) -> str:
    if result.longest_collection_ms != result.longest_collection_ms:  # NaN: not timed
        return "collections not timed"
    if not result.collections:
        return "no whole-heap collection"
    return (
        f"{result.collections} whole-heap collection(s), longest "
        f"<= {result.longest_collection_ms:g} ms"
    )


def latency_table(results: Sequence[Latency]) -> str:
    lines = [
        f"\narrival-rate latency (create to bound; not a throughput figure)\n"
        f"{'side':<15}{'workload':<28}{'nodes':>6}{'pods':>6}{'rate/s':>8}{'reached/s':>10}"
        f"{'p50 s':>8}{'p99 s':>8}  whole-heap collections while they arrived"
    ]
    for r in results:
        lines.append(
            f"{r.side:<15}{r.workload:<28}{r.nodes:>6}{r.pods:>6}{r.rate:>8g}"
            f"{r.achieved_rate:>10.1f}{r.p50:>8.3f}{r.p99:>8.3f}  {_collections(r)}"
        )
    return "\n".join(lines)
