"""``LoadAwareSchedulingArgs``, named and defaulted as in the design (Koordinator's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from berth import log
from berth.podresources import CPU, MEMORY

logger = log.get(__name__)

# Koordinator arguments Berth accepts and does not act on (yet), so its configurations load.
ACCEPTED_UNUSED = frozenset(
    {
        "prodUsageThresholds",
        "scoreAccordingProdUsage",
        "aggregated",
        "enableScheduleWhenNodeMetricsExpired",
    }
)
THRESHOLDS_ANNOTATION = "scheduling.koordinator.sh/usage-thresholds"


class LoadAwareArgs(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = Field(default=180, gt=0)
    resource_weights: dict[str, int] = Field(default_factory=lambda: {CPU: 1, MEMORY: 1})
    usage_thresholds: dict[str, int] = Field(default_factory=lambda: {CPU: 65, MEMORY: 95})
    estimated_scaling_factors: dict[str, int] = Field(default_factory=lambda: {CPU: 85, MEMORY: 70})

    @field_validator("usage_thresholds", "estimated_scaling_factors")
    @classmethod
    def _percent(cls, values: dict[str, int]) -> dict[str, int]:
        for name, value in values.items():
            if not 0 <= value <= 100:
                raise ValueError(f"{name}: {value} is not a percentage (0-100)")
        return values

    @field_validator("resource_weights")
    @classmethod
    def _weights(cls, values: dict[str, int]) -> dict[str, int]:
        for name, value in values.items():
            if value < 0:
                raise ValueError(f"{name}: weight {value} is negative")
        return values

    @classmethod
    def parse(cls, args: Mapping[str, Any]) -> LoadAwareArgs:
        """The plugin's args; a wrong name or value raises ValueError naming it."""
        known = {k: v for k, v in args.items() if k not in ACCEPTED_UNUSED}
        for name in sorted(set(args) - set(known)):
            logger.info("argument accepted and not used", namespace=None, name=name)
        # Koordinator fills in the defaults of the resources a user's map leaves out.
        merged = dict(known)
        defaults = cls()
        for key, default in (
            ("usageThresholds", defaults.usage_thresholds),
            ("estimatedScalingFactors", defaults.estimated_scaling_factors),
            ("resourceWeights", defaults.resource_weights),
        ):
            if isinstance(known.get(key), dict):
                merged[key] = {**default, **known[key]}
        try:
            return cls.model_validate(merged)
        except ValidationError as err:
            raise ValueError(str(err)) from err


class ThresholdsAnnotationError(ValueError):
    """The node's usage-thresholds annotation cannot be read."""


def node_thresholds(annotations: Mapping[str, str], default: dict[str, int]) -> dict[str, int]:
    """The node's annotation overrides the configured thresholds, resource by resource.

    Raises ThresholdsAnnotationError for a malformed annotation; the caller reports it and
    uses ``default`` (one node's typo must not block it).
    """
    text = annotations.get(THRESHOLDS_ANNOTATION)
    if not text:
        return default
    try:
        parsed = json.loads(text).get("usageThresholds") or {}
        custom = {str(k): int(v) for k, v in parsed.items()}
    except (ValueError, AttributeError, TypeError) as err:
        raise ThresholdsAnnotationError(
            f"annotation {THRESHOLDS_ANNOTATION} is not "
            f'{{"usageThresholds": {{"<resource>": <percent>}}}}: {text[:200]!r}; '
            "the configured thresholds apply"
        ) from err
    for name, value in custom.items():
        if not 0 <= value <= 100:
            raise ThresholdsAnnotationError(
                f"annotation {THRESHOLDS_ANNOTATION}: {name} {value} is not a percentage "
                "(0-100); the configured thresholds apply"
            )
    return {**default, **custom}
