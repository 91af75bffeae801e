"""Cluster events and queueing hints: what may make a rejected pod schedulable again.

kube-scheduler's shape (framework.ClusterEvent, QueueingHintFn): a plugin registers the
events that can undo its rejections, each with an optional hint that looks at the pod and
the changed object and says whether this change can help that pod. A pod rejected by
plugins P goes back to the queue only on an event some plugin in P registered, and only
when that plugin's hint (if any) says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntFlag
from typing import Any

from berth.scheduler.cache.podinfo import PodInfo


class ActionType(IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_UNSCHEDULABLE = 64
    UPDATE_POD_LABEL = 128
    # A bound pod's requests went down or it finished: its node has room again.
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATION = 512
    # Any other change of an object (custom kinds, volumes) beyond those named above.
    UPDATE_OTHER = 1024
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_NODE_UNSCHEDULABLE
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATION
        | UPDATE_OTHER
    )
    ALL = ADD | DELETE | UPDATE


# Resources events are about. Pod events are about pods bound (or assumed) to a node, or
# nominated to one.
POD = "Pod"
NODE = "Node"
PERSISTENT_VOLUME = "PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
STORAGE_CLASS = "StorageClass"
CSI_NODE = "CSINode"
POD_DISRUPTION_BUDGET = "PodDisruptionBudget"
RESERVATION = "Reservation"
ELASTIC_QUOTA = "ElasticQuota"
NODE_METRIC = "NodeMetric"
NODE_RESOURCE_TOPOLOGY = "NodeResourceTopology"
WILDCARD = "*"


@dataclass(frozen=True)
class ClusterEvent:
    resource: str
    action: ActionType

    def covers(self, other: ClusterEvent) -> bool:
        """Whether a registration for ``self`` is interested in the event ``other``."""
        resource_ok = self.resource in (WILDCARD, other.resource)
        return resource_ok and bool(self.action & other.action)


# (pod that was rejected, object before, object after) -> whether the change may help it.
QueueingHint = Callable[[PodInfo, Any, Any], bool]


@dataclass(frozen=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHint | None = None

    def helps(self, pod: PodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        if not self.event.covers(event):
            return False
        return self.hint is None or self.hint(pod, old, new)


def on(resource: str, action: ActionType, hint: QueueingHint | None = None) -> ClusterEventWithHint:
    """Shorthand for plugins' ``events_to_register``."""
    return ClusterEventWithHint(ClusterEvent(resource, action), hint)


# kube-scheduler's labels for the events of its scheduler_queue_incoming_pods_total.
_CHANGE_LABELS = {
    ActionType.UPDATE_NODE_ALLOCATABLE: "NodeAllocatableChange",
    ActionType.UPDATE_NODE_LABEL: "NodeLabelChange",
    ActionType.UPDATE_NODE_TAINT: "NodeTaintChange",
    ActionType.UPDATE_NODE_CONDITION: "NodeConditionChange",
    ActionType.UPDATE_NODE_UNSCHEDULABLE: "NodeSpecUnschedulableChange",
    ActionType.UPDATE_POD_LABEL: "AssignedPodUpdate",
    ActionType.UPDATE_POD_SCALE_DOWN: "AssignedPodUpdate",
    ActionType.UPDATE_POD_TOLERATION: "AssignedPodUpdate",
}


def event_label(event: ClusterEvent) -> str:
    """The event's name in the queue's metric: ``NodeAdd``, ``AssignedPodDelete``,
    ``NodeTaintChange``, ``ReservationUpdate`` and so on."""
    subject = "AssignedPod" if event.resource == POD else event.resource
    if event.action & ActionType.ADD:
        return f"{subject}Add"
    if event.action & ActionType.DELETE:
        return f"{subject}Delete"
    for action, label in _CHANGE_LABELS.items():
        if event.action & action:
            return label
    return f"{subject}Update"
