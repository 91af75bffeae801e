"""The ``colocation-config`` key of ConfigMap ``slo-controller-config``: NodeMetric collect
policies for the whole cluster and for groups of nodes (Koordinator's ``ColocationCfg``).

A node's policy is the built-in defaults, overridden by the cluster-wide values, overridden
by the FIRST ``nodeConfigs`` entry whose ``nodeSelector`` matches the node's labels. Only
fields that are set override. Koordinator's other colocation keys (``enable``, reclaim
thresholds, …) are accepted and ignored; ``enable`` in particular is not required, because
a policy that silently does nothing until a flag is set surprises users.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from pydantic import Field, ValidationError

from berth.api.base import ApiModel
from berth.api.duration import Duration
from berth.api.meta import LabelSelector
from berth.api.nodemetric import AggregatePolicy, NodeMemoryCollectPolicy, NodeMetricCollectPolicy

__all__ = [
    "CONFIGMAP",
    "KEY",
    "CollectStrategy",
    "ColocationConfig",
    "ColocationConfigError",
    "NodeConfig",
    "from_configmap",
    "parse",
]

CONFIGMAP: Final = "slo-controller-config"
KEY: Final = "colocation-config"


class ColocationConfigError(ValueError):
    """The ConfigMap's ``colocation-config`` is not valid JSON or not a valid policy."""


class MetricAggregatePolicy(ApiModel):
    """Aggregation windows as written in the config (absent means "not overridden")."""

    durations: list[Duration] | None = None


class CollectStrategy(ApiModel):
    """The collect-policy fields of one level of the config; unset fields do not override."""

    metric_aggregate_duration_seconds: int | None = Field(default=None, ge=1)
    metric_report_interval_seconds: int | None = Field(default=None, ge=1)
    metric_aggregate_policy: MetricAggregatePolicy | None = None
    metric_memory_collect_policy: NodeMemoryCollectPolicy | None = None

    def over(self, policy: NodeMetricCollectPolicy) -> NodeMetricCollectPolicy:
        """``policy`` with this level's set fields written over it."""
        changes: dict[str, Any] = {}
        if self.metric_aggregate_duration_seconds is not None:
            changes["aggregate_duration_seconds"] = self.metric_aggregate_duration_seconds
        if self.metric_report_interval_seconds is not None:
            changes["report_interval_seconds"] = self.metric_report_interval_seconds
        durations = (self.metric_aggregate_policy or MetricAggregatePolicy()).durations
        if durations is not None:
            changes["node_aggregate_policy"] = AggregatePolicy(durations=list(durations))
        if self.metric_memory_collect_policy is not None:
            changes["node_memory_collect_policy"] = self.metric_memory_collect_policy
        return policy.model_copy(update=changes)


class NodeConfig(CollectStrategy):
    """Overrides for the nodes a selector picks.

    Without ``nodeSelector`` the entry selects no node (as in Koordinator); an empty
    selector (``{}``) selects every node.
    """

    name: str | None = None
    node_selector: LabelSelector | None = None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.node_selector is not None and self.node_selector.matches(labels)


class ColocationConfig(CollectStrategy):
    """The whole ``colocation-config``: cluster-wide values and per-node-group overrides."""

    node_configs: list[NodeConfig] = Field(default_factory=list)

    def policy_for(self, labels: Mapping[str, str]) -> NodeMetricCollectPolicy:
        """The collect policy of a node with these labels."""
        policy = self.over(NodeMetricCollectPolicy())
        chosen = next((c for c in self.node_configs if c.selects(labels)), None)
        return chosen.over(policy) if chosen is not None else policy


def parse(text: str) -> ColocationConfig:
    """The config from its JSON text; raises ColocationConfigError saying what is wrong."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as err:
        raise ColocationConfigError(f"{KEY} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ColocationConfigError(f"{KEY} must be a JSON object, not {type(data).__name__}")
    try:
        return ColocationConfig.from_dict(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise ColocationConfigError(f"{KEY} is invalid: {problems}") from err


def from_configmap(configmap: Mapping[str, Any] | None) -> ColocationConfig:
    """The config a ConfigMap holds; a missing ConfigMap or key means the defaults."""
    text = ((configmap or {}).get("data") or {}).get(KEY)
    return ColocationConfig() if text is None else parse(text)
