"""The benchmark's run order, sides, tables and CSV."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from berth.bench.arrival import schedule
from berth.bench.backlog import Trial, alternating, deadline_for
from berth.bench.report import (
    Conditions,
    ceiling_fraction,
    exceeds_ceiling,
    read_csv,
    table,
    write_csv,
)
from berth.bench.sides import (
    BERTH,
    KUBE_SCHEDULER,
    NOOP,
    berth_plugins,
    kube_disabled,
    kube_plugins,
    scheduler_configuration,
)
from berth.scheduler.plugins.registry import NOT_IMPLEMENTED

CONDITIONS = Conditions(
    commit="abc1234",
    dirty=True,
    cpus=2,
    memory_gib=24,
    load_average=0.5,
    qps=5000,
    burst=5000,
    command="berth bench --nodes 100",
)


def trial(side: str, repeat: int, first_to_last: float, nodes: int = 100) -> Trial:
    return Trial(
        workload="SchedulingBasic",
        side=side,
        repeat=repeat,
        nodes=nodes,
        init_pods=20,
        pods=201,
        bound=201,
        start_to_first=1.5,
        first_to_last=first_to_last,
        start_to_last=1.5 + first_to_last,
        peak_rss_mib=100.0,
        cycle_p99_ms=float("nan"),
        cpu_seconds=2.0,
        apiserver_cpu_seconds=3.0,
    )


def test_the_order_alternates_between_repeats() -> None:
    order = alternating([KUBE_SCHEDULER, BERTH, NOOP], 3)
    assert order == [
        (0, KUBE_SCHEDULER),
        (0, BERTH),
        (0, NOOP),
        (1, NOOP),
        (1, BERTH),
        (1, KUBE_SCHEDULER),
        (2, KUBE_SCHEDULER),
        (2, BERTH),
        (2, NOOP),
    ]


def test_throughput_counts_the_intervals_between_first_and_last_binding() -> None:
    one = trial(BERTH, 0, first_to_last=2.0)
    assert one.throughput == 100.0  # 200 intervals in 2 s
    assert one.overall == 201 / 3.5
    assert one.cpu_share == 2.0 / 3.5


def test_each_scheduler_is_a_fraction_of_the_no_op_binder() -> None:
    ceiling = [trial(NOOP, r, 1.0) for r in range(3)]  # 200 pods/s
    berth = [trial(BERTH, r, s) for r, s in enumerate((2.0, 4.0, 1.0))]  # 100, 50, 200
    assert ceiling_fraction(berth, ceiling) == 0.5
    assert not exceeds_ceiling(berth, ceiling)
    assert exceeds_ceiling([trial(BERTH, 0, 0.5)], ceiling)


def test_the_table_prints_median_and_spread_and_the_ratio() -> None:
    trials = [
        trial(KUBE_SCHEDULER, 0, 2.0),
        trial(BERTH, 0, 1.0),
        trial(NOOP, 0, 0.5),
        trial(KUBE_SCHEDULER, 1, 4.0),
        trial(BERTH, 1, 2.0),
        trial(NOOP, 1, 0.5),
    ]
    text = table(trials)
    assert "SchedulingBasic: 100 nodes, 20 initial pods (created bound), 201 pending pods" in text
    assert "75.0 (50.0-100.0)" in text  # kube-scheduler's median and range
    assert "ratio berth / kube-scheduler (median pods/s): 2.00" in text
    berth_line = next(line for line in text.splitlines() if line.startswith(BERTH + " "))
    assert " 0.38 " in berth_line  # 150 of the binder's 400 pods/s


def test_the_csv_gives_back_the_trials_and_their_conditions(tmp_path: Path) -> None:
    trials = [trial(KUBE_SCHEDULER, 0, 2.0), trial(BERTH, 1, 1.0, nodes=500)]
    path = tmp_path / "out" / "backlog.csv"
    write_csv(path, trials, CONDITIONS)
    read, header = read_csv(path)
    assert "commit abc1234 (uncommitted changes)" in header
    assert "berth bench --nodes 100" in header
    for before, after in zip(trials, read, strict=True):
        for field in dataclasses.fields(Trial):
            a, b = getattr(before, field.name), getattr(after, field.name)
            assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def test_kube_scheduler_runs_exactly_the_plugins_berth_has() -> None:
    assert set(kube_disabled()) == set(NOT_IMPLEMENTED)
    berth = set(berth_plugins()) - {"PlacementFields"}  # Berth's refusal of unhonoured fields
    assert set(kube_plugins()) == berth
    config = scheduler_configuration(KUBE_SCHEDULER, "/k", 1000, 2000)
    (profile,) = config["profiles"]
    disabled = {p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]}
    assert disabled == set(NOT_IMPLEMENTED)


def test_every_side_gets_the_same_client_qps_and_burst() -> None:
    for side in (KUBE_SCHEDULER, BERTH):
        config = scheduler_configuration(side, "/k", 1000, 2000)
        assert config["clientConnection"] == {"kubeconfig": "/k", "qps": 1000, "burst": 2000}
        assert config["leaderElection"] == {"leaderElect": False}


def test_arrivals_are_evenly_spaced_at_the_rate() -> None:
    assert schedule(4, 2.0) == [0.0, 0.5, 1.0, 1.5]


def test_a_curve_over_node_counts_is_drawn_beside_its_csv(tmp_path: Path) -> None:
    from berth.bench.plots import plot

    trials = [
        trial(side, 0, seconds, nodes=nodes)
        for nodes, seconds in ((100, 1.0), (500, 2.0))
        for side in (KUBE_SCHEDULER, BERTH, NOOP)
    ]
    drawn = plot(trials, "commit abc1234; berth bench --curve 100,500", tmp_path / "curve.png")
    assert drawn == tmp_path / "curve.png"
    assert drawn.read_bytes().startswith(b"\x89PNG")


def test_workloads_at_one_node_count_are_drawn_side_by_side(tmp_path: Path) -> None:
    from berth.bench.plots import plot

    trials = [
        dataclasses.replace(trial(side, 0, 1.0), workload=workload)
        for workload in ("SchedulingBasic", "TopologySpreading")
        for side in (KUBE_SCHEDULER, BERTH)
    ]
    assert plot(trials, "x", tmp_path / "w.png") == tmp_path / "w.png"
    assert plot(trials[:2], "x", tmp_path / "none.png") is None  # one workload, one size


def test_operator_lag_reads_the_api_server_s_whole_second_timestamps() -> None:
    from berth.bench.operatorlag import Lag, lag_table, wall_seconds

    assert wall_seconds("2026-11-23T08:00:05Z") - wall_seconds("2026-11-23T08:00:00Z") == 5.0
    lag = Lag("Reservation ttl -> Failed", 1000, tuple(i / 100 for i in range(101)))
    assert (lag.p50, lag.p99) == (0.5, 0.99)
    assert "Reservation ttl -> Failed                     1000      101   0.500   0.990" in (
        lag_table([lag])
    )


def test_what_could_not_be_measured_is_printed_with_what_was(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from berth.bench.suite import Outcome, publish

    outcome = Outcome(trials=[trial(BERTH, 0, 1.0)], failures=["2000 nodes: nodes not Ready"])
    publish(outcome, CONDITIONS, None)
    printed = capsys.readouterr().out
    assert printed.startswith("commit abc1234 (uncommitted changes)")
    assert "SchedulingBasic: 100 nodes" in printed
    assert printed.rstrip().endswith("not measured: 2000 nodes: nodes not Ready")


def gang_trial(side: str, repeat: int, first_to_last: float, **fields: object) -> Trial:
    base = dataclasses.replace(
        trial(side, repeat, first_to_last),
        workload="GangScheduling",
        init_pods=0,
        pods=300,
        bound=300,
        gangs=100,
        gangs_whole=100,
        gang_first_to_last=first_to_last,
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_gangs_per_second_count_the_intervals_between_the_first_and_last_gang_whole() -> None:
    assert gang_trial(BERTH, 0, 2.0).gang_throughput == 49.5  # 99 intervals in 2 s
    assert math.isnan(trial(BERTH, 0, 2.0).gang_throughput)  # no gangs


def test_a_gang_workload_s_table_has_its_gangs_beside_its_pods() -> None:
    marked = {"groups_scheduled": 100, "group_attempts": 100, "group_attempt_mean_ms": 4.0}
    trials = [
        gang_trial(KUBE_SCHEDULER, 0, 4.0, **marked),
        gang_trial(BERTH, 0, 2.0, **marked),
        gang_trial(NOOP, 0, 1.0),
        gang_trial(KUBE_SCHEDULER, 1, 2.0, **{**marked, "gangs_whole": 99}),
        gang_trial(BERTH, 1, 2.0, **{**marked, "group_attempt_mean_ms": 6.0}),
        gang_trial(NOOP, 1, 1.0),
    ]
    text = table(trials)
    lines = text.splitlines()
    assert "GangScheduling: 100 nodes, 0 initial pods (created bound), 300 pending pods" in text
    start = next(i for i, line in enumerate(lines) if line.startswith("gangs "))
    kube, berth, noop = lines[start + 1 : start + 4]
    # kube-scheduler: 99 intervals over 4 s, 98 over 2 s (a gang short in its second run).
    assert kube.split()[:4] == ["kube-scheduler", "36.9", "(24.8-49.0)", "99/100"]
    assert berth.split() == [
        *(BERTH, "49.5", "(49.5-49.5)", "100/100", "100/100"),
        *("100", "(100-100)", "5.00", "(4.00-6.00)", "n/a"),
    ]
    assert noop.split() == [NOOP, "99.0", "(99.0-99.0)", "100/100", "n/a", "n/a"]
    assert "ratio berth / kube-scheduler (median gangs/s): 1.34" in text
    assert "gangs " not in table([trial(BERTH, 0, 1.0)])


def test_a_csv_written_before_the_gang_columns_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    write_csv(path, [gang_trial(BERTH, 0, 2.0, group_attempts=100)], CONDITIONS)
    header, row = path.read_text().splitlines()[1:3]
    old = dict(zip(header.split(","), row.split(","), strict=True))
    kept = [name for name in old if not name.startswith(("gang", "group"))]
    path.write_text(",".join(kept) + "\n" + ",".join(old[name] for name in kept) + "\n")
    (read,), _ = read_csv(path)
    assert (read.gangs, read.group_attempts, read.bound) == (0, 0, 300)


def test_a_trial_s_deadline_leaves_room_for_a_slow_gang_side() -> None:
    assert deadline_for(9000) == 900.0  # 10 pods a second
    assert deadline_for(9000, gangs=3000) == 1500.0  # 2 gangs a second
    assert deadline_for(300, gangs=100) == 180.0
