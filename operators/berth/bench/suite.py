"""``berth bench``: the local cluster brought to each workload's nodes, and every side run
on the same pods, repeats alternating the order; the tables printed, the trials written to
a CSV (and, over several node counts, drawn as the scale curve)."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes_asyncio.client import ApiClient

from berth.bench import installed, operatorlag
from berth.bench.arrival import Latency, latency_table, run_latency
from berth.bench.backlog import Trial, TrialError, alternating, run_trial
from berth.bench.churn import Churn, churn_table, run_churn
from berth.bench.fixture import Fixture, FixtureError, install_crds
from berth.bench.operatorlag import Lag
from berth.bench.process import free_port
from berth.bench.report import Conditions, read_csv, table, write_csv
from berth.bench.sides import (
    BERTH,
    INSTALLED,
    KUBE_SCHEDULER,
    Side,
    compile_like_the_image,
    make_side,
)
from berth.bench.workloads import WORKLOADS, Workload
from berth.kube.client import client_from_kubeconfig
from berth.localcluster.build import Binaries


@dataclass(frozen=True)
class Plan:
    workloads: tuple[str, ...]
    node_counts: tuple[int, ...]
    pods: int | None
    """Pending pods per trial; None: the workload's proportion of the nodes."""
    sides: tuple[str, ...]
    repeats: int
    qps: float
    burst: int
    rate: float | None = None
    """Pods per second for the arrival-rate latency mode; None: the backlog."""
    bound_per_node: float | None = None
    """Pods already bound per node in every trial; None: the workload's proportion."""
    feature_objects: bool = True
    """The installed profile's kinds present (quotas, NodeMetrics, reservations); False:
    none of them, so that its plugins have nothing to decide."""
    churn: float | None = None
    """Seconds of churn per trial for the requeue comparison; None: not that mode."""


def say_plugins(
    say: Callable[[str], None], sides: Sequence[str], workloads: Sequence[str] = ()
) -> None:
    from berth.bench.sides import (
        BERTH_GANG_PLUGIN,
        KUBE_GANG_PLUGIN,
        berth_plugins,
        installed_plugins,
        kube_disabled,
        kube_plugins,
    )

    if KUBE_SCHEDULER in sides:
        say(f"kube-scheduler runs: {', '.join(kube_plugins())}")
        say(f"  (disabled there, as Berth lacks them: {', '.join(kube_disabled())})")
    if BERTH in sides:
        say(f"Berth runs: {', '.join(berth_plugins())}")
    if INSTALLED in sides:
        say(f"Berth's installed profile runs: {', '.join(installed_plugins())}")
    for name in workloads:
        gates = WORKLOADS[name].gates
        if gates and KUBE_SCHEDULER in sides:
            say(
                f"for {name}: kube-scheduler with the feature gates {', '.join(gates)}, "
                f"which add {KUBE_GANG_PLUGIN} to its default profile"
            )
        if gates and BERTH in sides:
            say(f"for {name}: Berth with {BERTH_GANG_PLUGIN} added to its default profile")


@dataclass
class Outcome:
    """What a plan measured, and what it could not (with why)."""

    trials: list[Trial] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    churns: list[Churn] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def run_plan(
    plan: Plan, kubeconfig: str, binaries: Binaries, say: Callable[[str], None]
) -> Outcome:
    """Every (nodes, workload) of the plan: backlog trials, or with ``plan.rate`` the
    arrival-rate latency, of every side, repeats alternating the order. A case that fails
    is reported and the larger node counts are skipped; what was measured is kept."""
    outcome = Outcome()
    async with await client_from_kubeconfig(kubeconfig) as api:
        fixture = Fixture(api, say)
        await fixture.namespaces()
        with tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp:
            # A gang workload's sides differ (its feature gates, the gang plugins on).
            sides = {
                name: {
                    label: make_side(
                        label,
                        kubeconfig=kubeconfig,
                        qps=plan.qps,
                        burst=plan.burst,
                        workdir=Path(tmp),
                        kube_scheduler=binaries["kube-scheduler"],
                        metrics_port=free_port(),
                        gates=WORKLOADS[name].gates,
                    )
                    for label in plan.sides
                }
                for name in plan.workloads
            }
            for nodes in plan.node_counts:
                try:
                    for name in plan.workloads:
                        await _run_case(
                            api, fixture, plan, sides[name], WORKLOADS[name], nodes, outcome, say
                        )
                except (TrialError, FixtureError) as err:
                    say(f"error at {nodes} nodes: {err}")
                    outcome.failures.append(f"{nodes} nodes: {err}")
                    break
        await fixture.clear_pods()
        if any(WORKLOADS[name].gang_size for name in plan.workloads):
            await fixture.clear_pod_groups()
    return outcome


async def _run_case(
    api: ApiClient,
    fixture: Fixture,
    plan: Plan,
    sides: dict[str, Side],
    workload: Workload,
    nodes: int,
    outcome: Outcome,
    say: Callable[[str], None],
) -> None:
    init, pods = workload.sizes(nodes, plan.pods, plan.bound_per_node)
    await fixture.nodes(workload, nodes)
    if workload.init_each_trial:
        await fixture.priority_class()  # each trial makes its initial pods (run_trial)
    else:
        await fixture.initial_pods(workload, init, nodes)
    objects = INSTALLED in plan.sides and plan.feature_objects
    if objects:
        await installed.create(fixture.writer, workload, nodes)
    for repeat, label in alternating(plan.sides, plan.repeats):
        if label == INSTALLED and objects:
            await installed.refresh(fixture.writer, workload, nodes)
        if plan.churn is not None:
            outcome.churns.append(
                await run_churn(
                    api,
                    fixture,
                    sides[label],
                    workload,
                    repeat=repeat,
                    nodes=nodes,
                    seconds=plan.churn,
                    say=say,
                )
            )
        elif plan.rate is not None:
            outcome.latencies.append(
                await run_latency(
                    api,
                    fixture,
                    sides[label],
                    workload,
                    repeat=repeat,
                    nodes=nodes,
                    init_pods=init,
                    pods=pods,
                    rate=plan.rate,
                    say=say,
                )
            )
        else:
            outcome.trials.append(
                await run_trial(
                    api,
                    fixture,
                    sides[label],
                    workload,
                    repeat=repeat,
                    nodes=nodes,
                    init_pods=init,
                    pods=pods,
                    say=say,
                )
            )


def publish(outcome: Outcome, conditions: Conditions, csv_path: Path | None) -> None:
    """Print the tables; with ``csv_path``, write the CSV and its picture beside it."""
    trials = outcome.trials
    sys.stdout.write(conditions.show() + "\n")
    if outcome.latencies:
        sys.stdout.write(latency_table(outcome.latencies) + "\n")
    if outcome.churns:
        sys.stdout.write(churn_table(outcome.churns) + "\n")
    if trials:
        sys.stdout.write(table(trials) + "\n")
    for failure in outcome.failures:
        sys.stdout.write(f"not measured: {failure}\n")
    if not trials:
        return
    if csv_path is not None:
        write_csv(csv_path, trials, conditions)
        sys.stdout.write(f"wrote {csv_path}\n")
        replot(csv_path)


def replot(csv_path: Path) -> None:
    """Draw the picture of a CSV written by a run (``.png`` beside it), if it has one."""
    from berth.bench.plots import plot

    trials, header = read_csv(csv_path)
    picture = plot(trials, header, csv_path.with_suffix(".png"))
    if picture is not None:
        sys.stdout.write(f"wrote {picture}\n")


def run(plan: Plan, kubeconfig: str, binaries: Binaries, say: Callable[[str], None]) -> Outcome:
    say_plugins(say, plan.sides, plan.workloads)
    install_crds(kubeconfig)
    compile_like_the_image()
    return asyncio.run(run_plan(plan, kubeconfig, binaries, say))


def operator_lag(kubeconfig: str, nodes: int, say: Callable[[str], None]) -> list[Lag]:
    """The operators' delays with ``nodes`` of SchedulingBasic's nodes in the cluster."""
    install_crds(kubeconfig)
    compile_like_the_image()

    async def measure_lag() -> list[Lag]:
        async with await client_from_kubeconfig(kubeconfig) as api:
            fixture = Fixture(api, say)
            await fixture.namespaces()
            await fixture.nodes(WORKLOADS["SchedulingBasic"], nodes)
            lags = await operatorlag.measure(api, fixture, kubeconfig, nodes, say)
            await fixture.clear_pods()
            return lags

    return asyncio.run(measure_lag())
