"""The steps of a PodMigrationJob: each fact leads to one status and at most one action."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from berth.api.podmigrationjob import PodMigrationJob
from berth.api.reservation import Reservation
from berth.migration.reservation import JOB_LABEL, owned_by, reservation_for
from berth.migration.steps import (
    Action,
    Facts,
    decide,
    eviction_refused,
    eviction_requested,
    forbidden,
    held,
    reservation_created,
)

CREATED = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = CREATED + timedelta(minutes=1)
Json = dict[str, Any]


def job(status: Json | None = None, **spec: Any) -> PodMigrationJob:
    body: Json = {
        "metadata": {
            "name": "move-web-1",
            "uid": "job-uid",
            "creationTimestamp": "2026-01-01T12:00:00Z",
        },
        "spec": {"podRef": {"namespace": "shop", "name": "web-1"}, **spec},
    }
    if status is not None:
        body["status"] = status
    return PodMigrationJob.from_dict(body)


def source(**meta: Any) -> Json:
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "pod-uid",
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web",
                    "uid": "rs-1",
                    "controller": True,
                }
            ],
            **meta,
        },
        "spec": {
            "nodeName": "hot",
            "schedulerName": "berth",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def reservation(phase: str | None, node: str | None = "idle", **status: Any) -> Reservation:
    body: Json = {
        "metadata": {"name": "move-web-1", "uid": "rsv-uid"},
        "spec": {"template": {}, "owners": [{"object": {"name": "x"}}]},
        "status": {"phase": phase, "nodeName": node, **status},
    }
    return Reservation.from_dict(body)


REF = {"reservationOptions": {"reservationRef": {"name": "move-web-1", "uid": "rsv-uid"}}}
RUNNING: Json = {"phase": "Running"}


def conditions(status: Json) -> dict[str, tuple[str, str | None]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in status.get("conditions") or ()}


def test_a_new_job_goes_to_arbitration() -> None:
    assert decide(Facts(job(), NOW, source())).action == Action.ARBITRATE


def test_a_job_for_a_missing_pod_fails() -> None:
    decision = decide(Facts(job(), NOW, None))
    assert decision.status == {
        "phase": "Failed",
        "reason": "MissingPod",
        "message": 'Abort job caused by missing Pod "shop/web-1"',
    }
    assert decision.events[0].warning


def test_paused_and_finished_jobs_do_nothing() -> None:
    assert decide(Facts(job(paused=True), NOW, source())).action == Action.NONE
    done = job({"phase": "Succeeded"})
    assert decide(Facts(done, NOW, source())) == decide(Facts(done, NOW, None))


def test_timeout_fails_and_releases_the_jobs_reservation() -> None:
    late = CREATED + timedelta(minutes=5)
    decision = decide(
        Facts(job(RUNNING, **REF), late, source(), reservation("Pending", None), True)
    )
    assert decision.status is not None
    assert (decision.status["phase"], decision.status["reason"]) == ("Failed", "Timeout")
    assert decision.status["message"] == "Abort job caused by timeout"
    assert decision.action == Action.RELEASE
    # A reservation the job did not make is left alone.
    decision = decide(Facts(job(RUNNING, **REF), late, source(), reservation("Pending", None)))
    assert decision.action == Action.NONE


def test_a_refused_eviction_ends_with_its_own_reason_at_the_deadline() -> None:
    status, _ = eviction_refused(
        job(RUNNING, **REF),
        "Cannot evict pod as it would violate the pod's disruption budget.",
        NOW,
    )
    late = CREATED + timedelta(minutes=5)
    decision = decide(Facts(job(status, **REF), late, source(), reservation("Available"), True))
    assert decision.status is not None
    assert decision.status["reason"] == "FailedEvict"
    assert "disruption budget" in decision.status["message"]
    assert decision.action == Action.RELEASE


def test_running_without_a_reservation_creates_one() -> None:
    assert decide(Facts(job(RUNNING), NOW, source())).action == Action.CREATE_RESERVATION


def test_the_reservation_is_the_pod_elsewhere() -> None:
    body = reservation_for(job(ttl="2m"), source())
    spec = body["spec"]
    template = spec["template"]["spec"]
    assert "nodeName" not in template
    assert template["containers"] == [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    assert template["schedulerName"] == "berth"
    terms = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["hot"]}]}
    ]
    assert spec["template"]["metadata"] == {"labels": {"app": "web"}}
    assert spec["owners"] == [
        {
            "controller": {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": "rs-1",
                "controller": True,
                "namespace": "shop",
            }
        }
    ]
    assert (spec["ttl"], spec["allocateOnce"]) == ("2m", True)
    assert spec["unschedulable"] is True  # opened when the pod is evicted
    assert body["metadata"]["name"] == "move-web-1"
    assert body["metadata"]["labels"] == {JOB_LABEL: "move-web-1"}
    assert owned_by(body, job())
    Reservation.from_dict(body)  # a valid Reservation


def test_every_required_affinity_term_avoids_the_source_node() -> None:
    pod = source()
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    other = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, other]}
        }
    }
    body = reservation_for(job(), pod)
    affinity = body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2
    assert all(t["matchFields"][0]["values"] == ["hot"] for t in terms)
    assert (
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]
        == term
    )  # the pod itself is untouched


def test_the_jobs_template_wins_over_the_pod() -> None:
    options = {"template": {"spec": {"ttl": "30m", "allocatePolicy": "Restricted"}}}
    body = reservation_for(job(reservationOptions=options), source())
    assert (body["spec"]["ttl"], body["spec"]["allocatePolicy"]) == ("30m", "Restricted")


def test_a_missing_reservation_fails_the_job() -> None:
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), None))
    assert decision.status is not None
    assert decision.status["reason"] == "MissingReservation"


def test_an_unschedulable_reservation_is_reported_and_nothing_is_evicted() -> None:
    scheduled = {
        "type": "Scheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
    }
    rsv = reservation("Pending", None, conditions=[scheduled])
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), rsv, True))
    assert decision.action == Action.NONE
    assert decision.status is not None
    assert conditions(decision.status)["ReservationScheduled"] == ("False", "Unschedulable")
    assert decision.status["message"] == "0/3 nodes are available: 3 Insufficient cpu."
    assert decision.recheck is not None
    # Said once: the same verdict again writes nothing.
    again = decide(Facts(job(decision.status, **REF), NOW, source(), rsv, True))
    assert again.status is None
    assert not again.events


def test_an_available_reservation_leads_to_eviction() -> None:
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), reservation("Available"), True))
    assert decision.action == Action.EVICT
    assert decision.status is not None
    assert decision.status["nodeName"] == "idle"
    assert conditions(decision.status)["ReservationScheduled"] == ("True", None)
    assert decision.events[0].message == 'Assigned Reservation "move-web-1" to node "idle"'


def test_a_reservation_on_the_pods_own_node_is_no_move() -> None:
    decision = decide(
        Facts(job(RUNNING, **REF), NOW, source(), reservation("Available", "hot"), True)
    )
    assert decision.status is not None
    assert decision.status["reason"] == "ForbiddenMigratePod"
    assert decision.action == Action.RELEASE


def test_expired_reservation_fails_the_job() -> None:
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), reservation("Failed"), True))
    assert decision.status is not None
    assert (decision.status["reason"], decision.status["message"]) == (
        "ReservationExpired",
        "Reservation expired",
    )


def test_a_reservation_taken_by_another_pod_before_eviction_fails_the_job() -> None:
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), reservation("Succeeded"), True))
    assert decision.status is not None
    assert decision.status["message"] == "Reservation is already bound by another Pod"


def evicting() -> Json:
    status, _ = eviction_requested(job({"phase": "Running", "nodeName": "idle"}, **REF), NOW)
    return status


def test_an_eviction_recorded_but_not_done_is_asked_for_again() -> None:
    """The request is recorded first; a process killed before asking asks after restart."""
    status = evicting()
    assert conditions(status)["Eviction"] == ("False", "Evicting")
    decision = decide(Facts(job(status, **REF), NOW, source(), reservation("Available"), True))
    assert decision.action == Action.EVICT
    assert decision.status is None


def test_the_pod_gone_completes_the_eviction_and_the_job_waits_for_the_replacement() -> None:
    decision = decide(Facts(job(evicting(), **REF), NOW, None, reservation("Available"), True))
    assert decision.status is not None
    found = conditions(decision.status)
    assert found["Eviction"] == ("True", "EvictComplete")
    assert found["PodBoundReservation"] == ("False", "WaitForPodBindReservation")
    assert decision.events[0].message == 'Pod "shop/web-1" has been evicted'
    # A terminating pod counts as gone.
    terminating = source(deletionTimestamp="2026-01-01T12:00:30Z")
    decision = decide(
        Facts(job(evicting(), **REF), NOW, terminating, reservation("Available"), True)
    )
    assert decision.status is not None
    assert conditions(decision.status)["Eviction"] == ("True", "EvictComplete")


def replacement(ready: str | None = "True") -> Json:
    allocated = json.dumps({"name": "move-web-1", "uid": "rsv-uid"})
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {
            "name": "web-2",
            "namespace": "shop",
            "uid": "new-uid",
            "annotations": {"scheduling.koordinator.sh/reservation-allocated": allocated},
        },
        "spec": {"nodeName": "idle"},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_the_bound_and_ready_replacement_ends_the_job() -> None:
    gone = decide(Facts(job(evicting(), **REF), NOW, None, reservation("Available"), True))
    assert gone.status is not None
    after = job(gone.status, **REF)
    not_ready = decide(
        Facts(after, NOW, None, reservation("Succeeded"), True, replacement("False"))
    )
    assert not_ready.status is not None
    assert not_ready.status["phase"] == "Running"
    assert "waiting for Pod" in not_ready.status["message"]
    done = decide(Facts(after, NOW, None, reservation("Succeeded"), True, replacement()))
    assert done.status is not None
    assert done.status["phase"] == "Succeeded"
    assert done.status["status"] == "Complete"
    assert done.status["message"] == 'Bind Pod "shop/web-2" in Reservation "move-web-1"'
    assert done.status["podRef"]["name"] == "web-2"
    assert "reason" not in done.status
    assert conditions(done.status)["PodBoundReservation"] == ("True", None)
    # No Ready condition (the node reports none): bound is enough.
    quiet = decide(Facts(after, NOW, None, reservation("Succeeded"), True, replacement(None)))
    assert quiet.status is not None
    assert quiet.status["phase"] == "Succeeded"


def test_the_pod_gone_before_any_eviction_is_a_missing_pod() -> None:
    decision = decide(Facts(job(RUNNING, **REF), NOW, None, reservation("Available"), True))
    assert decision.status is not None
    assert decision.status["reason"] == "MissingPod"


def test_evict_directly_succeeds_once_the_pod_is_gone() -> None:
    direct = {"mode": "EvictDirectly"}
    assert decide(Facts(job(RUNNING, **direct), NOW, source())).action == Action.EVICT
    status, _ = eviction_requested(job(RUNNING, **direct), NOW)
    decision = decide(Facts(job(status, **direct), NOW, None))
    assert decision.status is not None
    assert decision.status["phase"] == "Succeeded"
    assert decision.status["message"] == 'Pod "shop/web-1" has been evicted'


def test_a_crash_after_failing_still_releases() -> None:
    failed = job({"phase": "Failed", "reason": "Timeout"}, **REF)
    decision = decide(Facts(failed, NOW, source(), reservation("Available"), True))
    assert decision.action == Action.RELEASE
    assert decide(Facts(failed, NOW, source(), reservation("Failed"), True)).action == Action.NONE


def test_statuses_for_the_operators_outcomes() -> None:
    waiting = held(job(), "maxMigratingPerNode 2 reached on node hot")
    assert waiting == {
        "phase": "Pending",
        "reason": "Throttled",
        "message": "Waiting for arbitration: maxMigratingPerNode 2 reached on node hot",
    }
    assert held(job(waiting), "maxMigratingPerNode 2 reached on node hot") is None
    status, event = forbidden(job(), "it is a bare pod")
    assert status["reason"] == "ForbiddenMigratePod"
    assert event.message == 'Pod "shop/web-1" is forbidden to migrate because it is a bare pod'
    status, event = reservation_created(job(RUNNING), "move-web-1", NOW)
    assert conditions(status)["ReservationCreated"] == ("True", None)
    assert status["status"] == "ReservationCreated"


def test_a_sibling_replacement_in_the_reservation_after_the_eviction_request_is_success() -> None:
    """Two pods of one workload migrating at once may swap reservations."""
    decision = decide(Facts(job(evicting(), **REF), NOW, source(), reservation("Succeeded"), True))
    assert decision.status is None or decision.status.get("phase") != "Failed"
    gone = decide(Facts(job(evicting(), **REF), NOW, None, reservation("Succeeded"), True))
    assert gone.status is not None
    assert conditions(gone.status)["Eviction"] == ("True", "EvictComplete")


def test_a_pod_gone_after_a_refused_eviction_was_evicted_by_a_retry() -> None:
    status, _ = eviction_refused(job(RUNNING, **REF), "budget", NOW)
    decision = decide(Facts(job(status, **REF), NOW, None, reservation("Available"), True))
    assert decision.status is not None
    assert conditions(decision.status)["Eviction"] == ("True", "EvictComplete")


def test_a_reservation_not_tried_yet_is_waited_for_quietly() -> None:
    pending = {
        "type": "Scheduled",
        "status": "False",
        "reason": "Pending",
        "message": "waiting for the scheduler to place it",
    }
    rsv = reservation("Pending", None, conditions=[pending])
    decision = decide(Facts(job(RUNNING, **REF), NOW, source(), rsv, True))
    assert decision.status is None
    assert decision.recheck is not None
