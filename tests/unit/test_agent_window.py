"""The sample window: history bound, coverage, means and percentiles with exact numbers."""

from __future__ import annotations

import pytest

from berth.agent.window import Sample, Usage, Window, statistics, system_of
from berth.api.nodemetric import AggregationType as Agg

MIB = 1024 * 1024


def sample(t: int, cpu: float, memory: float, pods: dict[str, Usage] | None = None) -> Sample:
    return Sample(time=float(t), since=float(t - 1), node=Usage(cpu, memory), pods=pods or {})


def filled(history: float, count: int = 10) -> Window:
    """Samples at t = 1..count, one a second, cpu t cores and t*100 MiB."""
    window = Window(history)
    for t in range(1, count + 1):
        window.add(sample(t, float(t), t * 100.0 * MIB))
    return window


def test_percentiles_over_the_last_seconds() -> None:
    stats = filled(history=10).aggregate(5)  # samples t = 6..10
    assert stats is not None
    cpu = {kind: round(usage.cpu, 6) for kind, usage in stats.items()}
    # Linear interpolation between the nearest ranks: rank = q * (n - 1).
    assert cpu == {Agg.AVG: 8.0, Agg.P50: 8.0, Agg.P90: 9.6, Agg.P95: 9.8, Agg.P99: 9.96}
    assert stats[Agg.P90].memory == pytest.approx(960 * MIB)


def test_statistics_of_an_uneven_series() -> None:
    values = [Usage(cpu, 0.0) for cpu in (0.5, 4.0, 1.0, 0.5, 2.0, 0.0, 8.0)]
    stats = statistics(values)
    # sorted: 0, .5, .5, 1, 2, 4, 8
    assert stats[Agg.AVG].cpu == pytest.approx(16.0 / 7)
    assert stats[Agg.P50].cpu == 1.0
    assert stats[Agg.P90].cpu == pytest.approx(4.0 + 0.4 * 4.0)  # rank 5.4
    assert stats[Agg.P95].cpu == pytest.approx(4.0 + 0.7 * 4.0)  # rank 5.7
    assert stats[Agg.P99].cpu == pytest.approx(4.0 + 0.94 * 4.0)  # rank 5.94


def test_history_is_bounded_and_windows_are_bounded_by_it() -> None:
    window = filled(history=4)
    assert len(window) == 4  # t = 7..10, covering (6, 10]
    assert window.covered(4) == 4
    stats = window.aggregate(4)
    assert stats is not None
    assert stats[Agg.AVG].cpu == 8.5
    # An 8 s window is half covered by the 4 s kept: computed over what there is.
    longer = window.aggregate(8)
    assert longer is not None
    assert longer[Agg.AVG].cpu == 8.5
    assert window.covered(8) == 4
    assert window.aggregate(9) is None  # less than half of it


def test_cold_start_a_window_is_reported_once_half_covered() -> None:
    window = filled(history=60, count=3)  # running for 3 seconds: (0, 3]
    assert window.aggregate(6) is not None
    assert window.aggregate(7) is None
    window.add(sample(4, 1.0, 0.0))
    assert window.aggregate(7) is not None
    assert window.aggregate(8) is not None
    assert window.aggregate(9) is None
    assert Window(60).aggregate(1) is None


def test_shrinking_the_history_drops_old_samples() -> None:
    window = filled(history=10)
    window.set_history(2)
    assert len(window) == 2


def test_node_and_pod_means_over_the_last_seconds() -> None:
    window = Window(60)
    a = Usage(1.0, 100.0)
    window.add(sample(1, 2.0, 1000.0, {"a": a}))
    window.add(sample(2, 4.0, 2000.0, {"a": Usage(3.0, 300.0), "b": Usage(1.0, 10.0)}))
    window.add(sample(3, 6.0, 3000.0, {"b": Usage(0.5, 20.0)}))
    assert window.mean(2) == Usage(5.0, 2500.0)  # t = 2, 3
    assert window.mean(300) == Usage(4.0, 2000.0)  # all there is
    assert window.pod_usages(2) == {"a": Usage(3.0, 300.0), "b": Usage(0.75, 15.0)}
    assert window.pod_usages(10)["a"] == Usage(2.0, 200.0)
    assert Window(5).mean(5) is None


def test_system_usage_is_the_node_minus_its_pods_sample_by_sample() -> None:
    window = Window(60)
    window.add(sample(1, 2.0, 1000.0, {"a": Usage(1.0, 100.0)}))  # 1.0, 900
    window.add(sample(2, 4.0, 2000.0, {"a": Usage(3.0, 300.0), "b": Usage(2.0, 10.0)}))  # 0
    window.add(sample(3, 6.0, 3000.0))  # 6.0, 3000
    assert system_of(window.recent(1)[0]) == Usage(6.0, 3000.0)
    assert window.mean(3, system_of) == Usage(7.0 / 3, (900.0 + 1690.0 + 3000.0) / 3)
    stats = window.aggregate(3, system_of)
    assert stats is not None
    assert stats[Agg.P50] == Usage(1.0, 1690.0)
