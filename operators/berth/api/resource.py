"""How each kind is served: the facts a CRD needs that are not in the model's fields.

Each kind's module builds one :class:`CustomResource` next to its model, so the schema
(from the fields) and the serving details (names, scope, columns) never drift apart;
:mod:`berth.api.crdgen` turns them into the CustomResourceDefinition, and the scheduler
and the CLI use them to reach the objects (group, version, plural).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from berth.api.meta import KubeObject

__all__ = ["UNAPPROVED", "CustomResource", "PrinterColumn"]

UNAPPROVED = (
    "api-approved.kubernetes.io",
    "unapproved, served by Berth for compatibility with the upstream API of this group",
)
"""Groups ending in ``.k8s.io`` need this annotation or the API server refuses the CRD;
a value starting with ``unapproved`` is accepted and says honestly that it is not approved."""


@dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get`` (``additionalPrinterColumns``)."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str | None = None
    priority: int = 0
    """0 shows in ``kubectl get``; higher only with ``-o wide``."""


@dataclass(frozen=True)
class CustomResource:
    """A kind as the API server serves it: model plus names, scope and columns."""

    model: type[KubeObject]
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = True
    annotations: tuple[tuple[str, str], ...] = ()
    """CRD annotations, e.g. ``api-approved.kubernetes.io`` for groups ending in ``.k8s.io``."""

    @property
    def api_version(self) -> str:
        """``group/version``, the ``apiVersion`` of the objects."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """``plural.group``, the name of the CustomResourceDefinition."""
        return f"{self.plural}.{self.group}"

    @property
    def namespaced(self) -> bool:
        """Whether objects of this kind live in a namespace."""
        return self.scope == "Namespaced"
