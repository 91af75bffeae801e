"""LoadAwareSchedulingArgs and the node annotation read as Koordinator reads them: names,
defaults (filled only where Koordinator fills them), validation that names the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.loadaware.args import (
    AggregatedThresholds,
    LoadAwareArgs,
    ThresholdProfile,
    ThresholdsAnnotationError,
    node_profile,
)
from berth.loadaware.estimate import estimate

MI = 1024 * 1024
ANNOTATION = "scheduling.koordinator.sh/usage-thresholds"


def test_defaults_are_the_designs() -> None:
    args = LoadAwareArgs.parse({})
    assert args.filter_expired_node_metrics is True
    assert args.node_metric_expiration_seconds == 180
    assert args.enable_schedule_when_node_metrics_expired is False
    assert args.usage_thresholds == {"cpu": 65, "memory": 95}
    assert args.prod_usage_thresholds == {}
    assert args.score_according_prod_usage is False
    assert args.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert args.resource_weights == {"cpu": 1, "memory": 1}
    assert args.dominant_resource_weight == 0
    assert not args.aggregated.filters
    assert not args.aggregated.scores


def test_a_partial_threshold_map_is_used_as_given() -> None:
    # Koordinator fills usageThresholds only when it is empty: no memory threshold here.
    assert LoadAwareArgs.parse({"usageThresholds": {"cpu": 50}}).usage_thresholds == {"cpu": 50}
    assert LoadAwareArgs.parse({"usageThresholds": {}}).usage_thresholds == {
        "cpu": 65,
        "memory": 95,
    }
    assert LoadAwareArgs.parse({"resourceWeights": {"cpu": 3}}).resource_weights == {"cpu": 3}


def test_scaling_factors_gain_the_defaults_they_leave_out() -> None:
    args = LoadAwareArgs.parse({"estimatedScalingFactors": {"cpu": 50, "nvidia.com/gpu": 100}})
    assert args.estimated_scaling_factors == {"cpu": 50, "memory": 70, "nvidia.com/gpu": 100}


def test_a_dominant_weight_alone_has_no_resource_weights() -> None:
    assert LoadAwareArgs.parse({"dominantResourceWeight": 2}).resource_weights == {}


@pytest.mark.parametrize(
    ("args", "word"),
    [
        ({"usageThreshold": {"cpu": 50}}, "usageThreshold"),
        ({"prodUsageIncludeSys": True}, "prodUsageIncludeSys"),
        ({"usageThresholds": {"cpu": 150}}, "usageThresholds"),
        ({"prodUsageThresholds": {"cpu": -1}}, "prodUsageThresholds"),
        ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds"),
        ({"resourceWeights": {"cpu": 0}}, "resourceWeights"),
        ({"estimatedScalingFactors": {"cpu": 0}}, "estimatedScalingFactors"),
        ({"dominantResourceWeight": 101}, "dominantResourceWeight"),
        ({"resourceWeights": {"nvidia.com/gpu": 1}}, "nvidia.com/gpu"),
        ({"aggregated": {"usageAggregationType": "p75"}}, "usageAggregationType"),
        ({"aggregated": {"scoreAggregatedDuration": "5 minutes"}}, "scoreAggregatedDuration"),
        ({"aggregated": {"usageThreshold": {"cpu": 1}}}, "usageThreshold"),
    ],
)
def test_bad_args_are_named(args: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        LoadAwareArgs.parse(args)


def test_aggregated_filters_only_with_thresholds_and_a_type() -> None:
    half = LoadAwareArgs.parse({"aggregated": {"usageThresholds": {"cpu": 60}}})
    assert half.node_profile().aggregated is None
    full = LoadAwareArgs.parse(
        {
            "aggregated": {
                "usageThresholds": {"cpu": 60},
                "usageAggregationType": "p95",
                "usageAggregatedDuration": "5m",
                "scoreAggregationType": "p90",
                "scoreAggregatedDuration": "10m",
            }
        }
    )
    assert full.node_profile().aggregated == AggregatedThresholds({"cpu": 60}, "p95", 300.0)
    assert full.aggregated.scores
    assert full.aggregated.score_window == 600.0


DEFAULT = ThresholdProfile({"cpu": 65, "memory": 95}, {"cpu": 70})


def test_the_annotation_replaces_a_map_whole_and_keeps_what_it_leaves_out() -> None:
    annotation = {ANNOTATION: '{"usageThresholds": {"cpu": 30}}'}
    profile = node_profile(annotation, DEFAULT)
    assert profile.usage == {"cpu": 30}  # as Koordinator: memory is not checked on this node
    assert profile.prod == {"cpu": 70}
    assert profile.aggregated is None


def test_the_annotation_takes_prod_and_aggregated_thresholds() -> None:
    text = (
        '{"prodUsageThresholds": {"cpu": 40}, "aggregatedUsage": {"usageThresholds": '
        '{"cpu": 50}, "usageAggregationType": "p99", "usageAggregatedDuration": "10m"}}'
    )
    profile = node_profile({ANNOTATION: text}, DEFAULT)
    assert profile.usage == {"cpu": 65, "memory": 95}
    assert profile.prod == {"cpu": 40}
    assert profile.aggregated == AggregatedThresholds({"cpu": 50}, "p99", 600.0)
    # An aggregated block without a type is ignored, as Koordinator does.
    partial = '{"aggregatedUsage": {"usageThresholds": {"cpu": 50}}}'
    assert node_profile({ANNOTATION: partial}, DEFAULT).aggregated is None


@pytest.mark.parametrize(
    "text",
    [
        "{cpu: 30",
        '{"usageThresholds": {"cpu": 300}}',
        '{"aggregatedUsage": {"usageAggregationType": "p42"}}',
    ],
)
def test_a_malformed_annotation_is_an_error(text: str) -> None:
    with pytest.raises(ThresholdsAnnotationError, match="configured thresholds apply"):
        node_profile({ANNOTATION: text}, DEFAULT)


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        ({"cpu": 1000, "memory": 1000 * MI}, {}, {"cpu": 850, "memory": 700 * MI}),
        # max(request, limit) x factor, capped at the limit
        ({"cpu": 1000}, {"cpu": 4000}, {"cpu": 3400, "memory": 200 * MI}),
        ({"cpu": 1000}, {"cpu": 1000}, {"cpu": 850, "memory": 200 * MI}),
        ({}, {}, {"cpu": 250, "memory": 200 * MI}),
    ],
)
def test_estimate(
    requests: dict[str, int], limits: dict[str, int], expected: dict[str, int]
) -> None:
    assert estimate(requests, limits, {"cpu": 85, "memory": 70}) == expected


def test_estimate_covers_every_resource_with_a_factor() -> None:
    assert estimate({"nvidia.com/gpu": 2}, {}, {"cpu": 85, "nvidia.com/gpu": 50}) == {
        "cpu": 250,
        "nvidia.com/gpu": 1,
    }
