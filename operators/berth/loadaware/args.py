"""``LoadAwareSchedulingArgs`` and the node annotation, named, defaulted and validated as
Koordinator does, so its configurations load unchanged and mean the same.

Defaulting follows Koordinator's: ``usageThresholds`` and ``resourceWeights`` take the
defaults only when left empty (a partial map is used as given: ``{cpu: 50}`` checks cpu
only), ``estimatedScalingFactors`` gains the defaults of the resources it leaves out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from berth.api.duration import DurationError, parse_duration
from berth.podresources import CPU, MEMORY

THRESHOLDS_ANNOTATION = "scheduling.koordinator.sh/usage-thresholds"
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")
DEFAULT_WEIGHTS = {CPU: 1, MEMORY: 1}
DEFAULT_THRESHOLDS = {CPU: 65, MEMORY: 95}
DEFAULT_FACTORS = {CPU: 85, MEMORY: 70}


def _percentages(values: dict[str, int], low: int = 0) -> dict[str, int]:
    for name, value in values.items():
        if not low <= value <= 100:
            raise ValueError(f"{name}: {value} is not a percentage ({low}-100)")
    return values


def _aggregation_type(value: str) -> str:
    if value and value not in AGGREGATION_TYPES:
        raise ValueError(f"{value!r} is not one of {', '.join(AGGREGATION_TYPES)}")
    return value


def _seconds(text: str | None) -> float:
    """A Go duration in seconds; empty or absent is 0 (Koordinator: the longest window)."""
    if not text:
        return 0.0
    try:
        return parse_duration(text).total_seconds()
    except DurationError as err:
        raise ValueError(str(err)) from err


class _Args(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class AggregatedArgs(_Args):
    """Percentile usage (NodeMetric ``aggregatedNodeUsages``) for the filter and the score."""

    usage_thresholds: dict[str, int] = Field(default_factory=dict)
    usage_aggregation_type: str = ""
    usage_aggregated_duration: str | None = None
    score_aggregation_type: str = ""
    score_aggregated_duration: str | None = None

    @field_validator("usage_thresholds")
    @classmethod
    def _thresholds(cls, values: dict[str, int]) -> dict[str, int]:
        return _percentages(values)

    @field_validator("usage_aggregation_type", "score_aggregation_type")
    @classmethod
    def _type(cls, value: str) -> str:
        return _aggregation_type(value)

    @field_validator("usage_aggregated_duration", "score_aggregated_duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        _seconds(value)
        return value

    @property
    def filters(self) -> bool:
        """Koordinator filters by percentiles only with both thresholds and a type."""
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)

    @property
    def scores(self) -> bool:
        return bool(self.score_aggregation_type)

    @property
    def score_window(self) -> float:
        """Seconds; 0: the longest window reported."""
        return _seconds(self.score_aggregated_duration)


class LoadAwareArgs(_Args):
    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = Field(default=180, gt=0)
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    dominant_resource_weight: int = Field(default=0, ge=0, le=100)
    usage_thresholds: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    prod_usage_thresholds: dict[str, int] = Field(default_factory=dict)
    score_according_prod_usage: bool = False
    estimated_scaling_factors: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_FACTORS))
    aggregated: AggregatedArgs = Field(default_factory=AggregatedArgs)

    @field_validator("usage_thresholds", "prod_usage_thresholds")
    @classmethod
    def _thresholds(cls, values: dict[str, int]) -> dict[str, int]:
        return _percentages(values)

    @field_validator("estimated_scaling_factors", "resource_weights")
    @classmethod
    def _positive(cls, values: dict[str, int]) -> dict[str, int]:
        return _percentages(values, low=1)

    @classmethod
    def parse(cls, args: Mapping[str, Any]) -> LoadAwareArgs:
        """The plugin's args; a wrong name or value raises ValueError naming it."""
        given = dict(args)
        if not given.get("usageThresholds"):
            given.pop("usageThresholds", None)
        if not given.get("resourceWeights"):
            given.pop("resourceWeights", None)
            if given.get("dominantResourceWeight"):
                given["resourceWeights"] = {}  # Koordinator: the dominant resource alone
        factors = given.get("estimatedScalingFactors")
        if isinstance(factors, dict):
            given["estimatedScalingFactors"] = {**DEFAULT_FACTORS, **factors}
        try:
            parsed = cls.model_validate(given)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{where}: {first['msg']}") from err
        missing = sorted(set(parsed.resource_weights) - set(parsed.estimated_scaling_factors))
        if missing:
            raise ValueError(
                f"resourceWeights: {', '.join(missing)} has no estimatedScalingFactors entry"
            )
        return parsed

    def node_profile(self) -> ThresholdProfile:
        """The thresholds of a node without its own annotation."""
        aggregated = None
        if self.aggregated.filters:
            aggregated = AggregatedThresholds(
                dict(self.aggregated.usage_thresholds),
                self.aggregated.usage_aggregation_type,
                _seconds(self.aggregated.usage_aggregated_duration),
            )
        return ThresholdProfile(
            dict(self.usage_thresholds), dict(self.prod_usage_thresholds), aggregated
        )


@dataclass(frozen=True)
class AggregatedThresholds:
    thresholds: dict[str, int]
    aggregation_type: str
    duration: float  # seconds; 0: the longest window reported


@dataclass(frozen=True)
class ThresholdProfile:
    """What the filter checks on one node (Koordinator's ``CustomUsageThresholds``)."""

    usage: dict[str, int]
    prod: dict[str, int] = field(default_factory=dict)
    aggregated: AggregatedThresholds | None = None

    @property
    def checks_prod(self) -> bool:
        """Prod pods are checked against the prod pods' usage: some prod threshold is
        set (all of them 0 count as none, as in Koordinator)."""
        return any(self.prod.values())

    def checks(self, prod: bool) -> bool:
        """Whether the filter checks a pod of this class at all: Koordinator skips the
        node, expiry included, when every threshold the pod is held to is 0."""
        if prod and self.checks_prod:
            return True
        held = self.aggregated.thresholds if self.aggregated is not None else self.usage
        return any(held.values())


class ThresholdsAnnotationError(ValueError):
    """The node's usage-thresholds annotation cannot be read."""


class _AggregatedAnnotation(_Args):
    usage_thresholds: dict[str, int] = Field(default_factory=dict)
    usage_aggregation_type: str = ""
    usage_aggregated_duration: str | None = None

    @field_validator("usage_thresholds")
    @classmethod
    def _thresholds(cls, values: dict[str, int]) -> dict[str, int]:
        return _percentages(values)

    @field_validator("usage_aggregation_type")
    @classmethod
    def _type(cls, value: str) -> str:
        return _aggregation_type(value)

    @field_validator("usage_aggregated_duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        _seconds(value)
        return value


class _Annotation(_Args):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    usage_thresholds: dict[str, int] = Field(default_factory=dict)
    prod_usage_thresholds: dict[str, int] = Field(default_factory=dict)
    aggregated_usage: _AggregatedAnnotation | None = None

    @field_validator("usage_thresholds", "prod_usage_thresholds")
    @classmethod
    def _thresholds(cls, values: dict[str, int]) -> dict[str, int]:
        return _percentages(values)


def node_profile(annotations: Mapping[str, str], default: ThresholdProfile) -> ThresholdProfile:
    """The node's annotation in place of the configured thresholds, field by field as
    Koordinator reads it: a map or aggregated block the annotation sets replaces the
    configured one whole; what it leaves out (or an aggregated block without thresholds
    or type) keeps the configured one.

    Raises ThresholdsAnnotationError for a malformed annotation; the caller reports it and
    uses ``default`` (one node's typo must not block it).
    """
    text = annotations.get(THRESHOLDS_ANNOTATION)
    if not text:
        return default
    try:
        parsed = _Annotation.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        raise ThresholdsAnnotationError(
            f"annotation {THRESHOLDS_ANNOTATION} is not "
            '{"usageThresholds": {"<resource>": <percent 0-100>}, "prodUsageThresholds": …, '
            f'"aggregatedUsage": …}}: {text[:200]!r}; the configured thresholds apply'
        ) from err
    aggregated = default.aggregated
    custom = parsed.aggregated_usage
    if custom is not None and custom.usage_thresholds and custom.usage_aggregation_type:
        aggregated = AggregatedThresholds(
            dict(custom.usage_thresholds),
            custom.usage_aggregation_type,
            _seconds(custom.usage_aggregated_duration),
        )
    return ThresholdProfile(
        parsed.usage_thresholds or default.usage,
        parsed.prod_usage_thresholds or default.prod,
        aggregated,
    )
