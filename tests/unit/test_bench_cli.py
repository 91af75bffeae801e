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
