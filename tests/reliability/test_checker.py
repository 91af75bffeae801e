"""The checker's own rules on hand-made snapshots (no cluster): a rule that cannot fire, or
fires on what was allowed, would make the reliability runs prove nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.reliability.checker import Checker, Snapshot

SCHEDULER = "rl"


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, *, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"cpu": "8", "pods": "110"}},
    }


def bound(name: str, node_name: str, at: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "free", "uid": name},
        "spec": {
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
