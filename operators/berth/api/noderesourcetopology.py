"""NodeResourceTopology (``topology.node.k8s.io/v1alpha2``, cluster-scoped, one per Node with
the Node's name): the node's NUMA zones and what each has available, as written by an
updater on the node (e.g. NFD topology-updater). Berth reads it for NUMA-aware placement.

In v1alpha2 ``zones`` and ``attributes`` are top-level fields of the object (there is no
spec); ``topologyPolicies`` is kept for old writers but deprecated in favour of attributes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

from pydantic import Field

from berth.api.base import ApiModel
from berth.api.meta import KubeObject
from berth.api.quantity import Quantity
from berth.api.resource import UNAPPROVED, CustomResource, PrinterColumn

__all__ = [
    "CRD",
    "FINGERPRINT_ANNOTATION",
    "GROUP",
    "VERSION",
    "AttributeInfo",
    "AttributeName",
    "CostInfo",
    "FingerprintMethod",
    "NodeResourceTopology",
    "ResourceInfo",
    "TopologyManagerScope",
    "Zone",
    "ZoneType",
]

GROUP: Final = "topology.node.k8s.io"
VERSION: Final = "v1alpha2"

FINGERPRINT_ANNOTATION: Final = "topology.node.k8s.io/fingerprint"
"""The annotation early updaters wrote the pods fingerprint to (always of all pods)."""

_BY_NAME: Final[dict[str, Any]] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
}


class ZoneType(StrEnum):
    """Zone types Berth understands (others are allowed and ignored)."""

    NODE = "Node"
    """A NUMA node."""


class AttributeName(StrEnum):
    """Well-known attribute names."""

    TOPOLOGY_MANAGER_POLICY = "topologyManagerPolicy"
    """The kubelet Topology Manager policy (e.g. ``single-numa-node``)."""
    TOPOLOGY_MANAGER_SCOPE = "topologyManagerScope"
    """The kubelet Topology Manager scope: ``container`` or ``pod``."""
    NODE_TOPOLOGY_PODS_FINGERPRINT = "nodeTopologyPodsFingerprint"
    """A hash of the pods the report accounts for."""
    NODE_TOPOLOGY_PODS_FINGERPRINT_METHOD = "nodeTopologyPodsFingerprintMethod"
    """Which pods the fingerprint is computed over (``all`` when absent)."""


class FingerprintMethod(StrEnum):
    """Values of the ``nodeTopologyPodsFingerprintMethod`` attribute (podfingerprint's)."""

    ALL = "all"
    """Every pod on the node."""
    WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"
    """Only the pods that hold exclusive resources (whole cpus, memory or hugepages of a
    Guaranteed pod, or devices the zones list)."""


class TopologyManagerScope(StrEnum):
    """Values of the ``topologyManagerScope`` attribute."""

    CONTAINER = "container"
    POD = "pod"


class AttributeInfo(ApiModel):
    """A named attribute."""

    name: str
    """Attribute name."""
    value: str
    """Attribute value."""


class CostInfo(ApiModel):
    """The cost (distance) from a zone to another zone."""

    name: str
    """The other zone."""
    value: int
    """The cost."""


class ResourceInfo(ApiModel):
    """Amounts of one resource in a zone."""

    name: str
    """Resource name (e.g. ``cpu``, ``memory``)."""
    capacity: Quantity
    """Total amount in the zone."""
    allocatable: Quantity
    """Amount pods may use in the zone."""
    available: Quantity
    """Allocatable minus what running pods hold: what new pods can get."""


class Zone(ApiModel):
    """A topology zone, e.g. a NUMA node."""

    name: str
    """Zone name, unique on the node (e.g. ``node-0``)."""
    type: str
    """Zone type (``Node`` for a NUMA node)."""
    parent: str | None = None
    """The enclosing zone, if any."""
    costs: list[CostInfo] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Distances to other zones."""
    attributes: list[AttributeInfo] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Zone attributes."""
    resources: list[ResourceInfo] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Resources in the zone."""

    def resource(self, name: str) -> ResourceInfo | None:
        """The entry for one resource, if the zone lists it."""
        return next((r for r in self.resources or [] if r.name == name), None)


class NodeResourceTopology(KubeObject):
    """A NodeResourceTopology: zones and attributes of one node."""

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "NodeResourceTopology"
    topology_policies: list[str] | None = None
    """Deprecated: use the ``topologyManagerPolicy`` and ``topologyManagerScope`` attributes."""
    zones: list[Zone] = Field(json_schema_extra=_BY_NAME)
    """The node's zones."""
    attributes: list[AttributeInfo] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Node-wide attributes: topologyManagerPolicy, topologyManagerScope,
    nodeTopologyPodsFingerprint, nodeTopologyPodsFingerprintMethod."""

    def attribute(self, name: str) -> str | None:
        """The value of a node-wide attribute, if present."""
        return next((a.value for a in self.attributes or [] if a.name == name), None)

    @property
    def topology_manager_policy(self) -> str | None:
        """The Topology Manager policy attribute (e.g. ``single-numa-node``)."""
        return self.attribute(AttributeName.TOPOLOGY_MANAGER_POLICY)

    @property
    def topology_manager_scope(self) -> str | None:
        """The Topology Manager scope attribute (``container`` or ``pod``)."""
        return self.attribute(AttributeName.TOPOLOGY_MANAGER_SCOPE)

    @property
    def pods_fingerprint(self) -> str | None:
        """The pods fingerprint: the attribute, else the legacy annotation, if written."""
        value = self.attribute(AttributeName.NODE_TOPOLOGY_PODS_FINGERPRINT)
        if value is not None:
            return value
        return (self.metadata.annotations or {}).get(FINGERPRINT_ANNOTATION)

    @property
    def pods_fingerprint_exclusive_only(self) -> bool:
        """Whether the fingerprint is over the pods with exclusive resources only.

        As scheduler-plugins autodetects it: only the attribute fingerprint can be, when the
        method attribute says ``with-exclusive-resources``; any other value means all pods.
        """
        if self.attribute(AttributeName.NODE_TOPOLOGY_PODS_FINGERPRINT) is None:
            return False
        method = self.attribute(AttributeName.NODE_TOPOLOGY_PODS_FINGERPRINT_METHOD)
        return method == FingerprintMethod.WITH_EXCLUSIVE_RESOURCES


CRD: Final = CustomResource(
    model=NodeResourceTopology,
    group=GROUP,
    version=VERSION,
    kind="NodeResourceTopology",
    plural="noderesourcetopologies",
    singular="noderesourcetopology",
    scope="Cluster",
    short_names=("nrt", "node-res-topo"),
    categories=("berth",),
    printer_columns=(
        PrinterColumn(
            "Policy",
            '.attributes[?(@.name=="topologyManagerPolicy")].value',
            description="The kubelet's Topology Manager policy (single-numa-node is checked)",
        ),
        PrinterColumn(
            "Scope",
            '.attributes[?(@.name=="topologyManagerScope")].value',
            description="container (the default) or pod",
        ),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    ),
    annotations=(UNAPPROVED,),
)
