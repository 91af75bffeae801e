"""What a benchmark trial that timed out names: the pods left unbound and why they wait."""

from __future__ import annotations

from typing import Any

from berth.bench.fixture import unbound


def item(name: str, **status: Any) -> dict[str, Any]:
    node = status.pop("node", None)
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_only_unbound_pods_are_named_with_their_nomination_and_message() -> None:
    waiting = {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}
    items = [
        item("bound", node="n1"),
        item("preemptor", nominatedNodeName="n2", conditions=[waiting]),
        item("new"),
    ]
    assert unbound("sched-1", items, 5) == [
        "sched-1/preemptor (nominated n2): 0/3 nodes are available",
        "sched-1/new (nominated none): no PodScheduled yet",
    ]


def test_at_most_the_limit_is_named() -> None:
    assert len(unbound("sched-1", [item(f"p{i}") for i in range(10)], 3)) == 3
