"""A PodGroup's status from its members without a cluster: scheduler-plugins' phases and
counts, and the Scheduled condition that says why a gang waits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from berth.api.podgroup import PodGroupPhase
from berth.gang.status import MemberSeen, desired, member_seen, phase
from berth.kube.write import NotFound
from berth.operators.podgroup import PodGroups

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def group(min_member: int = 3, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "team"},
        "spec": {"minMember": min_member},
        **({"status": status} if status is not None else {}),
    }


def seen(
    name: str, pod_phase: str = "Pending", *, bound: bool = False, waiting: str = ""
) -> MemberSeen:
    return MemberSeen(name, pod_phase, bound, ("team/job",), waiting)


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        (["Pending", "Pending"], PodGroupPhase.PENDING),
        (["Pending"] * 3, PodGroupPhase.SCHEDULING),
        (["Running", "Running", "Pending"], PodGroupPhase.SCHEDULING),
        (["Running", "Running", "Succeeded"], PodGroupPhase.RUNNING),
        (["Running", "Failed", "Succeeded"], PodGroupPhase.FAILED),
        (["Succeeded"] * 3, PodGroupPhase.FINISHED),
    ],
)
def test_phases_as_scheduler_plugins(phases: list[str], expected: PodGroupPhase) -> None:
    members = [seen(f"p{i}", p) for i, p in enumerate(phases)]
    assert phase(None, 3, members) is expected


def test_finished_and_failed_are_final() -> None:
    assert phase(PodGroupPhase.FINISHED, 3, []) is PodGroupPhase.FINISHED
    assert phase(PodGroupPhase.FAILED, 3, [seen("a", "Running")] * 3) is PodGroupPhase.FAILED


def test_a_gang_short_of_members_says_how_many_exist() -> None:
    patch = desired(group(), [seen("a"), seen("b")], NOW)
    assert patch["phase"] == "Pending"
    [condition] = patch["conditions"]
    assert condition["status"] == "False"
    assert condition["reason"] == "WaitingForMembers"
    assert condition["message"] == "waiting for members: 2 of 3 (minMember) exist"
    assert "scheduleStartTime" not in patch


def test_a_gang_the_scheduler_refused_carries_its_reason() -> None:
    why = "PodGroup team/train is waiting for quota for its 3 members: ElasticQuota team ..."
    members = [seen("a", waiting=why), seen("b", waiting=why), seen("c", waiting=why)]
    patch = desired(group(), members, NOW)
    assert patch["phase"] == "Scheduling"
    assert patch["scheduleStartTime"] == "2026-01-01T00:00:00Z"
    assert patch["occupiedBy"] == "team/job"
    [condition] = patch["conditions"]
    assert (condition["reason"], condition["message"]) == ("Unschedulable", why)


def test_a_placed_gang_is_scheduled_and_an_unchanged_status_is_not_written() -> None:
    members = [seen(n, "Running", bound=True) for n in "abc"]
    patch = desired(group(), members, NOW)
    assert patch["phase"] == "Running"
    assert patch["running"] == 3
    assert patch["conditions"][0]["status"] == "True"
    assert desired(group(status=patch), members, NOW) == {}


def test_member_seen_reads_the_pod() -> None:
    pod = {
        "metadata": {
            "name": "a",
            "namespace": "team",
            "ownerReferences": [{"kind": "Job", "name": "job", "uid": "u"}],
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "why"}],
        },
    }
    assert member_seen(pod) == MemberSeen("a", "Pending", True, ("team/job",), "why")


class RecordingWriter:
    def __init__(self, missing: bool = False) -> None:
        self.patches: list[tuple[str, str | None, dict[str, Any]]] = []
        self.missing = missing

    async def patch_status(
        self, kind: Any, name: str, status: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        if self.missing:
            raise NotFound(status=404, reason="Not Found")
        self.patches.append((name, namespace, status))
        return {}


def operator(writer: RecordingWriter, members: list[MemberSeen]) -> PodGroups:
    groups = {"team/train": [group(2)]}
    state = PodGroups(cast(Any, None), cast(Any, groups), lambda: True)
    state.members = cast(Any, {"team/train": members})
    state.writer = cast(Any, writer)
    return state


async def test_the_operator_writes_only_what_differs() -> None:
    writer = RecordingWriter()
    state = operator(writer, [seen("a", "Running", bound=True), seen("b", "Running", bound=True)])
    assert await state.reconcile("team/train") is None
    [(name, namespace, status)] = writer.patches
    assert (name, namespace, status["phase"]) == ("train", "team", "Running")
    assert await state.reconcile("team/gone") is None  # no such group: nothing written
    assert len(writer.patches) == 1


async def test_the_operator_lets_a_deleted_group_go() -> None:
    state = operator(RecordingWriter(missing=True), [seen("a")])
    assert await state.reconcile("team/train") is None
