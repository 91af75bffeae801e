"""NodeName: a pod pinned to a node fits only there."""

from __future__ import annotations

from tests.unit.scheduler_fixtures import (
    make_env,
    node,
    pod,
)

Mi = 1024**2
Gi = 1024**3


def test_node_name() -> None:
    env = make_env(node("n1"), node("n2"))
    assert env.feasible(pod("p", "1", node_name="n2", phase="Pending")) == ["n2"]
    assert env.message(pod("p", "1", node_name="ghost", phase="Pending")) == (
        "0/2 nodes are available: 2 node(s) didn't match the requested node name."
    )
