"""The benchmark's statistics: percentiles, median with spread, histogram quantiles."""

from __future__ import annotations

import math

import pytest

from berth.bench.stats import (
    Spread,
    histogram_buckets,
    histogram_mean,
    histogram_quantile,
    percentile,
)

ATTEMPTS = "scheduler_scheduling_attempt_duration_seconds"


def _series(result: str, counts: list[int]) -> list[str]:
    bounds = ["0.001", "0.002", "0.004", "+Inf"]
    return [
        f'{ATTEMPTS}_bucket{{le="{le}",profile="berth-scheduler",result="{result}"}} {count}'
        for le, count in zip(bounds, counts, strict=True)
    ]


METRICS = "\n".join(
    [
        f"# HELP {ATTEMPTS} x",
        f"# TYPE {ATTEMPTS} histogram",
        *_series("scheduled", [10, 90, 100, 100]),
        *_series("unschedulable", [0, 0, 500, 500]),
        'scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 7',
    ]
)


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51.0  # rank round(0.5 * 99) = 50 (0-based)
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 0.0) == 1.0
    assert math.isnan(percentile([], 0.5))


def test_spread_gives_the_median_and_the_range_of_the_runs() -> None:
    odd = Spread.of([310.0, 290.0, 330.0])
    assert (odd.median, odd.low, odd.high, odd.runs) == (310.0, 290.0, 330.0, 3)
    assert odd.show() == "310.0 (290.0-330.0)"
    even = Spread.of([1.0, 2.0, 4.0, 10.0])
    assert even.median == 3.0
    assert Spread.of([5.0]).show() == "5.0"


def test_spread_leaves_out_runs_that_measured_nothing() -> None:
    spread = Spread.of([float("nan"), 2.0, 4.0])
    assert (spread.median, spread.runs) == (3.0, 2)
    assert Spread.of([float("nan")]).show() == "n/a"


def test_histogram_buckets_are_summed_over_the_matching_series_only() -> None:
    scheduled = histogram_buckets(METRICS, ATTEMPTS, {"result": "scheduled"})
    assert scheduled == [(0.001, 10.0), (0.002, 90.0), (0.004, 100.0), (math.inf, 100.0)]
    every = histogram_buckets(METRICS, ATTEMPTS)
    assert every[-1] == (math.inf, 600.0)
    # Only the le label counts, not a label whose name ends in "le" (profile).
    assert histogram_buckets(METRICS, "scheduler_scheduling_algorithm_duration_seconds") == [
        (0.001, 7.0)
    ]


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    buckets = [(0.001, 10.0), (0.002, 90.0), (0.004, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.0015)  # rank 50 of 10..90
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.0038)  # rank 99 of 90..100
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.0005)  # first bucket from 0


def test_histogram_quantile_in_the_open_bucket_is_the_highest_bound() -> None:
    assert histogram_quantile(0.99, [(0.001, 1.0), (math.inf, 10.0)]) == 0.001
    assert math.isnan(histogram_quantile(0.99, [(0.001, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(0.99, []))


GROUP = "scheduler_podgroup_scheduling_attempt_duration_seconds"
GROUP_METRICS = "\n".join(
    [
        f'{GROUP}_bucket{{profile="default-scheduler",result="scheduled",le="+Inf"}} 4',
        f'{GROUP}_sum{{profile="default-scheduler",result="scheduled"}} 0.02',
        f'{GROUP}_count{{profile="default-scheduler",result="scheduled"}} 4',
        f'{GROUP}_sum{{profile="default-scheduler",result="unschedulable"}} 9',
        f'{GROUP}_count{{profile="default-scheduler",result="unschedulable"}} 1',
        f"{GROUP}_other_sum 100",
        "scheduler_podgroup_scheduling_algorithm_duration_seconds_sum 50",
    ]
)


def test_histogram_mean_is_sum_over_count_of_the_matching_series() -> None:
    # scheduler_perf's Average: 4 scheduled attempts, 20 ms in all.
    count, mean = histogram_mean(GROUP_METRICS, GROUP, {"result": "scheduled"})
    assert (count, mean) == (4, pytest.approx(0.005))
    assert histogram_mean(GROUP_METRICS, GROUP) == (5, pytest.approx(9.02 / 5))
    count, mean = histogram_mean(GROUP_METRICS, GROUP, {"result": "error"})
    assert count == 0
    assert math.isnan(mean)


def test_counter_total_sums_the_named_counter_over_its_series() -> None:
    from berth.bench.stats import counter_total

    text = "\n".join(
        [
            "# TYPE scheduler_schedule_attempts_total counter",
            'scheduler_schedule_attempts_total{profile="a",result="scheduled"} 7',
            'scheduler_schedule_attempts_total{profile="a",result="unschedulable"} 12',
            'scheduler_schedule_attempts_total{profile="a",result="error"} 1',
            'scheduler_schedule_attempts_totally{result="scheduled"} 100',
            'scheduler_podgroup_schedule_attempts_total{result="scheduled"} 50',
        ]
    )
    assert counter_total(text, "scheduler_schedule_attempts_total") == 20
    assert counter_total(text, "scheduler_schedule_attempts_total", {"result": "error"}) == 1
    assert counter_total("", "scheduler_schedule_attempts_total") == 0
