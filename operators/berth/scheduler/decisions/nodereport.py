"""What the scheduler's view holds for one node: why the scheduler finds it full.

A pod's decision record says which plugin rejected how many nodes; when a node looks free
from outside (``kubectl describe node``) and the scheduler still refuses it, the question
is what the scheduler counts there. This answers it from the view itself: allocatable and
requested per resource, and every pod counted on the node, marked when its binding is not
confirmed by the watch yet (assumed), when it is being deleted, or when it is the capacity
a reservation holds; and the pods nominated to the node (preemptors waiting for their
victims), which the filters count for pods of lower or equal priority. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.view import ClusterView


def node_report(view: ClusterView, name: str) -> dict[str, Any] | None:
    """The node as the view holds it; None when the view has no such node."""
    nodes = view.nodes
    row = nodes.index.get(name)
    if row is None:
        return None
    columns = sorted(nodes.columns.items(), key=lambda item: item[1])
    return {
        "name": name,
        "unschedulable": bool(nodes.unschedulable[row]),
        "taints": [t.to_dict() for t in nodes.taints[row]],
        "allocatable": {r: int(nodes.allocatable[row, c]) for r, c in columns},
        "requested": {r: int(nodes.requested[row, c]) for r, c in columns},
        "pods": sorted(
            (_pod(view, pod) for pod in nodes.pods[row].values()), key=lambda p: p["pod"]
        ),
        "nominated": sorted(
            (
                {"pod": pod.key, "priority": pod.priority, "requests": pod.requests}
                for pod in view.nominated.on(name)
            ),
            key=lambda p: str(p["pod"]),
        ),
    }


def _pod(view: ClusterView, pod: PodInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"pod": pod.key, "requests": pod.requests}
    if pod.uid in view.assumed:
        entry["assumed"] = True
    if pod.deleting:
        entry["deleting"] = True
    if pod.reservation is not None:
        entry["reservation"] = True
    return entry
