"""The churn's schedule: one seeded sequence, the same for every side, whose node changes
take a node away and bring it back, never overlapping on one node."""

from __future__ import annotations

import itertools

import pytest

from berth.bench.churn import (
    ARRIVALS_PER_NODE,
    AWAY_SECONDS,
    Action,
    Churn,
    churn_schedule,
    churn_table,
    late_pods,
)
from berth.cli import _bench_refusal, parser


def test_the_schedule_is_the_same_for_every_side_and_differs_by_seed() -> None:
    assert churn_schedule(30, 100) == churn_schedule(30, 100)
    assert churn_schedule(30, 100) != churn_schedule(30, 100, seed=7)


def test_pods_arrive_steadily_more_than_the_nodes_hold_when_full() -> None:
    schedule = churn_schedule(60, 100)
    arrivals = schedule.arrivals
    assert len(arrivals) == 60 * 100 * ARRIVALS_PER_NODE
    assert [a.at for a in arrivals] == sorted(a.at for a in arrivals)
    assert {a.cpu for a in arrivals} == {"500m", "1", "2", "3"}
    # CPU-seconds asked for a second, against 4 CPUs a node: above what 100 nodes hold.
    cores = {"500m": 0.5, "1": 1.0, "2": 2.0, "3": 3.0}
    demand = sum(cores[a.cpu] * a.lifetime for a in arrivals) / 60
    assert demand > 1.1 * 4 * 100
    assert 0.15 < sum(a.tolerates for a in arrivals) / len(arrivals) < 0.35


def test_every_node_taken_away_comes_back_and_no_two_changes_overlap() -> None:
    schedule = churn_schedule(60, 100)
    assert {c.action for c in schedule.changes} == set(Action)
    back = {Action.DELETE: Action.ADD, Action.TAINT: Action.UNTAINT}
    by_node: dict[int, list[tuple[float, Action]]] = {}
    for change in schedule.changes:
        by_node.setdefault(change.node, []).append((change.at, change.action))
    for changes in by_node.values():
        for (at, away), (back_at, returned) in zip(changes[::2], changes[1::2], strict=True):
            assert back[away] is returned
            assert back_at == pytest.approx(at + AWAY_SECONDS)
        starts = [at for at, _ in changes[::2]]
        assert all(b - a > AWAY_SECONDS for a, b in itertools.pairwise(starts))
    # About two changes taken a second at 100 nodes.
    away = [c for c in schedule.changes if c.action in (Action.DELETE, Action.TAINT)]
    assert 60 <= len(away) <= 120


def test_the_table_gives_attempts_per_binding_by_side() -> None:
    rows = [
        Churn("kube-scheduler", 0, 100, 60, 1500, 1000, 2500, 1500, 0),
        Churn("berth", 0, 100, 60, 1500, 1200, 2400, 1200, 0),
        Churn("kube-scheduler", 1, 100, 60, 1500, 1000, 3000, 2000, 0),
    ]
    text = churn_table(rows)
    assert "2.75 (2.50-3.00)" in text
    assert "2.00" in text


def test_churn_is_refused_with_the_noop_binder_or_another_mode() -> None:
    assert "noop-binder" in (_bench_refusal(parser().parse_args(["bench", "--churn", "60"])) or "")
    both = ["bench", "--churn", "60", "--sides", "kube-scheduler,berth"]
    assert _bench_refusal(parser().parse_args(both)) is None
    assert "--rate" in (_bench_refusal(parser().parse_args([*both, "--rate", "5"])) or "")
    assert "--csv" in (_bench_refusal(parser().parse_args([*both, "--csv", "c.csv"])) or "")
    for other in (["--memory"], ["--collections"], ["--numa"], ["--replot", "c.csv"]):
        assert other[0] in (_bench_refusal(parser().parse_args([*both, *other])) or "")
    assert "positive" in (_bench_refusal(parser().parse_args(["bench", "--churn", "0"])) or "")


def test_late_pods_count_the_unbound_and_the_slow_created_early_enough() -> None:
    created = {"fast": 0.0, "slow": 1.0, "never": 2.0, "too-recent": 55.0}
    bound = {"fast": 3.0, "slow": 12.5, "too-recent": 70.0}
    assert late_pods(created, bound, end=60.0) == 2
    rows = [Churn("berth", 0, 100, 60, 1500, 1200, 2400, 1200, 0, late=7)]
    assert "late >10s" in churn_table(rows)
