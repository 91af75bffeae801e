"""One NodeMetric per Node: what to change for one name, given what is seen (pure).

The NodeMetric is created with its Node (an owner reference lets the garbage collector
remove it too, but Berth deletes it explicitly so clusters without the collector stay
clean), carries the node's collect policy, and goes when the Node goes. A NodeMetric left
over from an earlier Node of the same name (its owner's uid differs) is deleted, and the
deletion event brings a fresh one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from berth.api.nodemetric import GROUP, VERSION
from berth.slo.colocation import ColocationConfig

__all__ = [
    "Change",
    "MetricIndex",
    "MetricSeen",
    "NodeSeen",
    "Verb",
    "desired",
    "metric_seen",
    "node_seen",
]


@dataclass(frozen=True)
class NodeSeen:
    """A Node as the operator keeps it: what a NodeMetric's owner reference and policy need."""

    uid: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MetricSeen:
    """A NodeMetric as the operator keeps it: its policy and the uid of its owning Node."""

    policy: Mapping[str, Any]
    owner_uid: str | None


def node_seen(body: Mapping[str, Any]) -> NodeSeen:
    meta = body.get("metadata") or {}
    return NodeSeen(str(meta.get("uid", "")), tuple(sorted((meta.get("labels") or {}).items())))


def metric_seen(body: Mapping[str, Any]) -> MetricSeen:
    meta = body.get("metadata") or {}
    owner = next(
        (
            ref.get("uid")
            for ref in meta.get("ownerReferences") or ()
            if ref.get("kind") == "Node" and ref.get("apiVersion") == "v1"
        ),
        None,
    )
    policy = (body.get("spec") or {}).get("metricCollectPolicy") or {}
    return MetricSeen(policy=dict(policy), owner_uid=owner)


class MetricIndex:
    """What the operator reads of each NodeMetric, kept from its informer's events."""

    def __init__(self) -> None:
        self.seen: dict[str, MetricSeen] = {}

    def observe(self, kind: str, body: dict[str, Any]) -> str | None:
        """Take one watch event; the name to decide again, or None when the event changed
        nothing the decision reads (a status report, a label, the echo of an unchanged
        object)."""
        name = str((body.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            return name if self.seen.pop(name, None) is not None else None
        seen = metric_seen(body)
        if self.seen.get(name) == seen:
            return None
        self.seen[name] = seen
        return name


class Verb(StrEnum):
    CREATE = "create"
    PATCH = "patch"
    DELETE = "delete"


@dataclass(frozen=True)
class Change:
    """One write: a NodeMetric to create (``body``), a merge patch (``body``), or a delete."""

    verb: Verb
    body: dict[str, Any] | None = None


def _new_metric(name: str, node: NodeSeen, policy: dict[str, Any] | None) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.uid}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMetric",
        "metadata": {"name": name, "ownerReferences": [owner]},
        # Without a valid config the schema defaults fill in the policy.
        "spec": {} if policy is None else {"metricCollectPolicy": policy},
    }


def desired(
    name: str,
    node: NodeSeen | None,
    metric: MetricSeen | None,
    config: ColocationConfig | None,
) -> Change | None:
    """The write that brings NodeMetric ``name`` in line, or None when it already is.

    ``config`` None means no valid colocation config is known: existing policies are kept.
    """
    if node is None:
        return Change(Verb.DELETE) if metric is not None else None
    policy = None if config is None else config.policy_for(dict(node.labels)).to_dict()
    if metric is None:
        return Change(Verb.CREATE, _new_metric(name, node, policy))
    if metric.owner_uid is not None and metric.owner_uid != node.uid:
        return Change(Verb.DELETE)
    if policy is not None and dict(metric.policy) != policy:
        return Change(Verb.PATCH, {"spec": {"metricCollectPolicy": policy}})
    return None
