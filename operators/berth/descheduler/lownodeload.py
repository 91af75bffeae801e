"""``LowNodeLoadArgs``: Koordinator's names and defaults; what Berth does not honour is
refused by name (``extra="forbid"``, and ``useDeviationThresholds: true``)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import ConfigDict, Field, field_validator, model_validator

from berth.api.base import ApiModel
from berth.api.duration import Duration, parse_duration
from berth.api.meta import LabelSelector
from berth.migration.args import Namespaces
from berth.podresources import CPU, MEMORY

__all__ = [
    "LoadAnomalyCondition",
    "LowNodeLoadArgs",
    "LowNodeLoadNodePool",
    "LowNodeLoadPodSelector",
    "Pool",
]


class _Args(ApiModel):
    model_config = ConfigDict(extra="forbid")


Thresholds = dict[str, float]
"""Resource name to a percentage of the node's allocatable."""


def _percentages(values: Thresholds | None) -> Thresholds | None:
    for name, value in (values or {}).items():
        if not 0 <= value <= 100:
            raise ValueError(f"{name}: {value} is not a percentage (0-100)")
    return values


class LoadAnomalyCondition(_Args):
    """How many rounds in a row a node must be hot before pods move off it."""

    timeout: Duration = "1m"
    """A hot streak older than this (no hot round since) starts again."""
    consecutive_abnormalities: int = Field(default=5, ge=0)
    """Hot rounds in a row that make a node anomalous (0 means the default, 5)."""
    consecutive_normalities: int = Field(default=3, ge=0)
    """Normal rounds in a row that clear the streak."""

    def abnormalities(self) -> int:
        return self.consecutive_abnormalities or 5

    def window(self) -> timedelta:
        return parse_duration(self.timeout)


class LowNodeLoadPodSelector(_Args):
    """Pods that may be moved, by label."""

    name: str | None = None
    selector: LabelSelector | None = None


class _Thresholds(_Args):
    use_deviation_thresholds: bool = False
    high_thresholds: Thresholds = Field(default_factory=dict)
    low_thresholds: Thresholds = Field(default_factory=dict)
    resource_weights: dict[str, int] | None = None
    anomaly_condition: LoadAnomalyCondition | None = None

    @field_validator("high_thresholds", "low_thresholds")
    @classmethod
    def _check(cls, values: Thresholds) -> Thresholds:
        return _percentages(values) or {}

    @model_validator(mode="after")
    def _supported(self) -> _Thresholds:
        if self.use_deviation_thresholds:
            raise ValueError("useDeviationThresholds: true is not supported by Berth")
        for name, low in self.low_thresholds.items():
            high = self.high_thresholds.get(name)
            if high is not None and low > high:
                raise ValueError(f"lowThresholds.{name} {low} is above highThresholds {high}")
        return self


class LowNodeLoadNodePool(_Thresholds):
    """Nodes with thresholds of their own."""

    name: str | None = None
    node_selector: LabelSelector | None = None


class LowNodeLoadArgs(_Thresholds):
    """The LowNodeLoad plugin's arguments."""

    paused: bool = False
    """Do nothing while true."""
    dry_run: bool = False
    """Decide and log, create no PodMigrationJob."""
    number_of_nodes: int = Field(default=0, ge=0)
    """Act only when more than this many nodes are idle."""
    node_metric_expiration_seconds: int = Field(default=180, gt=0)
    """A node whose NodeMetric is older is left out altogether."""
    evictable_namespaces: Namespaces | None = None
    """Only pods of these namespaces move (usage of all pods still counts)."""
    node_selector: LabelSelector | None = None
    """Only these nodes are balanced."""
    pod_selectors: list[LowNodeLoadPodSelector] | None = None
    """Only pods matching one of these move."""
    node_fit: bool = True
    """Move only pods that fit an idle node (node selector, affinity, taints, requests)."""
    prod_high_thresholds: Thresholds | None = None
    """As highThresholds, for the usage of prod pods (priority class koord-prod) only."""
    prod_low_thresholds: Thresholds | None = None
    """As lowThresholds, for the usage of prod pods only."""
    detector_cache_timeout: Duration = "5m"
    """A node's hot streak is forgotten when it has not been seen for this long."""
    node_pools: list[LowNodeLoadNodePool] | None = None
    """Node pools with thresholds of their own; without any, all nodes form one pool."""

    @field_validator("prod_high_thresholds", "prod_low_thresholds")
    @classmethod
    def _prod(cls, values: Thresholds | None) -> Thresholds | None:
        return _percentages(values)

    def pools(self) -> list[Pool]:
        """The pools, with the top-level settings where a pool leaves one out."""
        if not self.node_pools:
            return [self._pool(None, self)]
        return [self._pool(pool.node_selector, pool, pool.name) for pool in self.node_pools]

    def _pool(
        self, selector: LabelSelector | None, source: _Thresholds, name: str | None = None
    ) -> Pool:
        high = source.high_thresholds or self.high_thresholds
        low = source.low_thresholds or self.low_thresholds
        weights = {CPU: 1, MEMORY: 1, **{r: 1 for r in (*high, *low)}}
        for resource, weight in (source.resource_weights or self.resource_weights or {}).items():
            if weight > 0:
                weights[resource] = weight
        return Pool(
            name=name or "default",
            node_selector=selector,
            high=high,
            low=low,
            prod_high=self.prod_high_thresholds or {},
            prod_low=self.prod_low_thresholds or {},
            weights=weights,
            anomaly=source.anomaly_condition or self.anomaly_condition or LoadAnomalyCondition(),
        )


class Pool(ApiModel):
    """One pool's effective settings."""

    name: str
    node_selector: LabelSelector | None
    high: Thresholds
    low: Thresholds
    prod_high: Thresholds
    prod_low: Thresholds
    weights: dict[str, int]
    anomaly: LoadAnomalyCondition
