"""What a benchmark prints and writes: the conditions it ran under, a table per workload
(median and spread of the repeats, each scheduler as a fraction of the no-op binder; for a
gang workload, its gangs too), and a CSV with one row per trial from which the tables and
plots can be made again."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from berth.bench.backlog import Trial
from berth.bench.sides import BERTH, KUBE_SCHEDULER, NOOP, SIDES
from berth.bench.stats import Spread
from berth.bench.workloads import WORKLOADS

TRIAL_FIELDS = [f.name for f in dataclasses.fields(Trial)]
CSV_FIELDS = [
    *TRIAL_FIELDS,
    "throughput",
    "overall",
    "cpu_share",
    "apiserver_share",
    "gang_throughput",
]


@dataclass(frozen=True)
class Conditions:
    """Where and how a benchmark ran: printed above every table."""

    commit: str
    dirty: bool
    cpus: int
    memory_gib: float
    load_average: float
    qps: float | None
    """The client QPS every side was given; None when no side talks to an API server."""
    burst: int
    command: str

    def show(self) -> str:
        tree = " (uncommitted changes)" if self.dirty else ""
        client = (
            f"; client qps {self.qps:g} burst {self.burst} on every side"
            if self.qps is not None
            else ""
        )
        return (
            f"commit {self.commit}{tree}; {self.cpus} cpus, {self.memory_gib:.0f} GiB; "
            f"load average {self.load_average:.1f} at start{client}\ncommand: {self.command}"
        )


def conditions(repo: Path, qps: float | None, burst: int, command: str) -> Conditions:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=False
        ).stdout.strip()

    memory_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    return Conditions(
        commit=git("rev-parse", "--short", "HEAD") or "unknown",
        dirty=bool(git("status", "--porcelain", "--untracked-files=no")),
        cpus=os.cpu_count() or 0,
        memory_gib=memory_kib / 2**20,
        load_average=os.getloadavg()[0],
        qps=qps,
        burst=burst,
        command=command,
    )


def _groups(trials: Iterable[Trial]) -> dict[tuple[str, int], dict[str, list[Trial]]]:
    groups: dict[tuple[str, int], dict[str, list[Trial]]] = {}
    for trial in trials:
        groups.setdefault((trial.workload, trial.nodes), {}).setdefault(trial.side, []).append(
            trial
        )
    return groups


def ceiling_fraction(side: Sequence[Trial], ceiling: Sequence[Trial]) -> float:
    """The side's median first-to-last throughput over the no-op binder's."""
    mine = Spread.of([t.throughput for t in side]).median
    top = Spread.of([t.throughput for t in ceiling]).median
    return mine / top if top > 0 else float("nan")


def exceeds_ceiling(side: Sequence[Trial], ceiling: Sequence[Trial]) -> bool:
    """True when the side's slowest run beat the binder's fastest: the ceiling is not one."""
    if not side or not ceiling:
        return False
    return min(t.throughput for t in side) > max(t.throughput for t in ceiling)


def table(trials: Sequence[Trial]) -> str:
    """A table per (workload, nodes): median (min-max) of the repeats for every side."""
    out: list[str] = []
    for (workload, nodes), by_side in _groups(trials).items():
        any_trial = next(iter(by_side.values()))[0]
        runs = max(len(v) for v in by_side.values())
        kind = WORKLOADS.get(workload)
        made = "created bound"
        if kind is not None and kind.init_each_trial:
            made = "pending, made for each run" if kind.init_pending else made + " for each run"
        out.append(
            f"\n{workload}: {nodes} nodes, {any_trial.init_pods} initial pods ({made}), "
            f"{any_trial.pods} pending pods; median (min-max) of {runs} run(s)"
        )
        out.append(
            f"{'side':<15}{'pods/s first-last':>24}{'pods/s from start':>24}"
            f"{'start-first s':>20}{'of ceiling':>11}{'peak MiB':>18}{'p99 cycle ms':>18}"
            f"{'cores':>18}{'API server cores':>18}"
        )
        ceiling = by_side.get(NOOP, [])
        for side in [s for s in SIDES if s in by_side]:
            rows = by_side[side]
            fraction = ceiling_fraction(rows, ceiling) if side != NOOP and ceiling else math.nan
            out.append(
                f"{side:<15}"
                f"{Spread.of([t.throughput for t in rows]).show():>24}"
                f"{Spread.of([t.overall for t in rows]).show():>24}"
                f"{Spread.of([t.start_to_first for t in rows]).show(2):>20}"
                f"{'' if math.isnan(fraction) else f'{fraction:.2f}':>11}"
                f"{Spread.of([t.peak_rss_mib for t in rows]).show(0):>18}"
                f"{Spread.of([t.cycle_p99_ms for t in rows]).show(1):>18}"
                f"{Spread.of([t.cpu_share for t in rows]).show(2):>18}"
                f"{Spread.of([t.apiserver_share for t in rows]).show(2):>18}"
            )
            if side != NOOP and exceeds_ceiling(rows, ceiling):
                out.append(f"  warning: {side} beat the no-op binder in every run")
        if KUBE_SCHEDULER in by_side and BERTH in by_side:
            kube = Spread.of([t.throughput for t in by_side[KUBE_SCHEDULER]]).median
            berth = Spread.of([t.throughput for t in by_side[BERTH]]).median
            if kube > 0:
                out.append(f"ratio berth / kube-scheduler (median pods/s): {berth / kube:.2f}")
        if any_trial.gangs:
            out.extend(gang_table(by_side))
    return "\n".join(out)


def _fewest(rows: Sequence[Trial], count: Callable[[Trial], int]) -> str:
    """The fewest of the runs, of the gangs: ``998/1000``."""
    return f"{min(count(t) for t in rows)}/{rows[0].gangs}"


def gang_table(by_side: dict[str, list[Trial]]) -> list[str]:
    """A gang workload's gangs: gangs whole per second, the fewest gangs whole and marked
    scheduled in any run, and the group attempts' count and times from the side's metrics."""
    out = [
        f"{'gangs':<15}{'gangs/s first-last':>24}{'whole (fewest)':>16}"
        f"{'marked scheduled':>18}{'group attempts':>20}{'attempt mean ms':>20}"
        f"{'attempt p99 ms':>20}"
    ]
    for side in [s for s in SIDES if s in by_side]:
        rows = by_side[side]
        gang_side = any(t.group_attempts for t in rows)
        out.append(
            f"{side:<15}"
            f"{Spread.of([t.gang_throughput for t in rows]).show():>24}"
            f"{_fewest(rows, lambda t: t.gangs_whole):>16}"
            f"{_fewest(rows, lambda t: t.groups_scheduled) if gang_side else '':>18}"
            f"{Spread.of([float(t.group_attempts) for t in rows]).show(0) if gang_side else '':>20}"
            f"{Spread.of([t.group_attempt_mean_ms for t in rows]).show(2):>20}"
            f"{Spread.of([t.group_attempt_p99_ms for t in rows]).show(2):>20}"
        )
    if KUBE_SCHEDULER in by_side and BERTH in by_side:
        kube = Spread.of([t.gang_throughput for t in by_side[KUBE_SCHEDULER]]).median
        berth = Spread.of([t.gang_throughput for t in by_side[BERTH]]).median
        if kube > 0:
            out.append(f"ratio berth / kube-scheduler (median gangs/s): {berth / kube:.2f}")
    return out


def write_csv(path: Path, trials: Sequence[Trial], conditions: Conditions) -> None:
    """One row per trial, the conditions in a leading comment line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        handle.write(f"# {conditions.show().replace(chr(10), '; ')}\n")
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for trial in trials:
            row: dict[str, object] = dataclasses.asdict(trial)
            row.update(
                throughput=trial.throughput,
                overall=trial.overall,
                cpu_share=trial.cpu_share,
                apiserver_share=trial.apiserver_share,
                gang_throughput=trial.gang_throughput,
            )
            writer.writerow(row)


def read_csv(path: Path) -> tuple[list[Trial], str]:
    """The trials a :func:`write_csv` file holds, and its conditions line (a file written
    before a column was added gives that field its default)."""
    types = {f.name: f.type for f in dataclasses.fields(Trial)}
    with path.open(newline="") as handle:
        every = list(handle)
    lines = [line for line in every if not line.startswith("#")]
    header = " ".join(line[1:].strip() for line in every if line.startswith("#"))
    trials = []
    for row in csv.DictReader(lines):
        values: dict[str, object] = {}
        for name in TRIAL_FIELDS:
            kind = types[name]
            raw = row.get(name)
            if raw is None:
                continue
            values[name] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        trials.append(Trial(**values))  # type: ignore[arg-type]
    return trials, header
