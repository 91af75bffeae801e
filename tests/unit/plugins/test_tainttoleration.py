"""TaintToleration: the filter's untolerated taints and the score's PreferNoSchedule count,
as kube-scheduler's plugin.
"""

from __future__ import annotations

import pytest

from berth.scheduler.cache.podinfo import PodInfo
from tests.unit.scheduler_fixtures import (
    Json,
    make_env,
    node,
    pod,
    scores,
    taint,
)

Mi = 1024**2
Gi = 1024**3


# -- TaintToleration filter ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taints", "tolerations", "fits"),
    [
        ([taint("k", "v")], [{"key": "k", "value": "v", "effect": "NoSchedule"}], True),
        ([taint("k", "v")], [{"key": "k", "operator": "Equal", "value": "v"}], True),
        ([taint("k", "v")], [{"key": "k", "operator": "Exists"}], True),
        ([taint("k", "v")], [{"key": "k", "value": "w"}], False),
        ([taint("k", "v")], [{"key": "k", "value": "v", "effect": "NoExecute"}], False),
        ([taint("k", "v", "NoExecute")], [], False),
        ([taint("k", "v", "PreferNoSchedule")], [], True),
        ([taint("a", "1"), taint("b", "2")], [{"key": "a", "operator": "Exists"}], False),
    ],
    ids=[
        "equal",
        "explicit-equal",
        "exists",
        "other-value",
        "other-effect",
        "no-execute",
        "prefer-only",
        "second-taint",
    ],
)
def test_taint_toleration_filter(taints: list[Json], tolerations: list[Json], fits: bool) -> None:
    env = make_env(node("n1", taints=taints))
    assert env.feasible(pod("p", "1", tolerations=tolerations)) == (["n1"] if fits else [])


def test_first_untolerated_taint_is_named() -> None:
    env = make_env(node("n1", taints=[taint("a", "1"), taint("b", "2")]))
    wanted = pod("p", "1", tolerations=[{"key": "a", "operator": "Exists"}])
    assert env.message(wanted) == "0/1 nodes are available: 1 node(s) had untolerated taint {b: 2}."


def test_taint_toleration_score() -> None:
    prefer = "PreferNoSchedule"
    env = make_env(
        node("clean"),
        node("one", taints=[taint("a", "1", prefer)]),
        node("two", taints=[taint("a", "1", prefer), taint("b", "2", prefer)]),
    )
    assert scores(env, "TaintToleration", pod("p", "1"), "clean", "one", "two") == [100, 50, 0]
    tolerant = pod("p", "1", tolerations=[{"key": "a", "operator": "Exists"}])
    assert scores(env, "TaintToleration", tolerant, "clean", "one", "two") == [100, 100, 0]
    # A toleration limited to NoSchedule does not tolerate PreferNoSchedule taints.
    hard_only = pod(
        "p", "1", tolerations=[{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert scores(env, "TaintToleration", hard_only, "clean", "one", "two") == [100, 50, 0]


def test_taint_toleration_prefers_fewer_intolerable_taints() -> None:
    env = make_env(
        node("tainted", taints=[taint("spot", "true", "PreferNoSchedule")]),
        node("clean"),
    )
    assert env.node_for(pod("p", "1")) == "clean"


def test_pods_with_the_same_tolerations_share_them_parsed() -> None:
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    same = dict(reversed(list(not_ready.items())))  # the same toleration, keys reordered
    first = PodInfo.from_pod(pod("a", "1", tolerations=[not_ready]))
    second = PodInfo.from_pod(pod("b", "1", tolerations=[same, {"key": "k", "value": "v"}]))
    assert first.tolerations[0] is second.tolerations[0]
    assert second.tolerations[1].key == "k"
    assert second.tolerations[1].value == "v"
    assert second.tolerations[1] is not first.tolerations[0]
