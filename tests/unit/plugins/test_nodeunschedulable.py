"""NodeUnschedulable: a cordoned node takes only pods that tolerate it."""

from __future__ import annotations

import pytest

from tests.unit.scheduler_fixtures import (
    Json,
    make_env,
    node,
    pod,
)

Mi = 1024**2
Gi = 1024**3


# -- NodeUnschedulable, NodeName --------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "fits"),
    [
        (None, False),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
            True,
        ),
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoExecute",
            },
            False,
        ),
        ({"key": "node.kubernetes.io/unschedulable", "value": "x", "effect": "NoSchedule"}, False),
    ],
    ids=["none", "exact", "any-effect", "everything", "wrong-effect", "wrong-value"],
)
def test_cordoned_node(toleration: Json | None, fits: bool) -> None:
    env = make_env(node("cordoned", unschedulable=True))
    wanted = pod("p", "1", tolerations=[toleration] if toleration else ())
    if fits:
        assert env.node_for(wanted) == "cordoned"
    else:
        assert env.message(wanted) == "0/1 nodes are available: 1 node(s) were unschedulable."
