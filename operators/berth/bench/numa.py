"""The pending ledger's trade-off, measured: how often NUMA placements fail on the node
when topology reports come every N seconds, with the ledger off and on.

A simulation in process with the real plugin and view and a simulated clock, seeded so a
run can be repeated: nodes of 4 zones of 8 cpu; a burst of Guaranteed pods of 6 cpu (most
of a zone each: the node's cpu fits 5, its zones 4) arriving as a Poisson process; a
kubelet per node that admits each placed pod after a random start-up delay into the first
zone with room, or refuses it (TopologyAffinityError: the pod fails); and a topology
updater per node that writes the node's true zones every N seconds, each node at its own
random phase, with the podfingerprint of the pods it has admitted (or without one, to
measure the ledger's fallback on write times). An updater write that changes nothing is
no write, as on the API server. Pods the scheduler cannot place wait and are retried when
a node's report changes.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from berth.localcluster.nodes import kwok_node
from berth.numa.fingerprint import sign
from berth.scheduler.assembly import assemble
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.config import Profile
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.framework.messages import FitError

__all__ = ["LEDGERS", "Outcome", "Scenario", "numa_bench", "simulate"]

ZONES, ZONE_CPU = 4, 8
# A pod needs most of a zone: the node's cpu (32) fits 5 of them, its zones only 4.
POD_CPU = 6
NAMESPACE = "bench"
OFF, ON, ON_WITHOUT_FINGERPRINT = "off", "on", "on, no fingerprint"
LEDGERS = (OFF, ON, ON_WITHOUT_FINGERPRINT)


@dataclass(frozen=True)
class Scenario:
    interval: float  # seconds between one node's reports
    ledger: str  # one of LEDGERS
    nodes: int = 25
    pods: int = 120
    rate: float = 20.0  # mean arrivals per second
    start_up: tuple[float, float] = (0.5, 1.5)  # kubelet admission delay, uniform (s)


@dataclass
class Outcome:
    placed: int = 0
    refused_on_node: int = 0
    waiting: int = 0
    last_placed: float = 0.0  # simulated seconds


@dataclass
class _Node:
    free: list[int] = field(default_factory=lambda: [ZONE_CPU] * ZONES)
    admitted: list[str] = field(default_factory=list)
    written: bytes = b""


def _report(name: str, node: _Node, at: float, fingerprint: bool) -> dict[str, Any]:
    """The NodeResourceTopology an updater writes; managedFields as the API server keeps
    them (the updater owns zones and attributes; times in whole seconds)."""
    written = datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    attributes = [{"name": "topologyManagerPolicy", "value": "single-numa-node"}]
    if fingerprint:
        value = sign((NAMESPACE, pod) for pod in node.admitted)
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": value})
        attributes.append({"name": "nodeTopologyPodsFingerprintMethod", "value": "all"})
    entry = {
        "manager": "updater",
        "operation": "Update",
        "time": written,
        "fieldsV1": {"f:attributes": {}, "f:zones": {}},
    }
    return {
        "metadata": {"name": name, "managedFields": [entry]},
        "attributes": attributes,
        "zones": [
            {
                "name": f"node-{z}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": str(ZONE_CPU), "allocatable": str(ZONE_CPU),
                     "available": str(node.free[z])}
                ],
            }
            for z in range(ZONES)
        ],
    }  # fmt: skip


def _pod(i: int) -> PodInfo:
    limits = {"cpu": str(POD_CPU), "memory": "1Gi"}
    return PodInfo.from_pod(
        {
            "metadata": {"name": f"numa-{i}", "namespace": NAMESPACE, "uid": f"numa-{i}"},
            "spec": {
                "schedulerName": "berth-scheduler",
                "containers": [{"name": "c", "resources": {"limits": limits}}],
            },
        }
    )


def simulate(scenario: Scenario, seed: int) -> Outcome:
    """One run of the scenario; the same seed gives the same arrivals, phases and delays."""
    rng = random.Random(seed)
    args = {"cacheResyncPeriodSeconds": 5} if scenario.ledger != OFF else {}
    profile = Profile.model_validate(
        {
            "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
            "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
        }
    )
    parts = assemble([profile], rng=random.Random(rng.random()))
    view, cycle = parts.view, parts.profile().cycle
    names = [f"numa-node-{i}" for i in range(scenario.nodes)]
    allocatable = {"cpu": str(ZONES * ZONE_CPU), "memory": "256Gi", "pods": "110"}
    nodes = {name: _Node() for name in names}
    fingerprint = scenario.ledger != ON_WITHOUT_FINGERPRINT
    start = float(int(datetime.now(UTC).timestamp()))
    publish = parts.events.on_custom("NodeResourceTopology")

    def write(name: str, at: float) -> bool:
        """The updater's write; False when it changes nothing (no write at all)."""
        body = _report(name, nodes[name], at, fingerprint)
        content = repr((body["attributes"], body["zones"])).encode()
        previous, nodes[name].written = nodes[name].written, content
        if content == previous:
            return False
        publish("MODIFIED" if previous else "ADDED", body)
        return True

    for name in names:
        parts.events.on_node("ADDED", kwok_node(name, allocatable=allocatable))
        write(name, start - 60)
    outcome = Outcome()

    # Events: (time, order, kind, payload). Kinds: arrive, admit, report.
    events: list[tuple[float, int, str, Any]] = []
    order = 0

    def push(at: float, kind: str, payload: Any) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, kind, payload))

    at = 0.0
    for i in range(scenario.pods):
        at += rng.expovariate(scenario.rate)
        push(at, "arrive", _pod(i))
    for name in names:
        push(rng.uniform(0, scenario.interval), "report", name)
    admitting = 0
    last_change = 0.0

    def attempt(pod: PodInfo, now: float) -> bool:
        nonlocal admitting, last_change
        try:
            node = cycle.schedule(CycleState(), pod).node
        except FitError:
            return False
        view.assume(pod, node)
        view.placed_at[pod.uid] = start + now
        admitting += 1
        last_change = now
        push(now + rng.uniform(*scenario.start_up), "admit", (pod, node))
        return True

    arrivals = scenario.pods
    waiting: list[PodInfo] = []
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == "arrive":
            arrivals -= 1
            if waiting or not attempt(payload, now):
                waiting.append(payload)  # identical pods: the queue keeps its order
        elif kind == "admit":
            pod, name = payload
            admitting -= 1
            last_change = now
            node = nodes[name]
            zone = next((z for z, cpu in enumerate(node.free) if cpu >= POD_CPU), None)
            if zone is None:
                outcome.refused_on_node += 1  # TopologyAffinityError: the pod fails there
                view.forget(pod)
            else:
                node.free[zone] -= POD_CPU
                node.admitted.append(pod.name)
                outcome.placed += 1
                outcome.last_placed = now
        else:
            name = payload
            if write(name, start + now):
                # Identical pods: once one does not fit, none does.
                while waiting and attempt(waiting[0], now):
                    waiting.pop(0)
            settled = not arrivals and not admitting and now > last_change + scenario.interval
            if settled:
                break  # every node reported since the last change: the rest wait for ever
            push(now + scenario.interval, "report", name)
    outcome.waiting = len(waiting)
    return outcome


def _spread(values: Sequence[float], unit: str = "", digits: int = 0) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    text = f"{mid:.{digits}f}{unit}"
    return text if low == high else f"{text} [{low:.{digits}f}-{high:.{digits}f}]"


def numa_bench(
    intervals: Sequence[float] = (1.0, 5.0, 10.0, 30.0), repeats: int = 5, seed: int = 1
) -> str:
    """The table: per report period and ledger, the median and [min-max] over ``repeats``
    seeded runs."""
    base = Scenario(interval=1.0, ledger=OFF)
    low, high = base.start_up
    lines = [
        f"{base.nodes} nodes x {ZONES} zones of {ZONE_CPU} cpu (room for "
        f"{base.nodes * ZONES} pods), {base.pods} pods of {POD_CPU} cpu arriving at "
        f"{base.rate:.0f}/s (Poisson), admitted {low}-{high} s after placement, "
        f"{repeats} runs (seeds {seed}-{seed + repeats - 1}): median [min-max]",
        "",
        "report every  ledger              placed         refused on node  left waiting   "
        "last placed at",
    ]
    for interval in intervals:
        for ledger in LEDGERS:
            scenario = Scenario(interval=interval, ledger=ledger)
            runs = [simulate(scenario, seed + r) for r in range(repeats)]
            lines.append(
                f"{interval:>10.0f} s  {ledger:<18}  "
                f"{_spread([o.placed for o in runs]):<13}  "
                f"{_spread([o.refused_on_node for o in runs]):<15}  "
                f"{_spread([o.waiting for o in runs]):<13}  "
                f"{_spread([o.last_placed for o in runs], ' s', 1)}"
            )
    return "\n".join(lines)
