"""The checker's own rules on hand-made snapshots (no cluster): a rule that cannot fire, or
fires on what was allowed, would make the reliability runs prove nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.reliability.checker import Checker, Snapshot

SCHEDULER = "rl"


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, *, cordoned: bool = False, zone: str = "a") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"cpu": "8", "pods": "110"}},
    }


def bound(name: str, node_name: str, at: float, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    return {
        "metadata": {"name": name, "namespace": "free", "uid": name, "labels": labels},
        "spec": {
            **spec,
            "schedulerName": SCHEDULER,
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(at)}
            ],
        },
    }


def judge(checker: Checker, at: float, n1: dict[str, Any], *pods: dict[str, Any]) -> list[str]:
    return checker.check(Snapshot(at, {"n1": n1}, list(pods), [], []))


T0 = 1_800_000_000.0


def test_a_binding_while_uncordoned_is_not_judged_against_an_earlier_cordon() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert judge(checker, T0, node("n1", cordoned=True)) == []
    assert judge(checker, T0 + 10, node("n1")) == []  # uncordoned
    # Bound at +20 while schedulable; cordoned again by the next look at +21.
    early = bound("early", "n1", T0 + 20)
    assert judge(checker, T0 + 21, node("n1", cordoned=True), early) == []
    # Bound at +30 to the node cordoned since +21: that one broke the rule.
    late = bound("late", "n1", T0 + 30)
    found = judge(checker, T0 + 31, node("n1", cordoned=True), early, late)
    assert found == ["pod free/late bound to n1 after it was cordoned"]


SOLO = {"solo": "yes"}
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": SOLO}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"spread": "yes"}},
    }
]


def look(checker: Checker, at: float, nodes: list[dict[str, Any]], *pods: Any) -> list[str]:
    named = {n["metadata"]["name"]: n for n in nodes}
    return checker.check(Snapshot(at, named, list(pods), [], []))


def test_required_anti_affinity_against_the_pods_surely_there() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = [node("n1"), node("n2")]
    first = bound("first", "n1", T0, labels=SOLO, affinity=ANTI)
    apart = bound("apart", "n2", T0 + 10, labels=SOLO, affinity=ANTI)
    beside = bound("beside", "n1", T0 + 10, labels=SOLO, affinity=ANTI)
    # Bound moments after "first" went: it may have been gone, so no verdict on it.
    gone_soon = bound("gone-soon", "n1", T0 + 40, labels=SOLO, affinity=ANTI)
    found = []
    found += look(checker, T0, nodes, first)
    found += look(checker, T0 + 10, nodes, first, apart, beside)
    found += look(checker, T0 + 16, nodes, first, apart, beside)
    assert found == [
        "pod free/beside bound to n1 beside free/first against free/beside's anti-affinity "
        "(kubernetes.io/hostname)",
        "pod free/beside bound to n1 beside free/first against free/first's anti-affinity "
        "(kubernetes.io/hostname)",
    ]
    assert look(checker, T0 + 41, nodes, apart, gone_soon) == []
    assert look(checker, T0 + 47, nodes, apart, gone_soon) == []


def test_do_not_schedule_spread_counts_the_domains_its_nodes_span() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = [node("n1", zone="a"), node("n2", zone="b")]
    spread = {"labels": {"spread": "yes"}, "topologySpreadConstraints": SPREAD}
    a1 = bound("a1", "n1", T0, **spread)
    b1 = bound("b1", "n2", T0 + 10, **spread)
    a2 = bound("a2", "n1", T0 + 20, **spread)  # skew 1: allowed
    a3 = bound("a3", "n1", T0 + 30, **spread)  # zone a would have 3 to b's 1: skew 2
    found = []
    for at, pods in ((T0, [a1]), (T0 + 10, [a1, b1]), (T0 + 20, [a1, b1, a2])):
        found += look(checker, at, nodes, *pods)
    found += look(checker, T0 + 30, nodes, a1, b1, a2, a3)
    found += look(checker, T0 + 36, nodes, a1, b1, a2, a3)
    assert found == [
        "pod free/a3 bound to n1 (zone a): skew 2 > 1 ({'a': 2, 'b': 1} there, fewest 1)"
    ]
