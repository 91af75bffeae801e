"""Whole-heap collections while the scheduler schedules, in process, without a cluster.

The view is listed as ``berth run`` lists it (nodes and bound pods through the Informer,
shaped as the API server sends them), then pending pods arrive, are scheduled and are
bound, each through the event table as its watch events would come. Python's cyclic
collector runs as it does in ``berth run``: off during the lists; then either with what the
synced view holds frozen (as ``berth run`` does) or without. Every generation-2 collection
while the pods are scheduled is timed: the event loop stands still for each. Each case runs
in a fresh process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import subprocess
import sys
import time
from typing import Any

import orjson

from berth.bench.cycle import place
from berth.bench.memory import Pages, wire_node, wire_pod
from berth.bench.stats import percentile

SCHEDULED = 5000
"""Pending pods scheduled and bound once the view is synced."""


def measure(nodes: int, pods: int, scheduled: int, *, freeze: bool) -> dict[str, Any]:
    """One case, in this process."""
    from berth.kube.collector import freeze_when_synced, synced
    from berth.kube.watch import Informer
    from berth.scheduler.assembly import assemble
    from berth.scheduler.cache.podinfo import PodInfo
    from berth.scheduler.config import Profile

    parts = assemble([Profile()], rng=random.Random(0))
    view, events = parts.view, parts.events
    names = [f"kwok-node-{i}" for i in range(nodes)]
    asyncio.run(
        Informer("nodes", Pages(nodes, wire_node), events.on_node, drop_managed_fields=True)._list()
    )
    asyncio.run(
        Informer(
            "pods",
            Pages(pods, lambda i: wire_pod(i, names[i % nodes])),
            events.on_pod,
            drop_managed_fields=True,
        )._list()
    )
    if freeze:
        freeze_when_synced()
    synced()
    pauses: list[float] = []
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    cycles = []
    begin = time.process_time()
    for i in range(scheduled):
        raw = wire_pod(pods + i, "")
        events.on_pod("ADDED", raw)
        pod = PodInfo.from_pod(raw)
        t0 = time.perf_counter()
        node = place(parts.profile(), view, pod)
        cycles.append(time.perf_counter() - t0)
        bound = orjson.loads(orjson.dumps(raw))
        bound["spec"]["nodeName"] = node
        bound["status"] = {"phase": "Running"}
        events.on_pod("MODIFIED", bound)
    cpu = time.process_time() - begin
    gc.callbacks.remove(timed)
    return {
        "collections": len(pauses),
        "longest_ms": max(pauses, default=0.0) * 1e3,
        "pods_per_cpu_s": scheduled / cpu if cpu else 0.0,
        "cycle_p99_ms": percentile(cycles, 0.99) * 1e3,
        "tracked": len(gc.get_objects()),
    }


def _child(nodes: int, pods: int, scheduled: int, freeze: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "berth.bench.collections"]
    argv += [str(nodes), str(pods), str(scheduled), str(int(freeze))]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def collections_bench(points: list[tuple[int, int]], scheduled: int, repeats: int) -> str:
    """Each point frozen and not, alternating, ``repeats`` times each."""
    lines = [
        f"{'nodes':>6} {'pods':>7} {'scheduled':>9} {'view':>9} {'whole-heap':>11} "
        f"{'longest ms':>11} {'pods/CPU s':>11} {'cycle p99 ms':>13} {'tracked objects':>16}"
    ]
    for nodes, pods in points:
        for _ in range(max(repeats, 1)):
            for freeze in (False, True):
                r = _child(nodes, pods, scheduled, freeze)
                lines.append(
                    f"{nodes:>6} {pods:>7} {scheduled:>9} {'frozen' if freeze else 'unfrozen':>9} "
                    f"{r['collections']:>11} {r['longest_ms']:>11.1f} "
                    f"{r['pods_per_cpu_s']:>11.0f} {r['cycle_p99_ms']:>13.2f} {r['tracked']:>16}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    nodes, pods, scheduled, freeze = (int(a) for a in sys.argv[1:5])
    result = measure(nodes, pods, scheduled, freeze=bool(freeze))
    sys.stdout.write(json.dumps(result) + "\n")
