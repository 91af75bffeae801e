"""Requeues under churn: how many scheduling attempts a side makes for each pod it binds
while the cluster changes under a backlog of pods that do not all fit.

Both sides run their default profile on plain pods (one priority, so preemption finds no
victim; no quotas, reservations or gangs, which kube-scheduler does not have): pods of
500m to 3 CPUs arrive at a steady rate, more than the nodes hold, and each is deleted a
while after it is bound; meanwhile nodes are drained, deleted and added back, or tainted
and untainted (a quarter of the pods tolerate the taint). Arrivals and node changes follow
one seeded schedule, the same for every side and trial; deletions follow each side's own
bindings. The side's ``scheduler_schedule_attempts_total`` (every result) is read once it
has bound a first pod and again when the churn ends: attempts per binding is how much
work its requeues cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.bench.backlog import TrialError, deadline_for, side_until
from berth.bench.fixture import Fixture
from berth.bench.process import SideProcess
from berth.bench.sides import Side
from berth.bench.stats import Spread, counter_total, percentile
from berth.bench.workloads import MEASURED_NAMESPACE, Workload, make_pod
from berth.kube.watch import Informer
from berth.kube.write import NODE, POD, NotFound

SEED: Final = 41
SIZES: Final = ("500m", "1", "2", "3")
ARRIVALS_PER_NODE: Final = 0.3
"""Pods a second per node: with lifetimes of 5 to 15 s, about a fifth more CPU than
4-CPU nodes hold, before any node is away."""
LIFETIME_SECONDS: Final = (5.0, 15.0)
TOLERATING: Final = 0.25
NODE_CHANGES_PER_NODE: Final = 0.02
"""Node changes a second per node: two a second at 100 nodes."""
AWAY_SECONDS: Final = 5.0
"""How long a deleted node stays away, or a tainted node tainted."""
TAINT: Final = {"key": "berth.bench/churn", "value": "", "effect": "NoSchedule"}
ATTEMPTS: Final = "scheduler_schedule_attempts_total"
LATE_SECONDS: Final = 10.0
"""A pod not bound this long after its creation is late: the tail, counted over every pod
created at least this long before the churn ends, so that a side binding more of the
large pods late is not judged by them alone (a percentile of bound pods' waits is)."""


class Action(StrEnum):
    DELETE = "delete"
    ADD = "add"
    TAINT = "taint"
    UNTAINT = "untaint"


@dataclass(frozen=True)
class Arrival:
    at: float
    index: int
    cpu: str
    tolerates: bool
    lifetime: float
    """Seconds the pod lives once the harness has seen it bound."""


@dataclass(frozen=True)
class NodeChange:
    at: float
    node: int
    action: Action


@dataclass(frozen=True)
class Schedule:
    arrivals: tuple[Arrival, ...]
    changes: tuple[NodeChange, ...]


def churn_schedule(seconds: float, nodes: int, seed: int = SEED) -> Schedule:
    """The arrivals and node changes of a churn of ``seconds`` on ``nodes`` nodes; a node is
    changed again only once it is back and a second has passed."""
    rng = random.Random(seed)
    rate = nodes * ARRIVALS_PER_NODE
    arrivals = tuple(
        Arrival(
            i / rate,
            i,
            rng.choice(SIZES),
            rng.random() < TOLERATING,
            rng.uniform(*LIFETIME_SECONDS),
        )
        for i in range(int(seconds * rate))
    )
    every = 1.0 / (nodes * NODE_CHANGES_PER_NODE)
    changes: list[NodeChange] = []
    free_at: dict[int, float] = {}
    at = every
    while at < seconds:
        node = rng.randrange(nodes)
        if free_at.get(node, 0.0) <= at:
            away, back = (
                (Action.DELETE, Action.ADD)
                if rng.random() < 0.5
                else (Action.TAINT, Action.UNTAINT)
            )
            changes += [NodeChange(at, node, away), NodeChange(at + AWAY_SECONDS, node, back)]
            free_at[node] = at + AWAY_SECONDS + 1.0
        at += every
    return Schedule(arrivals, tuple(sorted(changes, key=lambda c: c.at)))


@dataclass(frozen=True)
class Churn:
    side: str
    repeat: int
    nodes: int
    seconds: float
    created: int
    bound: int
    attempts: int
    """Scheduling attempts of every result the side counted during the churn."""
    unschedulable: int
    """Of them, those that found no node for the pod."""
    errors: int
    """Of them, those that failed in the scheduler itself (a binding refused, say)."""
    waits: tuple[float, ...] = ()
    """Seconds from each churn pod's creation request to the harness seeing it bound."""
    late: int = 0
    """Pods created ``LATE_SECONDS`` or more before the end and not bound within that."""

    @property
    def wait_p50(self) -> float:
        return percentile(self.waits, 0.5) if self.waits else float("nan")

    @property
    def wait_p99(self) -> float:
        return percentile(self.waits, 0.99) if self.waits else float("nan")

    @property
    def attempts_per_binding(self) -> float:
        return self.attempts / self.bound if self.bound else float("nan")


@dataclass
class _Pods:
    """The churn's pods as the harness sees them: when each was first bound, and where."""

    bound: dict[str, float] = field(default_factory=dict)
    on_node: dict[str, set[str]] = field(default_factory=dict)

    def seen(self, kind: str, pod: dict[str, Any]) -> None:
        name = str(pod["metadata"]["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        if kind == "DELETED":
            if node:
                self.on_node.get(node, set()).discard(name)
            return
        if node and name not in self.bound:
            self.bound[name] = time.perf_counter()
            self.on_node.setdefault(node, set()).add(name)


async def run_churn(
    api: ApiClient,
    fixture: Fixture,
    side: Side,
    workload: Workload,
    *,
    repeat: int,
    nodes: int,
    seconds: float,
    say: Callable[[str], None],
) -> Churn:
    schedule = churn_schedule(seconds, nodes)
    await fixture.clear_pods((MEASURED_NAMESPACE,))
    await fixture.nodes(workload, nodes)
    batch = fixture.next_batch()
    pods = _Pods()
    stop = asyncio.Event()
    core = CoreV1Api(api)
    informer = Informer(
        "pods", functools.partial(core.list_namespaced_pod, MEASURED_NAMESPACE), pods.seen
    )
    watching = asyncio.create_task(informer.run(stop))
    process = SideProcess(side)
    await process.start()
    try:
        await informer.synced.wait()
        warmup = _pod(workload, side, f"b{batch}-warmup", "100m", tolerates=False)
        await fixture.writer.create(POD, warmup, namespace=MEASURED_NAMESPACE)
        await side_until(
            process,
            lambda: warmup["metadata"]["name"] in pods.bound,
            deadline_for(1),
            lambda: "the first pod was not bound in time",
        )
        say(f"churn {side.label} #{repeat + 1}: {len(schedule.arrivals)} pods in {seconds:g}s")
        before = _attempts(await process.metrics())
        bound_before = len(pods.bound)
        begin = time.perf_counter()
        runner = _Runner(fixture, workload, side, batch, pods, begin)
        await asyncio.gather(
            *(runner.arrive(a) for a in schedule.arrivals),
            *(runner.change(c) for c in schedule.changes if c.at < seconds),
            runner.expire(begin + seconds),
        )
        after = _attempts(await process.metrics())
        bound = len(pods.bound) - bound_before
        waits = tuple(
            pods.bound[name] - at for name, at in runner.created.items() if name in pods.bound
        )
        late = late_pods(runner.created, pods.bound, begin + seconds)
        if process.exited():
            raise TrialError(f"{side.label} exited; see {process.log_path}")
    finally:
        await process.stop()
        stop.set()
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await _restore(fixture, workload, schedule, seconds)
    attempts, unschedulable, errors = (int(a - b) for a, b in zip(after, before, strict=True))
    result = Churn(
        side.label,
        repeat,
        nodes,
        seconds,
        len(schedule.arrivals),
        bound,
        attempts,
        unschedulable,
        errors,
        waits,
        late,
    )
    say(
        f"  {result.bound} bound of {result.created}, {result.attempts} attempts "
        f"({result.unschedulable} unschedulable, {result.errors} errors): "
        f"{result.attempts_per_binding:.2f} per binding; waits p50 {result.wait_p50:.2f}s "
        f"p99 {result.wait_p99:.2f}s; {result.late} late"
    )
    return result


def _attempts(text: str | None) -> tuple[float, float, float]:
    """The side's attempts so far: of every result, unschedulable, error."""
    return (
        counter_total(text or "", ATTEMPTS),
        counter_total(text or "", ATTEMPTS, {"result": "unschedulable"}),
        counter_total(text or "", ATTEMPTS, {"result": "error"}),
    )


class _Runner:
    """Carries out the schedule on the cluster, on the harness' clock from ``begin``."""

    def __init__(
        self,
        fixture: Fixture,
        workload: Workload,
        side: Side,
        batch: int,
        pods: _Pods,
        begin: float,
    ) -> None:
        self.fixture = fixture
        self.workload = workload
        self.side = side
        self.batch = batch
        self.pods = pods
        self.begin = begin
        self.lifetimes: dict[str, float] = {}
        self.created: dict[str, float] = {}

    async def _at(self, offset: float) -> None:
        await asyncio.sleep(max(0.0, self.begin + offset - time.perf_counter()))

    async def arrive(self, arrival: Arrival) -> None:
        await self._at(arrival.at)
        name = f"b{self.batch}-churn-{arrival.index}"
        self.lifetimes[name] = arrival.lifetime
        body = _pod(self.workload, self.side, name, arrival.cpu, tolerates=arrival.tolerates)
        self.created[name] = time.perf_counter()
        await self.fixture.writer.create(POD, body, namespace=MEASURED_NAMESPACE)

    async def expire(self, end: float) -> None:
        """Until ``end``: delete each pod its lifetime after it was seen bound."""
        deleted: set[str] = set()
        while time.perf_counter() < end:
            now = time.perf_counter()
            due = [
                name
                for name, at in self.pods.bound.items()
                if name not in deleted
                and name in self.lifetimes
                and at + self.lifetimes[name] <= now
            ]
            deleted.update(due)
            await asyncio.gather(*(self.fixture.delete_pod(MEASURED_NAMESPACE, n) for n in due))
            await asyncio.sleep(0.1)

    async def change(self, change: NodeChange) -> None:
        await self._at(change.at)
        await apply_change(self.fixture, self.workload, change, self.pods.on_node)


async def apply_change(
    fixture: Fixture,
    workload: Workload,
    change: NodeChange,
    on_node: dict[str, set[str]] | None = None,
) -> None:
    """One node change; a node is drained (its churn pods deleted) before it is deleted."""
    node = workload.node(change.node)
    name = node["metadata"]["name"]
    if change.action is Action.DELETE:
        held = sorted((on_node or {}).get(name, set()))
        await asyncio.gather(*(fixture.delete_pod(MEASURED_NAMESPACE, pod) for pod in held))
        with contextlib.suppress(NotFound):
            await fixture.writer.delete(NODE, name)
    elif change.action is Action.ADD:
        await fixture.create_node(node)
    else:
        taints = [TAINT] if change.action is Action.TAINT else None
        with contextlib.suppress(NotFound):
            await fixture.writer.patch(NODE, name, {"spec": {"taints": taints}})


async def _restore(
    fixture: Fixture, workload: Workload, schedule: Schedule, seconds: float
) -> None:
    """Every node the churn took away back, and untainted: the next trial starts alike."""
    for change in schedule.changes:
        if change.at >= seconds and change.action in (Action.ADD, Action.UNTAINT):
            await apply_change(fixture, workload, change)
    await fixture.nodes_ready()


def _pod(workload: Workload, side: Side, name: str, cpu: str, *, tolerates: bool) -> dict[str, Any]:
    pod = make_pod(workload.measured_template, name, MEASURED_NAMESPACE, side.scheduler_name)
    container = pod["spec"]["containers"][0]
    for amounts in container["resources"].values():
        amounts["cpu"] = cpu
    if tolerates:
        pod["spec"]["tolerations"] = [{**TAINT, "operator": "Equal"}]
    return pod


def late_pods(created: dict[str, float], bound: dict[str, float], end: float) -> int:
    """Of the pods created ``LATE_SECONDS`` or more before ``end``, those not bound within
    ``LATE_SECONDS`` of their creation (bound later, or not at all)."""
    return sum(
        1
        for name, at in created.items()
        if at <= end - LATE_SECONDS and bound.get(name, float("inf")) - at > LATE_SECONDS
    )


def churn_table(results: Sequence[Churn]) -> str:
    """Each side's trials: median (range) of pods bound, attempts, attempts per binding."""
    by_side: dict[tuple[str, int], list[Churn]] = {}
    for result in results:
        by_side.setdefault((result.side, result.nodes), []).append(result)
    lines = [
        "\nrequeues under churn (plain pods; attempts of every result per pod bound)\n"
        f"{'side':<15}{'nodes':>6}{'seconds':>8}{'created':>8}{'bound':>20}"
        f"{'attempts':>24}{'unschedulable':>24}{'errors':>16}{'attempts per binding':>24}"
        f"{'wait p50 s':>20}{'wait p99 s':>20}{f'late >{LATE_SECONDS:g}s':>20}"
    ]
    for (side, nodes), rows in by_side.items():
        lines.append(
            f"{side:<15}{nodes:>6}{rows[0].seconds:>8g}{rows[0].created:>8}"
            f"{Spread.of([float(r.bound) for r in rows]).show(0):>20}"
            f"{Spread.of([float(r.attempts) for r in rows]).show(0):>24}"
            f"{Spread.of([float(r.unschedulable) for r in rows]).show(0):>24}"
            f"{Spread.of([float(r.errors) for r in rows]).show(0):>16}"
            f"{Spread.of([r.attempts_per_binding for r in rows]).show(2):>24}"
            f"{Spread.of([r.wait_p50 for r in rows]).show(2):>20}"
            f"{Spread.of([r.wait_p99 for r in rows]).show(2):>20}"
            f"{Spread.of([float(r.late) for r in rows]).show(0):>20}"
        )
    return "\n".join(lines)
