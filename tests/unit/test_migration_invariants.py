"""The migration invariants of the reliability checks, on hand-made API objects: each
violation is found, and the orders of events that are allowed pass."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.reliability.migration_invariants import (
    MigrationHistory,
    Sample,
    max_unavailable,
    overdue,
    unfinished,
)

Json = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
RS_UID = "rs-uid"


def at(second: float) -> str:
    return datetime.fromtimestamp(T0 + second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, deleting_at: float | None = None, ready: bool = True) -> Json:
    meta: Json = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": {"app": "web"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": RS_UID,
                "controller": True,
            }
        ],
    }
    if deleting_at is not None:
        meta["deletionTimestamp"] = at(deleting_at + 30)
        meta["deletionGracePeriodSeconds"] = 30
    status = {
        "phase": "Running" if ready else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def job(
    name: str = "job",
    pod_name: str = "web-a",
    *,
    phase: str = "Running",
    eviction: str | None = None,
    eviction_at: float = 0,
    mode: str | None = None,
) -> Json:
    spec: Json = {
        "podRef": {"namespace": "ns", "name": pod_name},
        "reservationOptions": {"reservationRef": {"name": name}},
    }
    if mode is not None:
        spec["mode"] = mode
    conditions = []
    if eviction is not None:
        status = "True" if eviction == "EvictComplete" else "False"
        conditions.append(
            {
                "type": "Eviction",
                "status": status,
                "reason": eviction,
                "lastTransitionTime": at(eviction_at),
            }
        )
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def reservation(name: str = "job", *, scheduled_at: float | None = None) -> Json:
    if scheduled_at is None:
        return {"metadata": {"name": name}, "status": {"phase": "Pending"}}
    scheduled = {"type": "Scheduled", "status": "True", "lastTransitionTime": at(scheduled_at)}
    return {"metadata": {"name": name}, "status": {"phase": "Available", "conditions": [scheduled]}}


def replicaset(replicas: int) -> Json:
    return {
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": RS_UID},
        "spec": {"replicas": replicas},
    }


def sample(
    second: float, jobs: list[Json], reservations: list[Json], pods: list[Json], **more: list[Json]
) -> Sample:
    return Sample(T0 + second, jobs, reservations, pods, **more)


def play(*samples: Sample) -> list[str]:
    history = MigrationHistory()
    for one in samples:
        history.observe(one)
    return history.found


# --- reserve first --------------------------------------------------------------------


def test_an_eviction_after_the_reservation_is_available_passes() -> None:
    found = play(
        sample(0, [job()], [reservation()], [pod("web-a"), pod("web-b")]),
        sample(2, [job()], [reservation(scheduled_at=1)], [pod("web-a"), pod("web-b")]),
        sample(
            4,
            [job(eviction="Evicting", eviction_at=3)],
            [reservation(scheduled_at=1)],
            [pod("web-a", deleting_at=3), pod("web-b")],
        ),
        sample(
            5,
            [job(eviction="EvictComplete", eviction_at=5)],
            [reservation(scheduled_at=1)],
            [pod("web-b"), pod("web-c")],
        ),
    )
    assert found == []


def test_an_eviction_while_the_reservation_is_pending_is_found() -> None:
    """The pod goes while the reservation has never been placed."""
    found = play(
        sample(0, [job()], [reservation()], [pod("web-a")]),
        sample(1, [job(eviction="Evicting", eviction_at=1)], [reservation()], [pod("web-a")]),
        sample(2, [job(eviction="Evicting", eviction_at=1)], [reservation()], []),
        sample(3, [job(eviction="Evicting", eviction_at=1)], [reservation()], []),
    )
    assert found == [
        "migration job: pod ns/web-a evicted by 00:00:02.000 before its reservation job was "
        "Available (from never)"
    ]


def test_a_reservation_placed_and_used_up_between_two_looks_is_judged_by_its_condition() -> None:
    """The look that first shows the pod leaving listed the reservation a moment before,
    still Pending; it was placed, then taken by the replacement, before the next look,
    which shows it Succeeded with its Scheduled time: before the eviction. (Judged on the
    first look, it was reported as never Available.)"""
    succeeded = reservation(scheduled_at=1)
    succeeded["status"]["phase"] = "Succeeded"
    found = play(
        sample(0, [job()], [reservation()], [pod("web-a")]),
        sample(2, [job(eviction="Evicting", eviction_at=2)], [reservation()], []),
        sample(3, [job(phase="Succeeded")], [succeeded], [pod("web-b")]),
    )
    assert found == []


def test_an_eviction_before_the_reservation_became_available_is_found() -> None:
    """Placed later: its Scheduled condition says when, after the API server's deletion."""
    found = play(
        sample(0, [job()], [reservation()], [pod("web-a")]),
        sample(
            11,
            [job(eviction="Evicting", eviction_at=4)],
            [reservation(scheduled_at=10)],
            [pod("web-a", deleting_at=5)],
        ),
    )
    assert found == [
        "migration job: pod ns/web-a evicted by 00:00:06.000 before its reservation job was "
        "Available (from 00:00:10.000)"
    ]


def test_the_same_second_is_not_a_violation() -> None:
    """Timestamps are whole seconds: placed and evicted in one second cannot be ordered."""
    found = play(
        sample(0, [job()], [reservation()], [pod("web-a")]),
        sample(
            3.5,
            [job(eviction="Evicting", eviction_at=3)],
            [reservation(scheduled_at=3)],
            [pod("web-a", deleting_at=3)],
        ),
    )
    assert found == []


def test_a_job_made_and_run_between_two_samples_is_judged_by_the_pod_seen_before() -> None:
    """Made, evicting and its pod gone before any sample showed the job: its pod is the
    one of that name the samples last listed."""
    found = play(
        sample(0, [], [], [pod("web-a")]),
        sample(1, [job(eviction="EvictComplete", eviction_at=1)], [reservation()], []),
        sample(2, [job(eviction="EvictComplete", eviction_at=1)], [reservation()], []),
    )
    assert found == [
        "migration job: pod ns/web-a evicted by 00:00:01.000 before its reservation job was "
        "Available (from never)"
    ]


def test_pods_the_job_did_not_evict_and_evict_directly_jobs_are_not_judged() -> None:
    gone_before_any_eviction = play(
        sample(0, [job()], [reservation()], [pod("web-a")]),
        sample(1, [job()], [reservation()], []),
    )
    assert gone_before_any_eviction == []
    direct = job(eviction="Evicting", mode="EvictDirectly")
    assert play(sample(0, [direct], [], [pod("web-a")]), sample(1, [direct], [], [])) == []


# --- maxUnavailable -------------------------------------------------------------------


def four_pods(unavailable: int) -> list[Json]:
    pods = [pod(f"web-{i}") for i in range(4 - unavailable)]
    return [*pods, pod("web-new", ready=False)]


def test_more_unavailable_than_max_unavailable_during_a_migration_is_found() -> None:
    found = play(sample(0, [job(pod_name="web-0")], [], four_pods(3), controllers=[replicaset(4)]))
    assert found == [
        "ReplicaSet ns/web: 3 of 4 replicas unavailable during migrations, "
        "over its maxUnavailable 2 (2)"
    ]


def test_max_unavailable_reached_but_not_passed_is_allowed() -> None:
    found = play(sample(0, [job(pod_name="web-0")], [], four_pods(2), controllers=[replicaset(4)]))
    assert found == []


def test_a_disruption_budget_lowers_the_limit() -> None:
    pdb = {
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}},
    }
    found = play(
        sample(
            0,
            [job(pod_name="web-0")],
            [],
            four_pods(2),
            controllers=[replicaset(4)],
            budgets=[pdb],
        )
    )
    assert found == [
        "ReplicaSet ns/web: 2 of 4 replicas unavailable during migrations, "
        "over its PodDisruptionBudget web (1)"
    ]


def test_unavailable_pods_without_a_running_migration_are_not_judged() -> None:
    """Pods starting up are not the migrations' doing."""
    pending = job(pod_name="web-0", phase="Pending")
    assert play(sample(0, [pending], [], four_pods(3), controllers=[replicaset(4)])) == []


@pytest.mark.parametrize(
    ("replicas", "expected"), [(1, 1), (3, 1), (4, 2), (10, 2), (11, 2), (25, 3)]
)
def test_koordinators_default_max_unavailable(replicas: int, expected: int) -> None:
    assert max_unavailable(replicas) == expected


# --- every job ends -------------------------------------------------------------------


def aged(phase: str | None, ttl: str | None = "60s") -> Json:
    made = job(phase=phase or "")
    made["metadata"]["creationTimestamp"] = at(0)
    if ttl is not None:
        made["spec"]["ttl"] = ttl
    if phase is None:
        del made["status"]["phase"]
    return made


def test_a_job_not_ended_past_its_ttl_and_the_grace_is_found() -> None:
    running = aged("Running")
    assert overdue([running], T0 + 90, T0, grace=30) == {}
    assert overdue([running], T0 + 91, T0, grace=30) == {
        "job": "migration job: still Running 31s past its ttl 60s"
    }
    # Unset, the ttl is Koordinator's 5 minutes; a job not yet arbitrated is Pending.
    assert overdue([aged(None, ttl=None)], T0 + 331, T0, grace=30) == {
        "job": "migration job: still Pending 31s past its ttl 300s"
    }


def test_ended_jobs_are_never_overdue_and_the_bound_starts_when_the_operator_runs() -> None:
    ended = [aged(phase) for phase in ("Succeeded", "Failed", "Aborted")]
    assert overdue(ended, T0 + 1000, T0, grace=30) == {}
    # The operator was down until +200 (killed on purpose): due 30 s after that.
    assert overdue([aged("Running")], T0 + 230, T0 + 200, grace=30) == {}
    assert list(overdue([aged("Running")], T0 + 231, T0 + 200, grace=30)) == ["job"]


def test_at_rest_every_job_has_ended() -> None:
    jobs = [aged("Succeeded"), aged("Failed"), aged("Running"), aged(None)]
    jobs[3]["metadata"]["name"] = "other"
    assert unfinished(jobs) == [
        "at rest, migration job not ended: Running",
        "at rest, migration other not ended: Pending",
    ]


def test_counts_say_how_jobs_ended_and_which_evictions_were_judged() -> None:
    history = MigrationHistory()
    moved = job(phase="Succeeded", eviction="EvictComplete", eviction_at=3)
    history.observe(sample(0, [job()], [reservation()], [pod("web-a")]))
    history.observe(sample(2, [job()], [reservation(scheduled_at=1)], [pod("web-a")]))
    history.observe(sample(4, [moved], [reservation(scheduled_at=1)], []))
    timed_out = job("late", "web-b", phase="Failed")
    history.observe(sample(5, [moved, timed_out], [reservation(scheduled_at=1)], [pod("web-b")]))
    assert history.counts() == {
        "migrations succeeded": 1,
        "migrations failed": 1,
        "migration evictions judged": 1,
    }
