"""colocation-config: parsing, and the merge order defaults < cluster < first matching node
config."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth.api.nodemetric import NodeMetricCollectPolicy
from berth.slo.colocation import (
    KEY,
    ColocationConfig,
    ColocationConfigError,
    from_configmap,
    parse,
)

DEFAULTS = {
    "aggregateDurationSeconds": 300,
    "reportIntervalSeconds": 60,
    "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
    "nodeMemoryCollectPolicy": "usageWithoutPageCache",
}


def configmap(config: dict[str, Any] | str) -> dict[str, Any]:
    text = config if isinstance(config, str) else json.dumps(config)
    return {"metadata": {"name": "slo-controller-config"}, "data": {KEY: text}}


def test_missing_configmap_or_key_means_defaults() -> None:
    assert from_configmap(None).policy_for({}).to_dict() == DEFAULTS
    assert from_configmap({"data": {"other": "x"}}).policy_for({}).to_dict() == DEFAULTS
    assert from_configmap({"metadata": {}}).policy_for({}).to_dict() == DEFAULTS
    assert NodeMetricCollectPolicy().to_dict() == DEFAULTS


def test_cluster_values_override_defaults_field_by_field() -> None:
    config = from_configmap(
        configmap({"metricReportIntervalSeconds": 20, "metricAggregatePolicy": {"durations": []}})
    )
    assert config.policy_for({"any": "node"}).to_dict() == {
        **DEFAULTS,
        "reportIntervalSeconds": 20,
        "nodeAggregatePolicy": {"durations": []},
    }


CONFIG = {
    "enable": False,  # ignored: the policy applies without it
    "cpuReclaimThresholdPercent": 60,  # another Koordinator key: ignored
    "metricAggregateDurationSeconds": 600,
    "metricReportIntervalSeconds": 30,
    "metricMemoryCollectPolicy": "usageWithPageCache",
    "nodeConfigs": [
        {
            "name": "gpu",
            "nodeSelector": {"matchLabels": {"pool": "gpu"}},
            "metricReportIntervalSeconds": 10,
        },
        {
            "name": "gpu-a100",  # also matches gpu nodes, but the first match wins
            "nodeSelector": {"matchLabels": {"pool": "gpu", "model": "a100"}},
            "metricReportIntervalSeconds": 5,
            "metricAggregateDurationSeconds": 60,
        },
        {
            "name": "batch",
            "nodeSelector": {
                "matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]
            },
            "metricAggregatePolicy": {"durations": ["1m"]},
            "metricMemoryCollectPolicy": "usageWithHotPageCache",
        },
        {"name": "no-selector-selects-nothing", "metricReportIntervalSeconds": 1},
    ],
}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (
            {"pool": "web"},
            {
                **DEFAULTS,
                "aggregateDurationSeconds": 600,
                "reportIntervalSeconds": 30,
                "nodeMemoryCollectPolicy": "usageWithPageCache",
            },
        ),
        (
            {"pool": "gpu", "model": "a100"},
            {
                **DEFAULTS,
                "aggregateDurationSeconds": 600,
                "reportIntervalSeconds": 10,
                "nodeMemoryCollectPolicy": "usageWithPageCache",
            },
        ),
        (
            {"pool": "batch"},
            {
                **DEFAULTS,
                "aggregateDurationSeconds": 600,
                "reportIntervalSeconds": 30,
                "nodeAggregatePolicy": {"durations": ["1m"]},
                "nodeMemoryCollectPolicy": "usageWithHotPageCache",
            },
        ),
    ],
)
def test_first_matching_node_config_wins(labels: dict[str, str], expected: dict[str, Any]) -> None:
    assert from_configmap(configmap(CONFIG)).policy_for(labels).to_dict() == expected


def test_empty_selector_selects_every_node() -> None:
    config = parse(
        json.dumps({"nodeConfigs": [{"nodeSelector": {}, "metricReportIntervalSeconds": 7}]})
    )
    assert config.policy_for({}).report_interval_seconds == 7


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"metricReportIntervalSeconds": 30', "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"metricReportIntervalSeconds": 0}', "metricReportIntervalSeconds"),
        ('{"metricMemoryCollectPolicy": "everything"}', "metricMemoryCollectPolicy"),
        ('{"metricAggregatePolicy": {"durations": ["5 minutes"]}}', "durations"),
        (
            '{"nodeConfigs": [{"nodeSelector": {"matchExpressions": [{"key": "a"}]}}]}',
            "nodeConfigs.0.nodeSelector.matchExpressions.0.operator",
        ),
    ],
)
def test_invalid_config_is_an_error_saying_where(text: str, says: str) -> None:
    with pytest.raises(ColocationConfigError, match=says):
        from_configmap(configmap(text))


def test_configs_compare_by_value() -> None:
    assert parse(json.dumps(CONFIG)) == parse(json.dumps(CONFIG))
    assert parse(json.dumps(CONFIG)) != ColocationConfig()
