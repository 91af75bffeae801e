"""Reservations in the scheduler without a cluster: holding capacity from everyone but the
owners, owner matching, Aligned vs Restricted, the MostAllocated choice, allocateOnce, and
preemption never taking reserved capacity."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import numpy as np
import pytest

from berth.api.reservation import Reservation
from berth.reservation.matching import (
    OwnerIndex,
    PodFacts,
    affinity_of,
    is_owner,
    may_own,
    owner_keys,
    owner_screen,
)
from berth.reservation.preemption import preemption_reservation, reservation_name, serves_again
from berth.scheduler.config import ConfigError
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.plugins.reservation import Reservation as ReservationPlugin
from tests.unit.scheduler_fixtures import NOW, Env, Json, info, make_env, node, pod, ts

PROFILE = {
    "plugins": {
        "multiPoint": {"enabled": [{"name": "Reservation", "weight": 5000}]},
    }
}


def reservation(
    name: str,
    cpu: str,
    *,
    node_name: str = "n1",
    owners: list[Json] | None = None,
    phase: str = "Available",
    policy: str = "Aligned",
    once: bool = False,
    labels: dict[str, str] | None = None,
) -> Json:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": name,
            "uid": f"rsv-{name}",
            "creationTimestamp": ts(0),
            "labels": labels or {},
        },
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
            },
            "owners": owners or [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "allocatePolicy": policy,
            "allocateOnce": once,
        },
        "status": {"phase": phase, "nodeName": node_name, "allocatable": {"cpu": cpu}},
    }


def env(*objects: Json) -> Env:
    return make_env(node("n1", cpu="4"), node("n2", cpu="4"), *objects, profile=PROFILE)


def web(name: str, cpu: str = "1", **kwargs: Any) -> Json:
    return pod(name, cpu, labels={"app": "web"}, **kwargs)


def facts(**kwargs: Any) -> PodFacts:
    base: dict[str, Any] = {
        "namespace": "ns", "name": "p", "uid": "u", "labels": {}, "annotations": {},
        "owner_references": (), "tolerations": (),
    }  # fmt: skip
    return PodFacts(**{**base, **kwargs})


def test_owner_entries_are_ored_and_their_parts_anded() -> None:
    obj = reservation("r", "1", owners=[
        {"object": {"namespace": "ns", "name": "p"}},
        {"controller": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"},
         "labelSelector": {"matchLabels": {"app": "web"}}},
    ])  # fmt: skip
    rsv = Reservation.model_validate(obj)
    assert is_owner(rsv, facts())
    rs = ({"kind": "ReplicaSet", "name": "rs", "controller": True},)
    assert is_owner(rsv, facts(name="x", owner_references=rs, labels={"app": "web"}))
    assert not is_owner(rsv, facts(name="x", owner_references=rs))  # labels missing
    assert not is_owner(rsv, facts(name="x", labels={"app": "web"}))  # controller missing


@pytest.mark.parametrize(
    "owners",
    [
        [{"labelSelector": {"matchLabels": {"app": "web", "tier": "a"}}}],
        [{"labelSelector": {"matchLabels": {"app": "web"},
                            "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}],
        [{"object": {"namespace": "ns", "name": "p"}},
         {"labelSelector": {"matchLabels": {"app": "db"}}}],
        [{"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                  "values": ["web"]}]}}],
    ],
)  # fmt: skip
def test_the_owner_screen_rules_out_only_pods_that_are_no_owner(owners: list[Json]) -> None:
    """The decision record screens a pod against every reservation by the labels their
    owners' matchLabels demand and the pod their object reference names: a pod it rules
    out must be no owner, and an owner by expressions alone is left to the full check."""
    rsv = Reservation.model_validate(reservation("r", "1", owners=owners))
    screen = owner_screen(rsv)
    for labels in ({}, {"app": "web"}, {"app": "web", "tier": "a"}, {"app": "db"}, {"tier": "b"}):
        for name in ("p", "x"):
            pod_facts = facts(name=name, labels=labels)
            if is_owner(rsv, pod_facts):
                assert may_own(screen, owner_keys(pod_facts)), (labels, name)
    assert not may_own(owner_screen(rsv), frozenset()) or any(
        not (o.get("labelSelector") or {}).get("matchLabels") and "object" not in o for o in owners
    )


def test_a_preemptors_reservation_is_a_candidate_for_its_pod_alone() -> None:
    """A preemptor's reservation names its pod: filed under the pod's uid, it is screened
    out for every other pod of the namespace without asking it (hundreds of them were asked
    on every refused attempt under churn)."""
    owners = [{"object": {"namespace": "ns", "name": "p", "uid": "u-p"}}]
    rsv = Reservation.model_validate(reservation("r", "1", owners=owners))
    index = OwnerIndex([("r", owner_screen(rsv))])
    mine = facts(name="p", uid="u-p")
    other = facts(name="x", uid="u-x")
    assert index.candidates(owner_keys(mine)) == {"r"}
    assert index.candidates(owner_keys(other)) == set()
    assert is_owner(rsv, mine)
    assert not is_owner(rsv, other)


def test_reservation_affinity_reads_name_and_selector() -> None:
    affinity = affinity_of(
        {"scheduling.koordinator.sh/reservation-affinity": '{"reservationSelector": {"team": "a"}}'}
    )
    assert affinity is not None
    assert affinity.matches(Reservation.model_validate(reservation("r", "1", labels={"team": "a"})))
    assert not affinity.matches(Reservation.model_validate(reservation("r", "1")))


def test_reserved_capacity_is_taken_for_everyone_but_owners() -> None:
    made = env(reservation("r", "3"))
    other = pod("other", "2", priority=1000)
    assert made.feasible(other) == ["n2"]  # n1 has 4 - 3 reserved = 1 free
    assert made.feasible(web("w", "2")) == ["n1", "n2"]
    assert made.node_for(web("w", "2")) == "n1"  # the node with its reservation wins


def test_preemption_never_takes_reserved_capacity() -> None:
    made = make_env(
        node("n1", cpu="4"), reservation("r", "3"), pod("low", "1", node_name="n1", priority=0)
    )
    state, pod_info, diagnosis = made.diagnose(pod("high", "2", priority=1000))
    plugin = made.plugin("DefaultPreemption")
    rows = plugin.evaluator.helpful_rows(diagnosis)
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, plugin)
    assert found == []  # evicting "low" frees 1 cpu; the 3 reserved are not a victim


def place(made: Env, raw: Json) -> tuple[str, str | None]:
    state = CycleState()
    pod_info = info(raw)
    placement = made.cycle.schedule(state, pod_info)
    made.view.assume(pod_info, placement.node)
    plugin: ReservationPlugin = made.plugin("Reservation")
    plugin.reserve(state, pod_info, placement.node)
    chosen = state.data[plugin.name].chosen
    return placement.node, chosen.name if chosen else None


def test_owners_shrink_the_reservation_and_allocate_once_ends_it() -> None:
    made = env(reservation("r", "3"))
    assert place(made, web("w1", "1")) == ("n1", "r")
    held = made.book.held["rsv-r"]
    assert held.remaining() == {"cpu": 2000}
    once = env(reservation("r", "3", once=True))
    assert place(once, web("w1", "1")) == ("n1", "r")
    assert once.book.held["rsv-r"].used_up
    assert place(once, web("w2", "1"))[1] is None  # no longer offered


def test_a_reservation_ended_during_its_owners_binding_holds_nothing_after_unreserve() -> None:
    """An owner is reserved into ``r``; before its binding completes the operator writes
    ``r`` Failed (its ttl) and the watch releases it; then the allocation's write meets a
    conflict and the binding fails. Unreserve must not count the cycle's version of ``r``
    back on the node: nothing would ever release it again."""
    made = env(reservation("r", "3"), pod("other", "1", node_name="n1"))
    state = CycleState()
    owner = info(web("w", "1"))
    placement = made.cycle.schedule(state, owner)
    assert placement.node == "n1"
    made.view.assume(owner, "n1")
    plugin: ReservationPlugin = made.plugin("Reservation")
    plugin.reserve(state, owner, "n1")
    assert requested_cpu(made, "n1") == 4000  # other, w, and what r still holds
    made.add(reservation("r", "3", phase="Failed"))
    plugin.unreserve(state, owner, "n1")
    made.view.forget(owner)
    assert "rsv-r" not in made.book.held
    assert requested_cpu(made, "n1") == 1000  # other alone: w was never bound here


def test_a_version_written_here_never_brings_back_an_ended_or_newer_reservation() -> None:
    """The scheduler applies what its own status write stored once the write returns; by
    then the watch may have shown the reservation ended, or a newer version of it."""
    made = env()
    written = reservation("r", "3")
    written["metadata"]["resourceVersion"] = "10"
    ended = reservation("r", "3", phase="Failed")
    ended["metadata"]["resourceVersion"] = "11"
    made.add(written, ended)
    made.book.on_written(written)
    assert "rsv-r" not in made.book.held
    assert requested_cpu(made, "n1") == 0
    newer = reservation("r", "2")
    newer["metadata"]["resourceVersion"] = "12"
    made.add(newer)
    made.book.on_written(written)
    assert made.book.held["rsv-r"].allocatable == {"cpu": 2000}
    assert requested_cpu(made, "n1") == 2000


def test_restricted_owner_must_fit_in_the_reservation() -> None:
    made = env(reservation("r", "2", policy="Restricted"))
    assert place(made, web("small", "1")) == ("n1", "r")
    # 1 cpu left in it: a 2-cpu owner may not add free node capacity to it.
    _node_name, chosen = place(made, web("big", "2"))
    assert chosen is None
    aligned = make_env(node("n1", cpu="4"), reservation("r", "2"), profile=PROFILE)
    place(aligned, web("small", "1"))
    assert place(aligned, web("big", "2")) == ("n1", "r")


def test_two_reservations_on_one_node_the_most_allocated_is_chosen() -> None:
    made = env(reservation("big", "3"), reservation("small", "1"))
    assert place(made, web("w", "1")) == ("n1", "small")  # it ends full; "big" stays whole


def test_affinity_without_a_usable_reservation_stays_pending() -> None:
    made = env(reservation("r", "1"))
    affine = web("w", "1")
    affine["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-affinity": '{"name": "other"}'
    }
    assert "no Reservation matches the pod's reservation-affinity" in made.message(affine)


def test_waiting_and_pending_reservations() -> None:
    made = env(reservation("r", "3", phase="Waiting"))
    assert made.feasible(pod("other", "2")) == ["n2"]  # Waiting holds too
    pending = env(reservation("r", "3", phase="Pending"))
    assert made.book.held
    assert not pending.book.held
    assert np.all(pending.view.nodes.requested[:2, 0] == 0)


def test_copying_an_owners_labels_is_not_enough_when_the_owner_is_a_controller() -> None:
    """Owners by controller: a pod must be controlled by that ReplicaSet; owners by
    labelSelector: labels are the whole test, so whoever may create pods with those labels
    in any namespace may use it (use object or controller owners to prevent that)."""
    by_controller = reservation(
        "rs", "3",
        owners=[{"controller": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1"},
                 "labelSelector": {"matchLabels": {"app": "web"}}}],
    )  # fmt: skip
    made = env(by_controller)
    copycat = web("copycat", "2")  # the right labels, no ownerReference
    assert place(made, copycat)[1] is None
    assert made.feasible(web("copycat-2", "2")) == ["n2"]  # n1's reserved 3 cpu are not its
    genuine = web("genuine", "2")
    genuine["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-1",
            "uid": "u",
            "controller": True,
        }
    ]
    assert place(made, genuine) == ("n1", "rs")


def requested_cpu(made: Env, node_name: str) -> int:
    return int(made.view.nodes.requested[made.view.nodes.index[node_name], 0])


def test_an_owner_is_charged_to_the_reservation_it_was_checked_against() -> None:
    """Two reservations on a 4-cpu node: a 2-cpu owner fits only with the 3-cpu one, so it
    is credited and charged there, and the node never shows more requested than it has."""
    made = make_env(
        node("n1", cpu="4"), reservation("three", "3"), reservation("one", "1"), profile=PROFILE
    )
    assert place(made, web("w", "2")) == ("n1", "three")
    assert requested_cpu(made, "n1") == 4000
    assert made.book.held["rsv-three"].remaining() == {"cpu": 1000}
    assert made.book.held["rsv-one"].remaining() == {"cpu": 1000}


def test_an_owner_asking_exactly_what_the_larger_reservation_holds_fits() -> None:
    made = make_env(
        node("n1", cpu="4"), reservation("three", "3"), reservation("one", "1"), profile=PROFILE
    )
    assert place(made, web("w", "3")) == ("n1", "three")
    assert requested_cpu(made, "n1") == 4000


def test_a_pod_is_not_credited_with_the_sum_of_reservations_it_fits_in_none_of() -> None:
    made = make_env(
        node("n1", cpu="4"), reservation("two", "2"), reservation("other", "2"), profile=PROFILE
    )
    assert made.feasible(web("w", "3")) == []  # 2 + 2 reserved, but neither holds 3


def test_the_lowest_reservation_order_is_used_first() -> None:
    order = "scheduling.koordinator.sh/reservation-order"
    made = make_env(
        node("n1", cpu="5"),
        reservation("second", "2", labels={order: "2"}),
        reservation("first", "2", labels={order: "1"}),
        reservation("unordered", "0.5"),
        profile=PROFILE,
    )
    assert place(made, web("w", "0.5")) == ("n1", "first")


ORDER = "scheduling.koordinator.sh/reservation-order"


def test_a_reservation_the_pod_overflows_scores_zero_as_in_koordinator() -> None:
    """Node 8 cpu, 2 used; reusable big = 3 and small = 1; an owner of 2 cpu. Koordinator
    scores small 0 (the pod overflows it) and picks big; charged to small, the owner would
    take 1 cpu of the node's free capacity and a later 2-cpu pod would not fit."""
    made = make_env(
        node("n1", cpu="8"),
        pod("used", "2", node_name="n1"),
        reservation("big", "3"),
        reservation("small", "1"),
        profile=PROFILE,
    )
    assert place(made, web("w", "2")) == ("n1", "big")
    assert made.feasible(pod("later", "2")) == ["n1"]


def test_a_negative_order_is_used_first() -> None:
    made = make_env(
        node("n1", cpu="5"),
        reservation("one", "2", labels={ORDER: "1"}),
        reservation("minus", "2", labels={ORDER: "-1"}),
        profile=PROFILE,
    )
    assert place(made, web("w", "1")) == ("n1", "minus")


def scores(made: Env, raw: Json, *names: str) -> list[int]:
    """The Reservation plugin's node scores after its PreFilter, for the named nodes."""
    state, pod_info = CycleState(), info(raw)
    plugin: ReservationPlugin = made.plugin("Reservation")
    nodes = made.view.nodes
    plugin.pre_filter(state, pod_info, nodes)
    rows = np.array([nodes.index[n] for n in names], dtype=np.int64)
    return [int(s) for s in plugin.score(state, pod_info, nodes, rows)]


def test_the_node_holding_the_lowest_order_is_preferred_across_nodes() -> None:
    """Koordinator's PreScore: the node with the lowest-ordered reservation scores most,
    the others by how full their reservation would be (MostAllocated), normalised."""
    made = env(
        reservation("full", "1", labels={ORDER: "2"}),
        reservation("first", "4", node_name="n2", labels={ORDER: "1"}),
    )
    assert scores(made, web("w", "1"), "n1", "n2") == [10, 100]
    assert place(made, web("w", "1")) == ("n2", "first")


def test_nodes_score_by_how_full_their_reservation_would_be() -> None:
    made = env(reservation("two", "2"), reservation("four", "4", node_name="n2"))
    assert scores(made, web("w", "2"), "n1", "n2") == [100, 50]


def owner_in(raw: Json, reservation_name: str) -> Json:
    """A pod bound into a reservation, as the watch shows it after Berth placed it."""
    raw["metadata"].setdefault("annotations", {})[
        "scheduling.koordinator.sh/reservation-allocated"
    ] = f'{{"name": "{reservation_name}", "uid": "rsv-{reservation_name}"}}'
    return raw


def candidates(made: Env, raw: Json) -> list[Any]:
    state, pod_info, diagnosis = made.diagnose(raw)
    plugin = made.plugin("DefaultPreemption")
    rows = plugin.evaluator.helpful_rows(diagnosis)
    found, _ = plugin.evaluator.find_candidates(state, pod_info, rows, diagnosis.nodes, plugin)
    return [[v.name for v in c.victims] for c in found]


def test_a_stranger_never_evicts_an_owner_of_a_reusable_reservation() -> None:
    """Evicting the owner would give its share back to the reservation, not to the stranger."""
    made = make_env(
        node("n1", cpu="4"),
        reservation("r", "3"),
        owner_in(web("w1", "2", node_name="n1"), "r"),
        profile=PROFILE,
    )
    assert made.book.held["rsv-r"].remaining() == {"cpu": 1000}
    assert candidates(made, pod("stranger", "2", priority=1000)) == []


def test_an_owner_may_evict_a_lower_priority_owner_of_the_same_reservation() -> None:
    made = make_env(
        node("n1", cpu="4"),
        reservation("r", "3"),
        owner_in(web("w1", "3", node_name="n1"), "r"),
        profile=PROFILE,
    )
    assert candidates(made, web("w2", "3", priority=100)) == [["w1"]]


@pytest.mark.parametrize("policy", ["Aligned", "Restricted"])
@pytest.mark.parametrize("stranger_priority", [0, 2000])
def test_a_victims_share_flows_back_into_the_reservation_in_the_dry_run(
    stranger_priority: int, policy: str
) -> None:
    """Node 4 cpu, reusable r = 3 holding owner w1 (2 cpu), a stranger x (1 cpu). Owner w2
    (3 cpu) needs only w1 gone: its 2 cpu go back into r, which then takes w2 whole. x is
    no victim, and when x outranks w2, evicting w1 alone is still found."""
    made = make_env(
        node("n1", cpu="4"),
        reservation("r", "3", policy=policy),
        owner_in(web("w1", "2", node_name="n1"), "r"),
        pod("x", "1", node_name="n1", priority=stranger_priority),
        profile=PROFILE,
    )
    assert candidates(made, web("w2", "3", priority=100)) == [["w1"]]
    assert made.book.held["rsv-r"].remaining() == {"cpu": 1000}  # the dry run left it as it was
    assert made.feasible(pod("y", "1")) == []


def test_a_nominated_pods_hold_never_covers_reserved_capacity() -> None:
    made = make_env(
        node("n1", cpu="4"),
        reservation("r", "3"),
        pod("low", "1", node_name="n1"),
        pod("stranger", "2", priority=1000, nominated="n1"),
        profile=PROFILE,
    )
    # 0 cpu unreserved is free and the stranger holds 2 of it: the owner still gets its 3.
    assert made.feasible(web("w", "3")) == ["n1"]


def affine(raw: Json, affinity: str) -> Json:
    raw["metadata"]["annotations"] = {"scheduling.koordinator.sh/reservation-affinity": affinity}
    return raw


def test_reservation_selector_terms_choose_among_reservations() -> None:
    made = make_env(
        node("n1", cpu="4"),
        reservation("a", "1", labels={"tier": "gold"}),
        reservation("b", "1", labels={"tier": "silver"}),
        profile=PROFILE,
    )
    terms = (
        '{"requiredDuringSchedulingIgnoredDuringExecution": {"reservationSelectorTerms": '
        '[{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["silver"]}]}]}}'
    )
    assert place(made, affine(web("w", "1"), terms)) == ("n1", "b")


def test_reservation_taints_are_tolerated_by_the_affinitys_tolerations_only() -> None:
    tainted = reservation("r", "2")
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    own = web("own", "1", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert place(make_env(node("n1", cpu="4"), tainted, profile=PROFILE), own)[1] is None
    tolerating = affine(
        web("aff", "1"), '{"tolerations": [{"key": "dedicated", "operator": "Exists"}]}'
    )
    made = make_env(node("n1", cpu="4"), tainted, profile=PROFILE)
    assert place(made, tolerating) == ("n1", "r")


def test_an_unschedulable_reservation_is_used_only_by_pods_tolerating_it() -> None:
    closed = reservation("r", "2")
    closed["spec"]["unschedulable"] = True
    assert place(make_env(node("n1", cpu="4"), closed, profile=PROFILE), web("w", "1"))[1] is None
    tolerating = affine(
        web("t", "1"),
        '{"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}',
    )
    made = make_env(node("n1", cpu="4"), closed, profile=PROFILE)
    assert place(made, tolerating) == ("n1", "r")


def test_exact_match_reservation() -> None:
    exact = '{"resourceNames": ["cpu"]}'
    made = make_env(node("n1", cpu="8"), reservation("r", "2"), profile=PROFILE)
    smaller = web("small", "1")
    smaller["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/exact-match-reservation": exact
    }
    assert place(made, smaller)[1] is None
    same = web("same", "2")
    same["metadata"]["annotations"] = {"scheduling.koordinator.sh/exact-match-reservation": exact}
    assert place(made, same) == ("n1", "r")


def test_a_reservation_ignored_pod_sees_reserved_capacity_as_free_and_owns_nothing() -> None:
    made = make_env(node("n1", cpu="4"), reservation("r", "3"), profile=PROFILE)
    ignoring = pod(
        "i", "4", labels={"app": "web", "scheduling.koordinator.sh/reservation-ignored": "true"}
    )
    assert made.feasible(ignoring) == ["n1"]
    assert place(made, ignoring) == ("n1", None)


def test_an_unknown_reservation_affinity_field_is_refused_by_name() -> None:
    made = make_env(node("n1", cpu="4"), reservation("r", "1"), profile=PROFILE)
    message = made.message(affine(web("w", "1"), '{"nmae": "r"}'))
    assert "unknown field(s) nmae" in message


def test_the_allocated_annotation_on_a_pod_that_is_no_owner_is_not_trusted() -> None:
    """Written by hand or copied from a template: the pod gets nothing of the reservation,
    and the reservation keeps holding all it holds."""
    made = make_env(
        node("n1", cpu="4"),
        reservation("r", "3"),
        owner_in(pod("forged", "2", node_name="n1", labels={"app": "db"}), "r"),
        profile=PROFILE,
    )
    assert made.book.held["rsv-r"].owners == {}
    assert made.book.held["rsv-r"].remaining() == {"cpu": 3000}


def test_story_1_reservation_names_and_holds_only_for_its_preemptor() -> None:
    long = reservation_name("team", "p" * 300, "0123456789abcdef")
    assert len(long) <= 253
    assert long.endswith("-01234567")
    body = preemption_reservation(
        namespace="team",
        name="web-0",
        uid="u-1",
        requests={"cpu": 1500, "memory": 2 * 1024**3},
        priority=100,
        scheduler_name="berth-scheduler",
        node="n1",
        ttl=timedelta(minutes=2),
    )
    rsv = Reservation.model_validate(body)
    assert rsv.spec.allocate_once
    assert rsv.spec.ttl is not None
    assert body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1500m",
        "memory": "2Gi",
    }
    assert is_owner(rsv, facts(namespace="team", name="web-0", uid="u-1"))
    assert not is_owner(rsv, facts(namespace="team", name="web-1", uid="u-2"))


def made_for(raw: Json, node_name: str, phase: str) -> Json:
    """The Reservation a preemption made for ``raw``, as placed on ``node_name``."""
    meta = raw["metadata"]
    body = preemption_reservation(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        requests={"cpu": 1000},
        priority=0,
        scheduler_name="berth-scheduler",
        node=node_name,
        ttl=timedelta(minutes=2),
    )
    body["metadata"].update(uid=f"rsv-{meta['name']}", creationTimestamp=ts(3600 - 10))
    body["status"] = {"phase": phase, "nodeName": node_name, "allocatable": {"cpu": "1"}}
    return body


def test_a_preemptor_waits_for_the_reservation_made_for_it_though_room_is_free_elsewhere() -> None:
    """What was evicted for a preemptor is its: while its Reservation waits for the victims
    to leave it is placed nowhere else, and once Available only there. Bound elsewhere,
    it would leave the Reservation holding the freed room for nobody until its ttl."""
    preemptor = pod("p", "1")
    waiting = env(made_for(preemptor, "n1", "Waiting"))
    assert waiting.feasible(pod("stranger", "1")) == ["n1", "n2"]  # n2 has room
    assert "waits for Reservation preempt-default-p-uid-defa, made for it" in waiting.message(
        preemptor
    )
    available = env(made_for(preemptor, "n1", "Available"))
    assert available.feasible(preemptor) == ["n1"]
    # Taken, or past its ttl, it binds the pod no longer.
    expired = made_for(preemptor, "n1", "Available")
    expired["spec"]["ttl"] = "5s"
    assert env(expired).feasible(preemptor) == ["n1", "n2"]


async def test_a_preemptor_whose_victim_gave_back_to_its_own_reservation_goes_there() -> None:
    """p's victim ran in r (Restricted, 2 cpu, for app=web: p is an owner too); evicted, it
    gave its share back to r, not to n1, so the Reservation made for p stays Waiting for
    room that never comes. p goes into r, on n1 alone though n2 has room, and the one made
    for it is let go at PreBind instead of holding for nobody until its ttl (the churn
    left such a preemptor refused until its node went)."""
    preemptor = web("p", "1")
    made = env(
        pod("other", "2", node_name="n1"),
        reservation("r", "2", policy="Restricted"),
        made_for(preemptor, "n1", "Waiting"),
    )
    assert made.feasible(preemptor) == ["n1"]
    state = CycleState()
    owner = info(preemptor)
    made.view.assume(owner, made.cycle.schedule(state, owner).node)
    plugin: ReservationPlugin = made.plugin("Reservation")
    plugin.reserve(state, owner, "n1")
    assert state.data[plugin.name].chosen.name == "r"
    deleted: list[str] = []

    class Writes:
        async def delete_reservation(self, name: str, uid: str) -> None:
            deleted.append(name)

        async def annotate(self, pod: Any, annotations: dict[str, Any]) -> None:
            pass

    plugin.handle.writer = cast(Any, Writes())
    assert (await plugin.pre_bind(state, owner, "n1")).ok
    assert deleted == ["preempt-default-p-uid-defa"]


def test_a_preemptor_goes_into_its_own_reservation_with_what_its_made_one_holds() -> None:
    """n1 (4 cpu) runs 2, holds 1 in r (Aligned, p an owner) and 1 in the Reservation p's
    preemption made, Waiting for room r now holds. p asks 2: r's 1 and the made one's 1
    are both p's, so p goes into r on n1 (the made one is let go at PreBind). Counted
    against p, the made one kept p out of r, and itself Waiting, for good (the crash churn
    left such a preemptor refused past 30 s)."""
    preemptor = web("p", "2")
    made = env(
        pod("other", "2", node_name="n1"),
        reservation("r", "1"),
        made_for(preemptor, "n1", "Waiting"),
    )
    assert made.feasible(preemptor) == ["n1"]


@pytest.mark.parametrize(
    ("policy", "cpu", "why"),
    [
        ("Restricted", "3", "r: Restricted and the pod does not fit in what is left"),
        ("Aligned", "3", "r: cpu 1 left in it is short beside the node's free room"),
    ],
)
def test_a_preemptor_waiting_for_its_made_reservation_is_told_why_its_others_do_not_take_it(
    policy: str, cpu: str, why: str
) -> None:
    """p owns r on the node where the Reservation its preemption made waits; r does not
    take it now, and the refusal says why beside what it waits for."""
    preemptor = web("p", cpu)
    made = env(
        pod("other", "2", node_name="n1"),
        reservation("r", "2" if policy == "Restricted" else "1", policy=policy),
        made_for(preemptor, "n1", "Waiting"),
    )
    refusal = made.diagnose(preemptor)[2].prefilter
    assert refusal is not None
    message = " ".join(refusal.reasons)
    assert message.startswith("waits for Reservation preempt-default-p-uid-defa"), message
    assert message.endswith(f"(its Reservations there: {why})"), message


def test_reservation_plugin_args_are_checked_by_name() -> None:
    def args(**given: Any) -> Json:
        return {**PROFILE, "pluginConfig": [{"name": "Reservation", "args": given}]}

    make_env(profile=args(enablePreemption=False))  # Koordinator's default: how Berth works
    with pytest.raises(ConfigError, match="enablePreemption: true is not supported"):
        make_env(profile=args(enablePreemption=True))
    with pytest.raises(ConfigError, match="gcDurationSeconds: not supported"):
        make_env(profile=args(gcDurationSeconds=60))
    with pytest.raises(ConfigError, match=r"reservePreemptedCapcity: unknown field.*did you mean"):
        make_env(profile=args(reservePreemptedCapcity=True))
    ttl = {"preemptionReservationTTL": "0s", "reservePreemptedCapacity": True}
    zero = {**PROFILE, "pluginConfig": [{"name": "Reservation", "args": ttl}]}
    with pytest.raises(ConfigError, match="preemptionReservationTTL must be above 0s"):
        make_env(profile=zero)


def test_an_owner_stays_shielded_after_its_allocate_once_reservation_succeeded() -> None:
    done = reservation("r", "3", once=True, phase="Succeeded")
    made = make_env(
        node("n1", cpu="4"), done, owner_in(web("w1", "3", node_name="n1"), "r"), profile=PROFILE
    )
    assert "rsv-r" not in made.book.held  # ended: it holds nothing any more
    assert candidates(made, pod("stranger", "2", priority=1000)) == []
    # Once the reservation is gone, w1 is an ordinary pod again.
    made.events.on_custom("Reservation")("DELETED", done)
    assert candidates(made, pod("stranger", "2", priority=1000)) == [["w1"]]


def test_an_owner_placed_here_is_shielded_once_the_watch_shows_its_annotation() -> None:
    """The node table keeps the pod as it was assumed (no annotation yet); the shield reads
    the watch's latest version of it."""
    made = make_env(node("n1", cpu="4"), reservation("r", "3", once=True), profile=PROFILE)
    assert place(made, web("w1", "3")) == ("n1", "r")
    made.events.on_pod("MODIFIED", owner_in(web("w1", "3", node_name="n1"), "r"))
    made.events.on_custom("Reservation")(
        "MODIFIED", reservation("r", "3", once=True, phase="Succeeded")
    )
    assert candidates(made, pod("stranger", "2", priority=1000)) == []


@pytest.mark.parametrize("ended", [False, True])
async def test_an_owner_whose_reservation_ended_while_its_binding_waited_is_not_bound_into_it(
    ended: bool,
) -> None:
    """An owner is reserved into ``r``; its binding waits its turn for the API. Should
    the watch show ``r`` ended meanwhile, PreBind refuses (the binding fails and the pod is
    tried again) instead of annotating it an owner of a reservation that no longer holds."""
    made = env(reservation("r", "3"))
    state = CycleState()
    owner = info(web("w", "1"))
    made.view.assume(owner, made.cycle.schedule(state, owner).node)
    plugin: ReservationPlugin = made.plugin("Reservation")
    plugin.reserve(state, owner, "n1")
    annotated: list[dict[str, Any]] = []

    class Writes:
        async def annotate(self, pod: Any, annotations: dict[str, Any]) -> None:
            annotated.append(annotations)

    plugin.handle.writer = cast(Any, Writes())
    if ended:
        made.add(reservation("r", "3", phase="Failed"))
    status = await plugin.pre_bind(state, owner, "n1")
    assert status.ok is not ended
    assert bool(annotated) is not ended
    if ended:
        assert status.message == "reservation r ended since it was chosen"


def expiring(name: str, cpu: str, at: float, node_name: str = "n1") -> Json:
    made = reservation(name, cpu, node_name=node_name)
    made["spec"]["expires"] = ts(at)
    return made


def test_an_owner_is_not_placed_into_a_reservation_past_its_expiry_not_yet_marked_failed() -> None:
    """The operator has not written Failed yet (behind after a restart): the reservation
    still holds its capacity from everyone, and takes no owner more."""
    made = env(expiring("gone", "3", at=60), expiring("live", "3", at=7200, node_name="n2"))
    assert place(made, web("w1", "1")) == ("n2", "live")
    plugin: ReservationPlugin = made.plugin("Reservation")
    record = plugin.explain(CycleState(), info(web("w2", "1")))
    reasons = {r["name"]: r["reason"] for r in record["reservations"]}
    assert reasons["gone"] == "expired at 2024-01-01T00:01:00Z, not marked Failed yet"


async def test_an_owner_whose_reservation_expired_while_its_binding_waited_is_refused() -> None:
    made = env(expiring("r", "3", at=3605))
    state = CycleState()
    owner = info(web("w", "1"))
    made.view.assume(owner, made.cycle.schedule(state, owner).node)
    plugin: ReservationPlugin = made.plugin("Reservation")
    plugin.reserve(state, owner, "n1")
    assert state.data[plugin.name].chosen.name == "r"
    plugin.handle.clock = lambda: NOW + timedelta(seconds=10)
    plugin.handle.writer = cast(Any, object())
    status = await plugin.pre_bind(state, owner, "n1")
    assert status.message == "reservation r ended since it was chosen"


@pytest.mark.parametrize(
    ("status", "deleting", "serves"),
    [
        ({"phase": "Waiting", "nodeName": "n1"}, False, True),
        ({"phase": "Available", "nodeName": "n1"}, False, True),
        ({"phase": "Available", "nodeName": "n2"}, False, False),
        ({"phase": "Available", "nodeName": "n1", "currentOwners": [{"uid": "x"}]}, False, False),
        ({"phase": "Waiting", "nodeName": "n1"}, True, False),
        ({"phase": "Failed", "nodeName": "n1"}, False, False),
        ({"phase": "Pending"}, False, False),
    ],
)
def test_a_preemptors_earlier_reservation_serves_only_holding_the_same_node_for_nobody(
    status: dict[str, Any], deleting: bool, serves: bool
) -> None:
    meta = {"name": "r", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    assert serves_again({"metadata": meta, "status": status}, "n1") is serves
