"""`berth bench`'s flags: what a command line asks the benchmark for."""

from __future__ import annotations

import pytest

from berth.cli import parser


def test_the_defaults_are_a_backlog_of_every_side_three_times() -> None:
    args = parser().parse_args(["bench"])
    assert (args.nodes, args.pods, args.repeats, args.curve, args.rate) == (
        1000,
        None,
        3,
        None,
        None,
    )
    assert args.sides == ["kube-scheduler", "berth", "berth-installed", "noop-binder"]
    assert (args.qps, args.burst) == (5000.0, 5000)


def test_curve_workloads_and_sides_are_read_as_lists() -> None:
    args = parser().parse_args(
        [
            "bench",
            "--curve",
            "500,1000,2000",
            "--workload",
            "TopologySpreading",
            "--workload",
            "SchedulingNodeAffinity",
            "--sides",
            "berth,noop-binder",
        ]
    )
    assert args.curve == [500, 1000, 2000]
    assert args.workload == ["TopologySpreading", "SchedulingNodeAffinity"]
    assert args.sides == ["berth", "noop-binder"]


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--sides", "berth,volcano"],
        ["bench", "--curve", "500,lots"],
        ["bench", "--curve", "0"],
        ["bench", "--workload", "SchedulingEverything"],
    ],
)
def test_unknown_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(argv)


def test_memory_points_are_ten_bound_pods_a_node_unless_told() -> None:
    from berth.bench.memory import points

    args = parser().parse_args(["bench", "--memory", "--curve", "1000,5000"])
    assert args.memory
    assert points(args.curve, args.pods) == [(1000, 10000), (5000, 50000)]
    args = parser().parse_args(["bench", "--memory", "--nodes", "500", "--pods", "2000"])
    assert points([args.nodes], args.pods) == [(500, 2000)]


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["--pods", "3001"], "GangScheduling needs whole gangs: 3001 pods is not a multiple of 3"),
        (["--rate", "100"], "--rate does not create PodGroups: GangScheduling is measured"),
        (["--cycle-only"], "--cycle-only does not create PodGroups"),
    ],
)
def test_what_cannot_measure_the_gang_workload_is_refused_by_name(
    argv: list[str], refusal: str
) -> None:
    from berth.cli import _bench_refusal

    args = parser().parse_args(["bench", "--workload", "GangScheduling", *argv])
    assert refusal in (_bench_refusal(args) or "")
    # The same options with whole gangs, or for another workload, are taken.
    assert _bench_refusal(parser().parse_args(["bench", "--workload", "GangScheduling"])) is None
    assert (
        _bench_refusal(
            parser().parse_args(["bench", "--pods", "6000", "--workload", "GangScheduling"])
        )
        is None
    )
    assert _bench_refusal(parser().parse_args(["bench", *argv])) is None


@pytest.mark.parametrize("workload", ["PreemptionBasic", "Unschedulable"])
@pytest.mark.parametrize("option", [["--rate", "100"], ["--cycle-only"]])
def test_a_workload_making_its_initial_pods_per_trial_is_measured_on_a_backlog_only(
    workload: str, option: list[str]
) -> None:
    from berth.cli import _bench_refusal

    args = parser().parse_args(["bench", "--workload", workload, *option])
    assert f"{option[0]} does not make initial pods per trial: {workload}" in (
        _bench_refusal(args) or ""
    )
    assert _bench_refusal(parser().parse_args(["bench", "--workload", workload])) is None


def test_bench_exits_2_before_touching_a_cluster_when_refused() -> None:
    from berth.cli import main

    assert main(["bench", "--workload", "GangScheduling", "--pods", "10"]) == 2
