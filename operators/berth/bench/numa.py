"""The pending ledger's trade-off, measured: how often NUMA placements fail on the node
when topology reports come every N seconds, with the ledger off and on.

A simulation in process with the real plugin and view and a simulated clock: nodes of 4
zones of 8 cpu, a burst of Guaranteed pods of 6 cpu (most of a zone each: the node's cpu
fits 5, its zones 4) arriving at a steady rate, a topology updater that reports every
node's true zones every N seconds, and a kubelet that puts a pod in the first zone with
room or refuses it (TopologyAffinityError). Unschedulable pods are retried after each report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.localcluster.nodes import kwok_node
from berth.scheduler.assembly import assemble
from berth.scheduler.config import Profile
from berth.scheduler.framework import CycleState
from berth.scheduler.messages import FitError
from berth.scheduler.podinfo import PodInfo

ZONES, ZONE_CPU = 4, 8
# A pod needs most of a zone: the node's cpu (32) fits 5 of them, its zones only 4.
POD_CPU = 6


@dataclass
class Outcome:
    placed: int = 0
    refused_on_node: int = 0
    waiting: int = 0
    last_placed: float = 0.0  # simulated seconds


def _report(name: str, free: list[int], at: float) -> dict[str, Any]:
    written = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {"name": name, "managedFields": [{"manager": "updater", "time": written}]},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [
            {
                "name": f"node-{z}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": str(ZONE_CPU), "allocatable": str(ZONE_CPU),
                     "available": str(free[z])}
                ],
            }
            for z in range(ZONES)
        ],
    }  # fmt: skip


def _pod(i: int) -> dict[str, Any]:
    limits = {"cpu": str(POD_CPU), "memory": "1Gi"}
    return {
        "metadata": {"name": f"numa-{i}", "namespace": "bench", "uid": f"numa-{i}"},
        "spec": {
            "schedulerName": "berth-scheduler",
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
    }


def simulate(nodes: int, pods: int, rate: float, interval: float, pending: bool) -> Outcome:
    args = {"cacheResyncPeriodSeconds": 5} if pending else {}
    profile = Profile.model_validate(
        {
            "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
            "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
        }
    )
    parts = assemble([profile])
    view, cycle = parts.view, parts.profile().cycle
    names = [f"numa-node-{i}" for i in range(nodes)]
    allocatable = {"cpu": str(ZONES * ZONE_CPU), "memory": "256Gi", "pods": "110"}
    for name in names:
        parts.events.on_node("ADDED", kwok_node(name, allocatable=allocatable))
    free = {name: [ZONE_CPU] * ZONES for name in names}
    start = datetime.now(UTC).timestamp()
    report = parts.events.on_custom("NodeResourceTopology")
    for name in names:
        report("ADDED", _report(name, free[name], start))
    outcome = Outcome()

    def attempt(pod: PodInfo, now: float) -> bool:
        """One scheduling attempt and what the node's kubelet then does with the pod."""
        try:
            node = cycle.schedule(CycleState(), pod).node
        except FitError:
            return False
        view.assume(pod, node)
        view.placed_at[pod.uid] = start + now
        zone = next((z for z, cpu in enumerate(free[node]) if cpu >= POD_CPU), None)
        if zone is None:
            outcome.refused_on_node += 1  # TopologyAffinityError: the pod fails there
            view.forget(pod)
        else:
            free[node][zone] -= POD_CPU
            outcome.placed += 1
            outcome.last_placed = now
        return True

    arrivals = [(i / rate, PodInfo.from_pod(_pod(i))) for i in range(pods)]
    waiting: list[PodInfo] = []
    next_report = interval
    while arrivals or waiting:
        if arrivals and arrivals[0][0] < next_report:
            at, pod = arrivals.pop(0)
            if not attempt(pod, at):
                waiting.append(pod)
            continue
        for name in names:
            report("MODIFIED", _report(name, free[name], start + next_report))
        retry, waiting = waiting, []
        progress = False
        for pod in retry:
            if attempt(pod, next_report):
                progress = True
            else:
                waiting.append(pod)
        next_report += interval
        if not arrivals and not progress:
            break  # the zones are full for real: the rest would wait for ever
    outcome.waiting = len(waiting)
    return outcome


def numa_bench(nodes: int = 25, pods: int = 120, rate: float = 20.0) -> str:
    lines = [
        f"{nodes} nodes x {ZONES} zones of {ZONE_CPU} cpu, {pods} pods of {POD_CPU} cpu "
        f"arriving at {rate:.0f}/s",
        "report every  ledger  placed  refused on node  left waiting  last placed at",
    ]
    for interval in (1.0, 5.0, 10.0, 30.0):
        for pending in (False, True):
            o = simulate(nodes, pods, rate, interval, pending)
            lines.append(
                f"{interval:>10.0f} s  {'on' if pending else 'off':>6}  {o.placed:>6}  "
                f"{o.refused_on_node:>15}  {o.waiting:>12}  {o.last_placed:>12.1f} s"
            )
    return "\n".join(lines)
