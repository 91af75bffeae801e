"""The cluster events' names in the queue's metric, as kube-scheduler labels them."""

from __future__ import annotations

import pytest

from berth.scheduler.framework.clusterevents import (
    NODE,
    POD,
    RESERVATION,
    ActionType,
    ClusterEvent,
    event_label,
)


@pytest.mark.parametrize(
    ("resource", "action", "label"),
    [
        (NODE, ActionType.ADD, "NodeAdd"),
        (NODE, ActionType.DELETE, "NodeDelete"),
        (NODE, ActionType.UPDATE_NODE_ALLOCATABLE, "NodeAllocatableChange"),
        (NODE, ActionType.UPDATE_NODE_TAINT, "NodeTaintChange"),
        (NODE, ActionType.UPDATE_NODE_UNSCHEDULABLE, "NodeSpecUnschedulableChange"),
        (POD, ActionType.DELETE, "AssignedPodDelete"),
        (POD, ActionType.UPDATE_POD_SCALE_DOWN, "AssignedPodUpdate"),
        (RESERVATION, ActionType.UPDATE_OTHER, "ReservationUpdate"),
    ],
)
def test_labels(resource: str, action: ActionType, label: str) -> None:
    assert event_label(ClusterEvent(resource, action)) == label
