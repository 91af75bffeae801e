"""What the Reservation operator decides for one reservation, without a cluster: the exact
status patches and events of every transition, and when garbage collection comes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from berth.api.duration import DurationError
from berth.api.reservation import Reservation
from berth.reservation.collection import DEFAULT_GC_PERIOD, GC_PERIOD_ENV, gc_period
from berth.reservation.lifecycle import Decision, Event, decide
from berth.reservation.owners import OwnerPod, owner_pod

CREATED = datetime(2024, 1, 1, tzinfo=UTC)
EARLIER = "2024-01-01T00:00:05Z"
GC = timedelta(hours=1)
UID = "rsv-uid"

Json = dict[str, Any]


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: str, reason: str, since: str = EARLIER, **extra: str) -> Json:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"{kind} by the scheduler",
        "lastTransitionTime": since,
        **extra,
    }


SCHEDULED = condition("Scheduled", "True", "Scheduled")
UNSCHEDULABLE = condition("Scheduled", "False", "Unschedulable")
READY_AVAILABLE = condition("Ready", "True", "Available")
READY_WAITING = condition("Ready", "False", "Waiting")


def reservation(
    phase: str | None = "Available",
    *,
    conditions: list[Json] | None = None,
    node: str | None = "node-a",
    template: Json | None = None,
    **spec: Any,
) -> Reservation:
    status: Json = {}
    if phase is not None:
        status["phase"] = phase
    if node is not None and phase not in (None, "Pending"):
        status["nodeName"] = node
        status["allocatable"] = {"cpu": "2", "memory": "4Gi"}
    if conditions is not None:
        status["conditions"] = conditions
    return Reservation.from_dict(
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {
                "name": "r",
                "uid": UID,
                "resourceVersion": "7",
                "creationTimestamp": stamp(0),
            },
            "spec": {
                "template": template
                or {
                    "spec": {
                        "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
                        ]
                    }
                },
                "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
                **spec,
            },
            "status": status,
        }
    )


def pod(
    name: str,
    *,
    cpu: str = "500m",
    memory: str = "1Gi",
    phase: str = "Running",
    reservation_uid: str | None = UID,
    **spec: Any,
) -> OwnerPod:
    target = {"name": "r", **({"uid": reservation_uid} if reservation_uid else {})}
    found = owner_pod(
        {
            "metadata": {
                "namespace": "team",
                "name": name,
                "uid": f"uid-{name}",
                "annotations": {
                    "scheduling.koordinator.sh/reservation-allocated": json.dumps(target),
                },
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                ],
                **spec,
            },
            "status": {"phase": phase},
        }
    )
    assert found is not None
    assert found[0] == "r"
    return found[1]


def run(
    r: Reservation,
    seconds: float,
    *,
    owners: tuple[OwnerPod, ...] = (),
    node_gone: bool = False,
) -> Decision:
    return decide(r, at(seconds), owners=owners, node_gone=node_gone, gc_period=GC)


def ready(status: str, reason: str, message: str, since: float | str, probe: float) -> Json:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since if isinstance(since, str) else stamp(since),
        "lastProbeTime": stamp(probe),
    }


# --- expiry ----------------------------------------------------------------------------------


def test_nothing_to_write_before_expiry_and_a_recheck_at_the_deadline() -> None:
    r = reservation(ttl="30s", conditions=[SCHEDULED, READY_AVAILABLE])
    assert run(r, 29) == Decision(recheck_at=at(30))


PENDING_EXPIRED = "expired at 2024-01-01T00:00:30Z (ttl 30s after creation) while Pending"


@pytest.mark.parametrize(
    ("phase", "before", "after"),
    [
        # Pending: the scheduler's Unschedulable condition is kept; Ready is added.
        (
            "Pending",
            [UNSCHEDULABLE],
            [UNSCHEDULABLE, ready("False", "Expired", PENDING_EXPIRED, since=31, probe=31)],
        ),
        # Available: Ready flips from True, so its transition time moves.
        (
            "Available",
            [SCHEDULED, READY_AVAILABLE],
            [
                SCHEDULED,
                ready(
                    "False",
                    "Expired",
                    PENDING_EXPIRED.replace("Pending", "Available"),
                    since=31,
                    probe=31,
                ),
            ],
        ),
        # Waiting: Ready was already False, so its transition time stays.
        (
            "Waiting",
            [SCHEDULED, READY_WAITING],
            [
                SCHEDULED,
                ready(
                    "False",
                    "Expired",
                    PENDING_EXPIRED.replace("Pending", "Waiting"),
                    since=EARLIER,
                    probe=31,
                ),
            ],
        ),
    ],
)
def test_expiry_fails_every_non_terminal_phase(
    phase: str, before: list[Json], after: list[Json]
) -> None:
    r = reservation(phase, ttl="30s", conditions=before)
    message = after[-1]["message"]
    assert run(r, 31) == Decision(
        status={"phase": "Failed", "conditions": after},
        events=(Event("Expired", message, warning=True),),
    )


def test_a_reservation_no_one_has_touched_yet_expires_too() -> None:
    r = reservation(None, ttl="10s")
    decision = run(r, 10)
    assert decision.status == {
        "phase": "Failed",
        "conditions": [
            ready(
                "False",
                "Expired",
                "expired at 2024-01-01T00:00:10Z (ttl 10s after creation) while Pending",
                since=10,
                probe=10,
            )
        ],
    }


def test_the_default_ttl_is_24_hours() -> None:
    r = reservation(conditions=[SCHEDULED, READY_AVAILABLE])
    day = 24 * 3600
    assert run(r, day - 1) == Decision(recheck_at=at(day))
    decision = run(r, day)
    assert decision.status is not None
    assert decision.status["conditions"][-1]["message"] == (
        "expired at 2024-01-02T00:00:00Z (the default ttl of 24h after creation; set "
        "spec.ttl or spec.expires, ttl 0s never expires) while Available"
    )


def test_ttl_zero_never_expires() -> None:
    r = reservation(ttl="0s", conditions=[SCHEDULED, READY_AVAILABLE])
    assert run(r, 10 * 365 * 24 * 3600) == Decision()


def test_expires_sets_the_deadline() -> None:
    r = reservation(expires=stamp(100), conditions=[SCHEDULED, READY_AVAILABLE])
    assert run(r, 99) == Decision(recheck_at=at(100))
    decision = run(r, 100)
    assert decision.events == (
        Event(
            "Expired",
            "expired at 2024-01-01T00:01:40Z (spec.expires) while Available",
            warning=True,
        ),
    )


def test_a_template_without_requests_expires_like_any_other() -> None:
    r = reservation("Pending", ttl="5s", template={"spec": {"containers": [{"name": "c"}]}})
    decision = run(r, 5)
    assert decision.status is not None
    assert decision.status["phase"] == "Failed"


# --- node deleted ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "before", "since"),
    [("Available", READY_AVAILABLE, 40), ("Waiting", READY_WAITING, EARLIER)],
)
def test_a_placed_reservation_fails_when_its_node_is_deleted(
    phase: str, before: Json, since: float | str
) -> None:
    r = reservation(phase, ttl="1h", conditions=[SCHEDULED, before])
    message = "node node-a was deleted; the reservation holds nothing any more"
    assert run(r, 40, node_gone=True) == Decision(
        status={
            "phase": "Failed",
            "conditions": [SCHEDULED, ready("False", "NodeDeleted", message, since, probe=40)],
        },
        events=(Event("NodeDeleted", message, warning=True),),
    )


def test_a_pending_reservation_is_never_failed_for_its_node() -> None:
    """A pinned template.spec.nodeName that does not exist is the scheduler's to report."""
    r = reservation(
        "Pending",
        ttl="1h",
        conditions=[UNSCHEDULABLE],
        template={"spec": {"nodeName": "no-such-node", "containers": [{"name": "c"}]}},
    )
    assert run(r, 40, node_gone=True) == Decision(recheck_at=at(3600))


# --- allocateOnce ----------------------------------------------------------------------------


def test_allocate_once_succeeds_with_the_first_owner() -> None:
    r = reservation(ttl="1h", conditions=[SCHEDULED, READY_AVAILABLE])
    succeeded = "allocated once by pod team/a; the capacity it did not use is released"
    assert run(r, 50, owners=(pod("a"),)) == Decision(
        status={
            "currentOwners": [{"namespace": "team", "name": "a", "uid": "uid-a"}],
            "allocated": {"cpu": "500m", "memory": "1Gi"},
            "phase": "Succeeded",
            "conditions": [SCHEDULED, ready("False", "Succeeded", succeeded, since=50, probe=50)],
        },
        events=(
            Event("OwnerAllocated", "pod team/a allocated cpu 500m, memory 1Gi"),
            Event("Succeeded", succeeded),
        ),
    )


def test_allocate_once_wins_over_expiry_and_node_loss() -> None:
    """The pod was bound into it: that happened, whatever came after."""
    r = reservation(ttl="10s", conditions=[SCHEDULED, READY_AVAILABLE])
    decision = run(r, 50, owners=(pod("a"),), node_gone=True)
    assert decision.status is not None
    assert decision.status["phase"] == "Succeeded"


def test_allocate_once_counts_an_owner_that_already_finished() -> None:
    r = reservation(ttl="1h", conditions=[SCHEDULED, READY_AVAILABLE])
    decision = run(r, 50, owners=(pod("a", phase="Succeeded"),))
    assert decision.status is not None
    assert decision.status["phase"] == "Succeeded"
    assert "currentOwners" not in decision.status
    assert [e.reason for e in decision.events] == ["Succeeded"]


def recorded_owner(**spec: Any) -> Reservation:
    """Available, with the owner the scheduler recorded as it placed the pod."""
    r = reservation(ttl="1h", conditions=[SCHEDULED, READY_AVAILABLE], **spec)
    recorded = [{"namespace": "team", "name": "a", "uid": "uid-a"}]
    return Reservation.from_dict(
        {**r.to_dict(), "status": {**r.to_dict()["status"], "currentOwners": recorded}}
    )


def test_allocate_once_succeeds_with_a_recorded_owner_that_will_never_be_bound_into_it() -> None:
    """The scheduler records the owner before binding it; the pod may be deleted before
    the operator sees it bound. It was allocated all the same, and the record stays."""
    succeeded = "allocated once by pod team/a; the capacity it did not use is released"
    decision = decide(recorded_owner(), at(50), owners=(), node_gone=False, gc_period=GC,
                      record_spent=True)  # fmt: skip
    assert decision == Decision(
        status={
            "phase": "Succeeded",
            "conditions": [SCHEDULED, ready("False", "Succeeded", succeeded, since=50, probe=50)],
        },
        events=(Event("Succeeded", succeeded),),
    )


def test_allocate_once_waits_for_a_recorded_owner_about_to_be_bound() -> None:
    """Not bound yet: nothing is written (the record is not dropped), and it is looked at
    again soon, as the pod may go without an event the operator watches."""
    assert run(recorded_owner(), 50) == Decision(recheck_at=at(60))
    # Bound into it: announced then, with what it uses.
    decision = run(recorded_owner(), 51, owners=(pod("a"),))
    assert decision.status is not None
    assert decision.status["phase"] == "Succeeded"
    assert "currentOwners" not in decision.status  # already listed
    assert decision.status["allocated"] == {"cpu": "500m", "memory": "1Gi"}
    assert [e.reason for e in decision.events] == ["OwnerAllocated", "Succeeded"]
    # A reusable reservation keeps no record of a pod that is not there.
    reusable_one = recorded_owner(allocateOnce=False)
    decision = run(reusable_one, 50)
    assert decision.status == {"currentOwners": None}


# --- owners and allocated --------------------------------------------------------------------


def reusable(**status: Any) -> Reservation:
    r = reservation(ttl="1h", allocateOnce=False, conditions=[SCHEDULED, READY_AVAILABLE])
    if status:
        r = Reservation.from_dict({**r.to_dict(), "status": {**r.to_dict()["status"], **status}})
    return r


def test_owners_are_added_with_their_requests() -> None:
    decision = run(reusable(), 60, owners=(pod("b", cpu="1"), pod("a")))
    assert decision == Decision(
        status={
            "currentOwners": [
                {"namespace": "team", "name": "a", "uid": "uid-a"},
                {"namespace": "team", "name": "b", "uid": "uid-b"},
            ],
            "allocated": {"cpu": "1500m", "memory": "2Gi"},
        },
        events=(
            Event("OwnerAllocated", "pod team/a allocated cpu 500m, memory 1Gi"),
            Event("OwnerAllocated", "pod team/b allocated cpu 1, memory 1Gi"),
        ),
        recheck_at=at(3600),
    )


def test_nothing_is_written_when_owners_are_current() -> None:
    r = reusable(
        currentOwners=[{"namespace": "team", "name": "a", "uid": "uid-a"}],
        allocated={"cpu": "0.5", "memory": "1024Mi"},  # same amounts, written differently
    )
    assert run(r, 60, owners=(pod("a"),)) == Decision(recheck_at=at(3600))


def test_an_owner_that_finishes_or_goes_is_released() -> None:
    r = reusable(
        currentOwners=[
            {"namespace": "team", "name": "a", "uid": "uid-a"},
            {"namespace": "team", "name": "gone", "uid": "uid-gone"},
        ],
        allocated={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
    )
    decision = run(r, 60, owners=(pod("a", memory="0"), pod("done", phase="Failed")))
    assert decision == Decision(
        status={
            "currentOwners": [{"namespace": "team", "name": "a", "uid": "uid-a"}],
            # A merge patch keeps keys it does not mention: what is no longer used is nulled.
            "allocated": {"nvidia.com/gpu": None, "cpu": "500m", "memory": "0"},
        },
        events=(
            Event(
                "OwnerReleased",
                "pod team/gone no longer uses the reservation (finished or deleted)",
            ),
        ),
        recheck_at=at(3600),
    )


def test_the_last_owner_leaving_clears_owners_and_allocated() -> None:
    r = reusable(
        currentOwners=[{"namespace": "team", "name": "a", "uid": "uid-a"}],
        allocated={"cpu": "500m", "memory": "1Gi"},
    )
    assert run(r, 60).status == {"currentOwners": None, "allocated": None}


def test_allocated_uses_the_pod_request_arithmetic() -> None:
    """The largest init container beats the app containers; overhead is added."""
    owner = pod(
        "a",
        cpu="500m",
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    decision = run(reusable(), 60, owners=(owner,))
    assert decision.status is not None
    assert decision.status["allocated"] == {"cpu": "2100m", "memory": "1088Mi"}
    assert decision.events == (
        Event("OwnerAllocated", "pod team/a allocated cpu 2100m, memory 1088Mi"),
    )


def test_an_owner_without_requests_is_an_owner_with_nothing_allocated() -> None:
    owner = pod("a", cpu="0", memory="0")
    decision = run(reusable(), 60, owners=(owner,))
    assert decision.status == {
        "currentOwners": [{"namespace": "team", "name": "a", "uid": "uid-a"}],
        "allocated": {"cpu": "0", "memory": "0"},
    }


def test_owners_change_in_the_same_patch_as_expiry() -> None:
    r = reservation(ttl="10s", allocateOnce=False, conditions=[SCHEDULED, READY_AVAILABLE])
    decision = run(r, 10, owners=(pod("a"),))
    assert decision.status is not None
    assert decision.status["currentOwners"] == [{"namespace": "team", "name": "a", "uid": "uid-a"}]
    assert decision.status["phase"] == "Failed"
    assert [e.reason for e in decision.events] == ["OwnerAllocated", "Expired"]


# --- terminal reservations and garbage collection --------------------------------------------


def ended(phase: str, reason: str, probe: float | None, *, node: str | None = "node-a") -> Json:
    extra = {} if probe is None else {"lastProbeTime": stamp(probe)}
    return {
        "phase": phase,
        "conditions": [SCHEDULED, condition("Ready", "False", reason, since=stamp(20), **extra)],
        **({"nodeName": node} if node else {}),
    }


def terminal(status: Json, **spec: Any) -> Reservation:
    r = reservation(ttl="10s", **spec)
    return Reservation.from_dict({**r.to_dict(), "status": status})


@pytest.mark.parametrize(
    "status", [ended("Failed", "Expired", 30), ended("Succeeded", "Succeeded", 30)]
)
def test_a_terminal_reservation_never_moves(status: Json) -> None:
    r = terminal(status, allocateOnce=False)
    # Expired long ago, owners came and went, a pod bound into it: nothing is written.
    assert run(r, 1000, owners=(pod("late"),)) == Decision(recheck_at=at(30) + GC)


def test_a_terminal_reservation_is_collected_after_the_period() -> None:
    r = terminal(ended("Failed", "Expired", 30))
    assert run(r, 30 + 3599) == Decision(recheck_at=at(3630))
    assert run(r, 30 + 3600) == Decision(delete="ended more than 1h0m0s ago")


def test_the_period_counts_from_the_transition_without_a_probe_time() -> None:
    r = terminal(ended("Succeeded", "Succeeded", None))
    assert run(r, 0).recheck_at == at(20) + GC


def test_the_period_counts_from_creation_without_a_ready_condition() -> None:
    r = terminal({"phase": "Failed"})
    assert run(r, 0).recheck_at == at(0) + GC


def test_a_terminal_reservation_goes_at_once_when_its_node_is_gone() -> None:
    r = terminal(ended("Failed", "NodeDeleted", 30, node="node-x"))
    assert run(r, 31, node_gone=True) == Decision(delete="its node node-x no longer exists")


def test_the_gc_period_comes_from_the_environment() -> None:
    assert gc_period({}) == DEFAULT_GC_PERIOD == timedelta(hours=24)
    assert gc_period({GC_PERIOD_ENV: "90s"}) == timedelta(seconds=90)
    with pytest.raises(DurationError, match=GC_PERIOD_ENV):
        gc_period({GC_PERIOD_ENV: "a day"})


def test_a_new_reservation_is_pending_at_once_with_its_condition() -> None:
    decision = run(reservation(None), 1)
    assert decision.status is not None
    assert decision.status["phase"] == "Pending"
    (scheduled,) = decision.status["conditions"]
    assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
        "Scheduled",
        "False",
        "Pending",
    )
