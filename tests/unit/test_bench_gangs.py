"""A gang workload's counts: a gang is whole when its last member is bound, and the
PodGroups a scheduler marked scheduled."""

from __future__ import annotations

from berth.bench.gangs import gang_completions, scheduled_groups

GROUPS = {"p0": "g0", "p1": "g0", "p2": "g0", "p3": "g1", "p4": "g1", "p5": "g1"}


def test_a_gang_is_whole_at_its_last_member_s_binding() -> None:
    bound = {"p0": 1.0, "p1": 3.0, "p2": 2.0, "p3": 1.5, "p4": 1.6, "p5": 1.7}
    assert gang_completions(bound, GROUPS) == [1.7, 3.0]


def test_a_gang_with_a_member_not_bound_is_not_counted() -> None:
    bound = {"p0": 1.0, "p1": 3.0, "p3": 1.5, "p4": 1.6, "p5": 1.7}
    assert gang_completions(bound, GROUPS) == [1.7]
    assert gang_completions({}, GROUPS) == []


def _group(*conditions: tuple[str, str]) -> dict[str, object]:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


def test_only_podgroups_with_podgroupscheduled_true_count_as_marked() -> None:
    groups = [
        _group(("PodGroupScheduled", "True")),
        _group(("PodGroupScheduled", "False")),
        _group(("Other", "True")),
        {"status": {}},
        {},
    ]
    assert scheduled_groups(groups) == 1
