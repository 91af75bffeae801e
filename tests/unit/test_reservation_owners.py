"""Which pods own a reservation (the scheduler's annotation on bound pods), how one
condition is set in a reservation's list, and the index that finds the reservations a
pod's labels may own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.api.meta import ConditionStatus
from berth.api.reservation import Reservation, ReservationCondition
from berth.reservation.conditions import with_condition
from berth.reservation.matching import OwnerIndex, may_own
from berth.reservation.owners import ALLOCATED_ANNOTATION, OwnerPod, owner_pod, owners_of

NOW = datetime(2024, 1, 1, 12, tzinfo=UTC)
Json = dict[str, Any]


def pod(annotation: str | None, node: str | None = "node-a", phase: str = "Running") -> Json:
    annotations = {} if annotation is None else {ALLOCATED_ANNOTATION: annotation}
    return {
        "metadata": {
            "namespace": "team",
            "name": "p",
            "uid": "pod-uid",
            "annotations": annotations,
        },
        "spec": {"nodeName": node, "containers": [{"name": "c"}]} if node else {"containers": []},
        "status": {"phase": phase},
    }


def test_a_bound_annotated_pod_is_an_owner_of_the_named_reservation() -> None:
    found = owner_pod(pod('{"name": "r", "uid": "u1"}'))
    assert found is not None
    name, owner = found
    assert name == "r"
    assert (owner.namespace, owner.name, owner.uid) == ("team", "p", "pod-uid")
    assert owner.reservation_uid == "u1"
    assert owner.holding
    assert owner.reference() == {"namespace": "team", "name": "p", "uid": "pod-uid"}


def test_a_finished_owner_no_longer_holds() -> None:
    assert not owner(pod('{"name": "r", "uid": "u1"}', phase="Succeeded")).holding


@pytest.mark.parametrize(
    ("annotation", "node"),
    [
        (None, "node-a"),  # not an owner
        ('{"name": "r", "uid": "u1"}', None),  # annotated, not bound yet
        ("not json", "node-a"),
        ('["r"]', "node-a"),
        ('{"uid": "u1"}', "node-a"),
    ],
)
def test_pods_that_own_nothing(annotation: str | None, node: str | None) -> None:
    assert owner_pod(pod(annotation, node)) is None


def test_owners_of_an_earlier_reservation_of_the_same_name_are_not_counted() -> None:
    mine, earlier, by_name = (
        owner(pod(text))
        for text in ('{"name": "r", "uid": "u2"}', '{"name": "r", "uid": "u1"}', '{"name": "r"}')
    )
    assert by_name.reservation_uid is None
    assert owners_of(reservation("u2"), [mine, earlier, by_name]) == [mine, by_name]


def reservation(uid: str, owners: list[Json] | None = None) -> Reservation:
    return Reservation.model_validate(
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r", "uid": uid},
            "spec": {
                "template": {"spec": {"containers": [{"name": "c"}]}},
                "owners": owners or [{"object": {"namespace": "team", "name": "p"}}],
            },
        }
    )


def test_an_annotated_pod_the_owners_do_not_match_owns_nothing() -> None:
    """The annotation written by hand, or copied from a template, is not trusted."""
    forged = owner(pod('{"name": "r", "uid": "u2"}'))
    others = reservation("u2", [{"labelSelector": {"matchLabels": {"app": "web"}}}])
    assert owners_of(others, [forged]) == []


def owner(body: Json) -> OwnerPod:
    found = owner_pod(body)
    assert found is not None
    return found[1]


def scheduled() -> ReservationCondition:
    return ReservationCondition.from_dict(
        {
            "type": "Scheduled",
            "status": "True",
            "reason": "Scheduled",
            "lastTransitionTime": "2024-01-01T00:00:00Z",
        }
    )


def test_a_new_condition_is_appended_and_the_others_kept() -> None:
    assert with_condition(
        [scheduled()], "Ready", ConditionStatus.FALSE, "Expired", "gone", NOW
    ) == [
        scheduled().to_dict(),
        {
            "type": "Ready",
            "status": "False",
            "reason": "Expired",
            "message": "gone",
            "lastTransitionTime": "2024-01-01T12:00:00Z",
            "lastProbeTime": "2024-01-01T12:00:00Z",
        },
    ]


@pytest.mark.parametrize(
    ("before", "transition"),
    [("True", "2024-01-01T12:00:00Z"), ("False", "2024-01-01T06:00:00Z")],
)
def test_the_transition_time_moves_only_when_the_status_flips(before: str, transition: str) -> None:
    ready = ReservationCondition.from_dict(
        {
            "type": "Ready",
            "status": before,
            "reason": "Available",
            "lastTransitionTime": "2024-01-01T06:00:00Z",
        }
    )
    out = with_condition([ready, scheduled()], "Ready", ConditionStatus.FALSE, "Expired", "m", NOW)
    assert out[0]["lastTransitionTime"] == transition
    assert out[0]["lastProbeTime"] == "2024-01-01T12:00:00Z"
    assert out[1] == scheduled().to_dict()


LABELS = st.frozensets(
    st.tuples(st.sampled_from("abc"), st.sampled_from("xy")), max_size=4
)  # a few keys and values, so that screens and pods overlap often


@settings(max_examples=300, deadline=None)
@given(
    screens=st.lists(st.lists(st.none() | LABELS.filter(bool), min_size=1, max_size=3)),
    labels=LABELS,
)
def test_the_owner_index_finds_every_reservation_the_labels_may_own(
    screens: list[list[frozenset[tuple[str, str]] | None]], labels: frozenset[tuple[str, str]]
) -> None:
    """The index may offer more candidates than the screen passes, never fewer."""
    screened = [(f"r{i}", tuple(screen)) for i, screen in enumerate(screens)]
    candidates = OwnerIndex(screened).candidates(labels)
    assert {uid for uid, screen in screened if may_own(screen, labels)} <= candidates
    assert candidates <= {uid for uid, _ in screened}
