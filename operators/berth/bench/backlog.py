"""Throughput on a backlog, as scheduler_perf measures a saturated scheduler: the pods are
created while no scheduler runs, then the side under test is started and the harness
times, on its own clock, the start, the first binding and the last.

Two rates come out of each trial: from the first binding to the last (the scheduler's
pace once it has listed the cluster), and from the start to the last binding (listing and
syncing included). Sides run in an order that alternates from one repeat to the next.

A gang workload's PodGroups are created before its pods, and its trial also counts gangs:
from the first gang whole (every member bound) to the last, the group attempts the side's
metrics counted, and the PodGroups it marked scheduled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from berth.bench.bindings import BindWatch
from berth.bench.fixture import Fixture
from berth.bench.gangs import gang_completions, scheduled_groups
from berth.bench.process import SideProcess, apiserver_pid, cpu_seconds
from berth.bench.sides import Side
from berth.bench.workloads import MEASURED_NAMESPACE, Workload

POLL_SECONDS = 0.25
UNBOUND_SHOWN = 3
"""How many pods a trial that timed out names, with why they wait."""


class TrialError(RuntimeError):
    """A side exited early or did not bind every pod in time."""


@dataclass(frozen=True)
class Trial:
    """One side's run on one workload."""

    workload: str
    side: str
    repeat: int
    nodes: int
    init_pods: int
    pods: int
    bound: int
    start_to_first: float
    first_to_last: float
    start_to_last: float
    peak_rss_mib: float
    cycle_p99_ms: float
    cpu_seconds: float
    """CPU time the side's process used, start to last binding."""
    apiserver_cpu_seconds: float
    """CPU time the API server used over the same span (NaN when it was not found)."""
    gangs: int = 0
    """PodGroups of a gang workload (0: none)."""
    gangs_whole: int = 0
    """Gangs with every member bound by the end."""
    gang_first_to_last: float = float("nan")
    """Seconds from the first gang whole to the last."""
    groups_scheduled: int = 0
    """PodGroups whose PodGroupScheduled condition was True after the run."""
    group_attempts: int = 0
    """Scheduled pod group attempts in the side's metrics."""
    group_attempt_mean_ms: float = float("nan")
    group_attempt_p99_ms: float = float("nan")

    @property
    def throughput(self) -> float:
        """Bindings per second between the first and the last (intervals over time)."""
        return (self.bound - 1) / self.first_to_last if self.first_to_last > 0 else float("nan")

    @property
    def gang_throughput(self) -> float:
        """Gangs whole per second between the first and the last (intervals over time)."""
        span = self.gang_first_to_last
        return (self.gangs_whole - 1) / span if span > 0 else float("nan")

    @property
    def cpu_share(self) -> float:
        """Cores the side kept busy on average, start to last binding."""
        return self.cpu_seconds / self.start_to_last if self.start_to_last > 0 else float("nan")

    @property
    def apiserver_share(self) -> float:
        """Cores the API server kept busy on average over the same span."""
        span = self.start_to_last
        return self.apiserver_cpu_seconds / span if span > 0 else float("nan")

    @property
    def overall(self) -> float:
        """Bindings per second from the start of the process to the last binding."""
        return self.bound / self.start_to_last if self.start_to_last > 0 else float("nan")


def alternating(sides: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, side) in run order: the sides' order reversed on every other repeat, so no
    side always runs first on a fresh cluster or last on a tired one."""
    order: list[tuple[int, str]] = []
    for repeat in range(repeats):
        ordered = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        order.extend((repeat, side) for side in ordered)
    return order


def deadline_for(pods: int, gangs: int = 0) -> float:
    """Generous: a loaded 2-core machine binds well above 10 pods a second, and places
    well above 2 gangs a second (kube-scheduler writes each PodGroup's status in its
    scheduling loop: 8 to 20 gangs a second at 1000 nodes here)."""
    return max(180.0, pods / 10, gangs / 2)


async def side_until(
    process: SideProcess, ready: Callable[[], bool], seconds: float, missing: Callable[[], str]
) -> None:
    """Until ``ready()``: a TrialError when the side exits first, or after ``seconds``
    (``missing()`` says what did not happen)."""
    deadline = time.perf_counter() + seconds
    while not ready():
        if process.exited():
            raise TrialError(f"{process.side.label} exited; see {process.log_path}")
        if time.perf_counter() > deadline:
            raise TrialError(f"{process.side.label}: {missing()}")
        await asyncio.sleep(0.1)


GROUPS_DEADLINE = 60.0
"""How long after the last binding a gang side may take to mark its PodGroups scheduled."""


async def groups_scheduled(fixture: Fixture, gangs: int) -> int:
    """The PodGroups marked scheduled once all are, or at ``GROUPS_DEADLINE`` (the status
    write follows the bindings)."""
    deadline = time.monotonic() + GROUPS_DEADLINE
    while True:
        marked = scheduled_groups(await fixture.pod_groups())
        if marked >= gangs or time.monotonic() > deadline:
            return marked
        await asyncio.sleep(1.0)


async def run_trial(
    api: ApiClient,
    fixture: Fixture,
    side: Side,
    workload: Workload,
    *,
    repeat: int,
    nodes: int,
    init_pods: int,
    pods: int,
    say: Callable[[str], None],
) -> Trial:
    if workload.init_each_trial:  # clears the measured pods too
        await fixture.initial_pods(workload, init_pods, nodes, side.scheduler_name)
    else:
        await fixture.clear_pods((MEASURED_NAMESPACE,))
    gangs = workload.gangs(pods)
    if gangs:
        await fixture.clear_pod_groups()
    await fixture.nodes_ready()
    batch = fixture.next_batch()
    if gangs:
        await fixture.create_pod_groups([workload.pod_group(i, batch) for i in range(gangs)])
    measured = [workload.measured_pod(i, side.scheduler_name, batch) for i in range(pods)]
    await fixture.create_pods(measured)
    groups = {
        pod["metadata"]["name"]: pod["spec"]["schedulingGroup"]["podGroupName"]
        for pod in measured
        if "schedulingGroup" in pod["spec"]
    }
    of_gangs = f" in {gangs} gangs" if gangs else ""
    say(f"{workload.name} {side.label} #{repeat + 1}: {pods} pending pods{of_gangs}, starting it")
    process = SideProcess(side)
    server = apiserver_pid(str(api.configuration.host))
    async with BindWatch(api, pods) as watch:
        started = time.perf_counter()
        server_cpu = cpu_seconds(server) if server else float("nan")
        await process.start()
        try:
            deadline = started + deadline_for(pods, gangs)
            while not watch.done.is_set():
                if process.exited():
                    raise TrialError(f"{side.label} exited; see {process.log_path}")
                if time.perf_counter() > deadline:
                    left = await fixture.unbound(MEASURED_NAMESPACE, UNBOUND_SHOWN)
                    raise TrialError(
                        f"{side.label}: only {len(watch.bound)} of {pods} pods bound in time; "
                        f"unbound: {'; '.join(left) or 'none listed'}"
                    )
                await asyncio.sleep(POLL_SECONDS)
            used = process.cpu_seconds()
            server_used = (cpu_seconds(server) if server else float("nan")) - server_cpu
            text = await process.metrics()
            cycle_p99 = process.cycle_p99_ms(text)
            attempts, attempt_mean, attempt_p99 = process.group_attempts(text)
            rss = process.peak_rss_mib()
            marked = await groups_scheduled(fixture, gangs) if side.gangs and gangs else 0
        finally:
            await process.stop()
    times = sorted(watch.bound.values())
    whole = gang_completions(watch.bound, groups)
    trial = Trial(
        workload=workload.name,
        side=side.label,
        repeat=repeat,
        nodes=nodes,
        init_pods=init_pods,
        pods=pods,
        bound=len(times),
        start_to_first=times[0] - started,
        first_to_last=times[-1] - times[0],
        start_to_last=times[-1] - started,
        peak_rss_mib=rss,
        cycle_p99_ms=cycle_p99,
        cpu_seconds=used,
        apiserver_cpu_seconds=server_used,
        gangs=gangs,
        gangs_whole=len(whole),
        gang_first_to_last=whole[-1] - whole[0] if whole else float("nan"),
        groups_scheduled=marked,
        group_attempts=attempts,
        group_attempt_mean_ms=attempt_mean,
        group_attempt_p99_ms=attempt_p99,
    )
    if gangs:
        say(
            f"  {trial.gangs_whole} of {gangs} gangs whole, {trial.gang_throughput:.1f} gangs/s "
            f"first-to-last; {marked} PodGroups marked scheduled, {attempts} group attempts "
            f"(mean {attempt_mean:.1f} ms)"
        )
    say(
        f"  {trial.throughput:.1f} pods/s first-to-last, {trial.overall:.1f} from start; "
        f"peak {rss:.0f} MiB; {trial.cpu_share:.2f} cores, API server {trial.apiserver_share:.2f}"
    )
    return trial
