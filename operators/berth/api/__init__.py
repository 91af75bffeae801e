"""Berth's API types: Reservation, ElasticQuota, NodeMetric, NodeResourceTopology and
PodMigrationJob as pydantic models, the single source of their CRDs (see
:mod:`berth.api.crdgen`)."""

from berth.api.elasticquota import ElasticQuota
from berth.api.nodemetric import NodeMetric
from berth.api.noderesourcetopology import NodeResourceTopology
from berth.api.podmigrationjob import PodMigrationJob
from berth.api.quantity import Quantity, ResourceList, parse_quantity
from berth.api.registry import KINDS, by_kind
from berth.api.reservation import Reservation
from berth.api.resource import CustomResource

__all__ = [
    "KINDS",
    "CustomResource",
    "ElasticQuota",
    "NodeMetric",
    "NodeResourceTopology",
    "PodMigrationJob",
    "Quantity",
    "Reservation",
    "ResourceList",
    "by_kind",
    "parse_quantity",
]
