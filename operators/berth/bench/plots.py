"""The scale curve as pictures: throughput (from the first binding, and from the start), p99
scheduling-cycle time and peak memory of every side against the number of nodes, medians
with the runs' range as error bars; or, at one node count, every workload's throughput side
by side. Drawn from the trials of a CSV, with the CSV's conditions line (commit, machine,
command) under each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from berth.bench.backlog import Trial
from berth.bench.sides import SIDES
from berth.bench.stats import Spread

PANELS: tuple[tuple[str, Callable[[Trial], float]], ...] = (
    ("pods/s, first to last binding", lambda t: t.throughput),
    ("pods/s, start (list included) to last binding", lambda t: t.overall),
    ("p99 scheduling cycle, ms", lambda t: t.cycle_p99_ms),
    ("peak resident memory, MiB", lambda t: t.peak_rss_mib),
)


def _series(
    trials: Sequence[Trial], side: str, value: Callable[[Trial], float]
) -> tuple[list[int], list[Spread]]:
    by_nodes: dict[int, list[float]] = {}
    for trial in trials:
        if trial.side == side:
            by_nodes.setdefault(trial.nodes, []).append(value(trial))
    nodes = sorted(by_nodes)
    return nodes, [Spread.of(by_nodes[n]) for n in nodes]


def _node_axis(axis: Any, curve: Sequence[Trial]) -> None:
    """Nodes along the bottom on a log scale (the counts double), each count marked; with
    the bound pods under each when they grow too."""
    bound = {t.nodes: t.init_pods for t in curve}
    counts = sorted(bound)
    axis.set_xscale("log")
    axis.minorticks_off()
    if len(set(bound.values())) > 1:
        axis.set_xticks(counts, [f"{n}\n{bound[n]:,} bound" for n in counts], fontsize=7)
        axis.set_xlabel("nodes, and pods bound before the trial")
    else:
        axis.set_xticks(counts, [str(n) for n in counts])
        axis.set_xlabel("nodes")


def plot(trials: Sequence[Trial], footer: str, path: Path) -> Path | None:
    """Draw ``trials`` into ``path``: the scale curve when they span several node counts,
    else the workloads side by side when there are several; None when neither."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = sorted({t.workload for t in trials})
    curve = [t for t in trials if t.workload == workloads[0]] if trials else []
    if len({t.nodes for t in curve}) > 1:
        fig, axes = plt.subplots(1, len(PANELS), figsize=(20, 4.5))
        for axis, (title, value) in zip(axes, PANELS, strict=True):
            for side in SIDES:
                nodes, spreads = _series(curve, side, value)
                if not nodes or all(s.runs == 0 for s in spreads):
                    continue
                medians = [s.median for s in spreads]
                errors = [
                    [s.median - s.low for s in spreads],
                    [s.high - s.median for s in spreads],
                ]
                axis.errorbar(nodes, medians, yerr=errors, marker="o", capsize=3, label=side)
            axis.set_title(title)
            _node_axis(axis, curve)
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            if axis.get_legend_handles_labels()[0]:
                axis.legend()
            else:
                axis.text(0.5, 0.5, "not measured", ha="center", transform=axis.transAxes)
        fig.suptitle(f"{curve[0].workload} on a backlog, Berth beside kube-scheduler")
        fig.text(0.01, 0.01, footer, fontsize=7, wrap=True)
        fig.tight_layout(rect=(0, 0.05, 1, 0.95))
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
    if len(workloads) > 1:
        largest = max(t.nodes for t in trials)
        chosen = [t for t in trials if t.nodes == largest]
        present = [side for side in SIDES if any(t.side == side for t in chosen)]
        fig, axis = plt.subplots(figsize=(12, 4.5))
        width = 0.8 / len(present)
        for offset, side in enumerate(present):
            spreads = [
                Spread.of([t.throughput for t in chosen if t.workload == w and t.side == side])
                for w in workloads
            ]
            xs = [i + offset * width for i in range(len(workloads))]
            axis.bar(
                xs,
                [s.median for s in spreads],
                width,
                yerr=[
                    [s.median - s.low for s in spreads],
                    [s.high - s.median for s in spreads],
                ],
                capsize=3,
                label=side,
            )
        middle = width * (len(present) - 1) / 2
        axis.set_xticks([i + middle for i in range(len(workloads))], workloads, fontsize=8)
        axis.set_ylabel("pods/s, first to last binding")
        axis.set_title(f"scheduler_perf workloads at {largest} nodes")
        axis.legend()
        axis.grid(axis="y", alpha=0.3)
        fig.text(0.01, 0.01, footer, fontsize=7, wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
    return None
