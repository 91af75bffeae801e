"""ElasticQuota (``scheduling.sigs.k8s.io/v1alpha1``, namespaced): a namespace's guaranteed
(``min``) and ceiling (``max``) resources, wire-compatible with scheduler-plugins.

Upstream's CRD leaves ``min`` and ``max`` untyped; here both are quantity maps and the API
server rejects a quota whose min exceeds its max for any resource named in both.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from pydantic import ConfigDict, Field

from berth.api.base import ApiModel
from berth.api.meta import Condition, KubeObject
from berth.api.quantity import ResourceList
from berth.api.resource import UNAPPROVED, CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "GROUP",
    "MAX_RESOURCES",
    "VERSION",
    "ElasticQuota",
    "ElasticQuotaSpec",
    "ElasticQuotaStatus",
]

GROUP: Final = "scheduling.sigs.k8s.io"
VERSION: Final = "v1alpha1"
MAX_RESOURCES: Final = 128
"""Most resource names one quota may list; bounds the cost of the min <= max rule."""

_Q = "quantity(string(self.{side}[k]))"
_VALID = "isQuantity(string(self.min[k])) && isQuantity(string(self.max[k]))"
_EXCEEDS = (
    f"k in self.max && {_VALID} && {_Q.format(side='min')}.compareTo({_Q.format(side='max')}) > 0"
)


class ElasticQuotaSpec(ApiModel):
    """Guaranteed and maximum resources of the namespace's pods."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!has(self.min) || !has(self.max) || !self.min.exists(k, {_EXCEEDS})",
                    "message": "min must not exceed max for any resource named in both "
                    "spec.min and spec.max",
                    # Names the first offending resource. Joining all of them would be
                    # clearer, but the cost estimate of join over map keys is over budget.
                    "messageExpression": "'min must not exceed max for any resource named in "
                    "both spec.min and spec.max; it does for ' + "
                    f"self.min.filter(k, {_EXCEEDS})[0]",
                }
            ]
        }
    )

    min: ResourceList | None = Field(default=None, max_length=MAX_RESOURCES)
    """Guaranteed resources; a resource not listed has a min of zero."""
    max: ResourceList | None = Field(default=None, max_length=MAX_RESOURCES)
    """Resource ceilings; a resource not listed is unlimited."""

    def min_of(self, resource: str) -> Decimal:
        """The guaranteed amount of a resource (zero when not listed)."""
        amount = (self.min or {}).get(resource)
        return amount.value if amount is not None else Decimal(0)

    def max_of(self, resource: str) -> Decimal | None:
        """The ceiling of a resource, ``None`` meaning unlimited."""
        amount = (self.max or {}).get(resource)
        return amount.value if amount is not None else None


class ElasticQuotaStatus(ApiModel):
    """What the namespace's pods use now; for a quota of a quota tree, also its share."""

    used: ResourceList | None = None
    """Sum of the requests of the namespace's bound, non-terminal pods (a tree quota: of
    its pods, a parent: of its subtree's)."""
    request: ResourceList | None = None
    """Tree quotas: sum of the requests of their pods, placed or waiting."""
    runtime: ResourceList | None = None
    """Tree quotas: what the quota may use now, its share of its parent's runtime."""
    borrowed: ResourceList | None = None
    """Tree quotas: what is used over min."""
    lent: ResourceList | None = None
    """Tree quotas: the min left unused, which others may use (none when not lending)."""
    conditions: list[Condition] | None = Field(default=None, max_length=8)
    """``Active``: whether this quota governs its namespace (one quota per namespace)."""


class ElasticQuota(KubeObject):
    """An ElasticQuota: min is guaranteed, max is a ceiling, the gap is borrowed."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "ElasticQuota"
    spec: ElasticQuotaSpec = Field(default_factory=ElasticQuotaSpec)
    """Min and max."""
    status: ElasticQuotaStatus | None = None
    """Current use, written by Berth."""


CRD: Final = CustomResource(
    model=ElasticQuota,
    group=GROUP,
    version=VERSION,
    kind="ElasticQuota",
    plural="elasticquotas",
    singular="elasticquota",
    scope="Namespaced",
    short_names=("eq", "eqs"),
    categories=("berth",),
    printer_columns=(
        PrinterColumn(
            "Active",
            '.status.conditions[?(@.type=="Active")].status',
            description="Whether this quota governs its namespace (False: a duplicate)",
        ),
        PrinterColumn("Used CPU", ".status.used.cpu", description="CPU used now"),
        PrinterColumn(
            "Runtime CPU",
            ".status.runtime.cpu",
            description="Tree quotas: CPU the quota may use now (its share of its parent's)",
        ),
        PrinterColumn("Max CPU", ".spec.max.cpu", description="CPU ceiling"),
        PrinterColumn("Used Memory", ".status.used.memory", description="Memory used now"),
        PrinterColumn("Max Memory", ".spec.max.memory", description="Memory ceiling"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
        PrinterColumn(
            "Runtime Memory",
            ".status.runtime.memory",
            description="Tree quotas: memory the quota may use now",
            priority=1,
        ),
        PrinterColumn(
            "Request CPU",
            ".status.request.cpu",
            description="Tree quotas: CPU requested by pods placed or waiting",
            priority=1,
        ),
        PrinterColumn("Min CPU", ".spec.min.cpu", description="Guaranteed CPU", priority=1),
        PrinterColumn(
            "Min Memory", ".spec.min.memory", description="Guaranteed memory", priority=1
        ),
    ),
    annotations=(UNAPPROVED,),
)
