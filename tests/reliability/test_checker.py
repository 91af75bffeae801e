"""The checker's own rules on hand-made snapshots (no cluster): a rule that cannot fire, or
fires on what was allowed, would make the reliability runs prove nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from berth.gang.preemption import Victim, evicted_for
from tests.reliability import watches
from tests.reliability.checker import SLACK, Checker, Snapshot
from tests.reliability.gang_invariants import (
    PLACEMENT_WITHIN,
    GangJudge,
    GangTimeline,
    Member,
    below_minimum,
    partly_placed,
    partly_placed_together,
    placements,
)
from tests.reliability.load_invariants import EXPIRATION_SECONDS, LAG, LoadJudge, loaded
from tests.reliability.numa_invariants import NumaJudge
from tests.reliability.objects import clock
from tests.reliability.quota_invariants import PREEMPTOR, preemptor_of

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
    # Bound at +30 to the node cordoned since +21: that one broke the rule. Each binding
    # is judged once the looks have surely passed its moment (SLACK after it).
    late = bound("late", "n1", T0 + 30)
    assert judge(checker, T0 + 31, node("n1", cordoned=True), early, late) == []
    found = judge(checker, T0 + 36, node("n1", cordoned=True), early, late)
    assert found == ["pod free/late bound to n1 after it was cordoned"]


def test_a_node_cordoned_again_between_two_looks_is_judged_by_the_node_watch() -> None:
    """The looks see n1 cordoned at +0 and at +20; the node watch saw it uncordoned at +8
    and cordoned again at +14. A binding at +12 is fair, one at +19 is not."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert judge(checker, T0, node("n1", cordoned=True)) == []
    fair, unfair = bound("fair", "n1", T0 + 12), bound("unfair", "n1", T0 + 19)
    changes = [(T0 + 8, "n1", node("n1")), (T0 + 14, "n1", node("n1", cordoned=True))]
    look = Snapshot(T0 + 20, {"n1": node("n1", cordoned=True)}, [fair, unfair], [], [])
    look.node_changes = changes
    assert checker.check(look) == []
    found = judge(checker, T0 + 25, node("n1", cordoned=True), fair, unfair)
    assert found == ["pod free/unfair bound to n1 after it was cordoned"]


def test_a_node_change_read_late_is_dated_by_the_node_s_own_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """n1, cordoned, is uncordoned at +9 (its managedFields say so, to the second); the
    checker's loop, busy judging, reads that watch event at +14. A binding at +11 came
    after the uncordon, and is fair: dated when it was read, the cordon would seem to hold
    past +13, two seconds after the binding (a long churn reported such a binding)."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert judge(checker, T0, node("n1", cordoned=True)) == []
    uncordoned = node("n1")
    uncordoned["metadata"]["managedFields"] = [
        {"manager": "churn", "operation": "Update", "time": stamp(T0)},
        {"manager": "kubectl", "operation": "Update", "time": stamp(T0 + 9)},
    ]
    changes = watches.NodeChanges.__new__(watches.NodeChanges)  # no watch: fed by hand
    changes._changes = []
    monkeypatch.setattr(watches.time, "time", lambda: T0 + 14)
    changes._on("MODIFIED", uncordoned)
    look = Snapshot(T0 + 15, {"n1": uncordoned}, [bound("fair", "n1", T0 + 11)], [], [])
    look.node_changes = changes.take()
    assert look.node_changes[0][0] == T0 + 10
    assert checker.check(look) == []
    assert judge(checker, T0 + 20, uncordoned, bound("fair", "n1", T0 + 11)) == []
    assert not checker.judging  # judged, and found fair


def test_a_pod_tolerating_the_cordon_may_be_bound_to_a_cordoned_node() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert judge(checker, T0, node("n1", cordoned=True)) == []
    toleration = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
    tolerating = bound("tolerating", "n1", T0 + 10, tolerations=[toleration])
    other = bound("other", "n1", T0 + 10)
    assert judge(checker, T0 + 11, node("n1", cordoned=True), tolerating, other) == []
    found = judge(checker, T0 + 16, node("n1", cordoned=True), tolerating, other)
    assert found == ["pod free/other bound to n1 after it was cordoned"]


def test_a_binding_without_its_time_is_judged_from_the_look_before() -> None:
    """A pod seen bound with no PodScheduled=True time may have been bound right after
    the look before: the cordon seen only since then does not count against it."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert judge(checker, T0, node("n1")) == []
    assert judge(checker, T0 + 1, node("n1", cordoned=True)) == []
    untimed = bound("untimed", "n1", T0)
    untimed["status"]["conditions"] = []
    assert judge(checker, T0 + 10, node("n1", cordoned=True), untimed) == []
    later = bound("later", "n1", T0)
    later["status"]["conditions"] = []
    found = judge(checker, T0 + 20, node("n1", cordoned=True), untimed, later)
    assert found == ["pod free/later bound to n1 after it was cordoned"]


def test_a_bound_pod_whose_condition_says_unschedulable_is_reported_once() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    p = bound("p", "n1", T0)
    assert judge(checker, T0 + 1, node("n1"), p) == []
    refused = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/3 nodes are available."}  # fmt: skip
    p["status"]["conditions"] = [refused]
    report = ("pod free/p bound to n1 but its PodScheduled condition says Unschedulable: "
              "0/3 nodes are available.")  # fmt: skip
    assert judge(checker, T0 + 2, node("n1"), p) == [report]
    assert judge(checker, T0 + 3, node("n1"), p) == []


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
        "pod free/a3 bound to n1 (zone a): skew 2 > 1 ({'a': 2, 'b': 1} surely there, "
        "{'a': 2, 'b': 1} possibly, 0 vanished unseen; fewest 1) "
        "a: a1@n1[-30.0s,-] a2@n1[-10.0s,-] b: b1@n2[-20.0s,-]"
    ]


def waiting(name: str, **spec: Any) -> dict[str, Any]:
    pod = bound(name, "", T0, **spec)
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending"}
    return pod


def test_a_spread_pod_bound_and_gone_between_two_looks_may_have_been_the_fewest() -> None:
    """The scheduler placed a2 beside a1 while a pod it had just bound to zone b (and then
    preempted) was there: no look saw that pod bound, only pending and then gone."""
    nodes = [node("n1", zone="a"), node("n2", zone="b")]
    spread = {"labels": {"spread": "yes"}, "topologySpreadConstraints": SPREAD}
    a1 = bound("a1", "n1", T0, **spread)
    for gone_at, expected in ((T0 + 21, []), (T0 - 30, ["skew 2 > 1"])):
        checker = Checker(SCHEDULER)
        checker.liveness = False
        look(checker, T0 - 60, nodes)
        look(checker, gone_at - 1, nodes, a1, waiting("b1", **spread))
        look(checker, gone_at, nodes, a1)
        a2 = bound("a2", "n1", T0 + 21, **spread)
        found = look(checker, T0 + 21, nodes, a1, a2) + look(checker, T0 + 27, nodes, a1, a2)
        assert [f.split(": ")[1][:10] for f in found if "skew" in f] == expected


def test_pods_of_a_deleted_node_are_no_neighbours_and_its_domain_none() -> None:
    """No scheduler counts the pods of a node that is gone (they stay until the garbage
    collector removes them), nor a zone all of whose nodes are gone."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    spread = {"labels": {"spread": "yes", **SOLO}, "topologySpreadConstraints": SPREAD}
    zoned = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": SOLO}, "topologyKey": "zone"}]}}  # fmt: skip
    n1, n2, n3 = node("n1", zone="a"), node("n2", zone="a"), node("n3", zone="c")
    old = bound("old", "n1", T0, affinity=zoned, **spread)
    assert look(checker, T0, [n1, n2, n3], old) == []
    assert look(checker, T0 + 10, [n2], old) == []  # n1 and zone c's n3 deleted
    # Bound to zone a beside a pod of the deleted n1, while zone c has no node any more.
    new = bound("new", "n2", T0 + 20, affinity=zoned, **spread)
    found = look(checker, T0 + 20, [n2], old, new)
    found += look(checker, T0 + 26, [n2], old, new)
    assert found == []
    # The same binding beside a pod of a node still there is a violation of both rules.
    checker = Checker(SCHEDULER)
    checker.liveness = False
    here = bound("here", "n1", T0, affinity=zoned, **spread)
    assert look(checker, T0, [n1, n2, n3], here) == []
    assert look(checker, T0 + 10, [n1, n2, n3], here) == []
    new = bound("new", "n2", T0 + 20, affinity=zoned, **spread)
    found = look(checker, T0 + 20, [n1, n2, n3], here, new)
    found += look(checker, T0 + 26, [n1, n2, n3], here, new)
    assert found == [
        "pod free/new bound to n2 beside free/here against free/new's anti-affinity (zone)",
        "pod free/new bound to n2 beside free/here against free/here's anti-affinity (zone)",
        "pod free/new bound to n2 (zone a): skew 2 > 1 ({'a': 1} surely there, "
        "{'a': 1} possibly, 0 vanished unseen; fewest 0) a: here@n1[-20.0s,-] c: ",
    ]


def in_namespace(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    pod["metadata"]["namespace"] = namespace
    return pod


def quota(namespace: str, cpu_min: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "q", "namespace": namespace, "creationTimestamp": stamp(T0)},
        "spec": {"min": {"cpu": cpu_min}, "max": {"cpu": "20"}},
    }


def and_later(checker: Checker, snap: Snapshot) -> list[str]:
    """The look, then one past the eviction's window with the same pods: an eviction is
    judged once the bindings then in flight have had ``SLACK`` to land."""
    later = replace(snap, taken_at=snap.taken_at + SLACK + 1, departed=[])
    return checker.check(snap) + checker.check(later)


def test_a_reclaim_from_a_quota_over_its_min_between_two_looks_is_allowed() -> None:
    """Between two looks the scheduler bound a third pod of q1 (over its min of 2), took
    one of them back for q2's pod, and the churn deleted another: neither look saw q1 over
    its min, yet the decision was right. Every pod either look saw counts."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    quotas = [quota("q1", "2"), quota("q2", "2")]
    a, b = (in_namespace(bound(n, "n1", T0 - 10), "q1") for n in ("a", "b"))
    waiting = in_namespace(bound("p", "", T0), "q2")
    waiting["spec"]["nodeName"] = ""
    nodes = {"n1": node("n1")}
    assert checker.check(Snapshot(T0, nodes, [a, b, waiting], quotas, [])) == []
    c = in_namespace(bound("c", "n1", T0 + 0.5), "q1")
    event = {
        "metadata": {"uid": "e1"},
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "a"},
    }
    after = Snapshot(T0 + 1, nodes, [c, waiting], quotas, [], [event])
    assert and_later(checker, after) == []
    # Had q1 stayed at its min throughout, the same eviction is refused.
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert checker.check(Snapshot(T0, nodes, [a, b, waiting], quotas, [])) == []
    after = Snapshot(T0 + 1, nodes, [b, waiting], quotas, [], [event])
    assert and_later(checker, after) == [
        "q2/p preempted q1/a: the victim's quota was not over its min "
        "(its pods either look saw: cpu 2 of 2)"
    ]


@pytest.mark.parametrize(("borrower", "reported"), [(False, False), (True, True)])
def test_a_pod_within_its_min_reclaims_from_other_quotas_over_theirs_only(
    borrower: bool, reported: bool
) -> None:
    """q2's pod of priority 10 would bring q2 to 3 of its min of 4, on the one node, full.
    Its own pods there have priority 0, but a pod within its min reclaims only from other
    quotas over theirs: with only quota-less pods beside its own, it may wait (the
    checker said it could reclaim their room, and the crash run reported it). With two
    pods of q1 (min 1) instead of two quota-less ones, one of them is q1's to give back."""
    checker = Checker(SCHEDULER)
    quotas = [quota("q1", "1"), quota("q2", "4")]
    own = [in_namespace(bound(f"own{i}", "n1", T0 - 10, priority=0), "q2") for i in range(2)]
    others = [bound(f"free{i}", "n1", T0 - 10) for i in range(6)]
    if borrower:
        others[:2] = [in_namespace(bound(f"b{i}", "n1", T0 - 10), "q1") for i in range(2)]
    pending = in_namespace(waiting("p", priority=10), "q2")
    nodes = {"n1": node("n1")}
    found = []
    for at in (T0, T0 + 30, T0 + 50):
        found += checker.check(Snapshot(at, nodes, [*own, *others, pending], quotas, []))
    expected = "pod q2/p Pending 45s+ while within its quota's min (its quota uses cpu 2"
    assert [line[: len(expected)] for line in found] == ([expected] if reported else [])


@pytest.mark.parametrize(("hopping", "reported"), [(False, True), (True, False)])
def test_a_pod_is_due_once_one_node_has_had_room_for_it_at_every_look(
    hopping: bool, reported: bool
) -> None:
    """Two full nodes, one CPU free on one of them at each look for 40 s. On the same node
    throughout, that room waited for the pod and the scheduler never gave it: reported.
    Freed on one node and taken at the next look while the other frees one (the churn's
    full cluster, where pods of higher priority or tried first take each freed CPU), it
    proves nothing about this pod."""
    checker = Checker(SCHEDULER)
    nodes = {"n1": node("n1"), "n2": node("n2")}
    pending = waiting("p")
    found = []
    for look in range(5):
        roomy = "n2" if hopping and look % 2 else "n1"
        pods = [bound(f"{n}-{i}", n, T0 - 60) for n in nodes for i in range(7 if n == roomy else 8)]
        found += checker.check(Snapshot(T0 + 10 * look, nodes, [*pods, pending], [], []))
    expected = "pod free/p Pending 30s+ while some node could take it (n1 has cpu 1, pods 103)"
    assert found == ([expected] if reported else [])
    assert checker.placeable == ["pod free/p (n1 has cpu 1, pods 103)"]  # the last look
    # The liveness figure: how long it waited with room on one node, beside the bound.
    waited = checker.longest_wait.get("some node could take it", (0.0, 30.0))
    assert waited == ((40.0, 30.0) if reported else (0.0, 30.0))


def test_a_reclaim_counts_a_pod_pending_before_and_gone_after() -> None:
    """q1 at its min of 2 at the look before, with a third pod pending; between the looks
    the scheduler bound it (counting it from its Reserve), took a pod of q1 back for q2's
    pod, and the churn deleted the third: it may have been there, so the reclaim is not
    refused. A pending pod still pending after proves nothing and is not counted."""
    quotas = [quota("q1", "2"), quota("q2", "2")]
    a, b = (in_namespace(bound(n, "n1", T0 - 10), "q1") for n in ("a", "b"))
    third, waiting = in_namespace(bound("c", "", T0), "q1"), in_namespace(bound("p", "", T0), "q2")
    for pod in (third, waiting):
        pod["spec"]["nodeName"] = ""
    nodes = {"n1": node("n1")}
    event = {
        "metadata": {"uid": "e1"},
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "a"},
    }
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert checker.check(Snapshot(T0, nodes, [a, b, third, waiting], quotas, [])) == []
    assert and_later(checker, Snapshot(T0 + 1, nodes, [b, waiting], quotas, [], [event])) == []
    checker = Checker(SCHEDULER)
    checker.liveness = False
    assert checker.check(Snapshot(T0, nodes, [a, b, third, waiting], quotas, [])) == []
    (found,) = and_later(checker, Snapshot(T0 + 1, nodes, [b, third, waiting], quotas, [], [event]))
    assert "the victim's quota was not over its min" in found


def test_a_reclaim_counts_a_pod_no_look_listed_that_the_watch_saw_deleted() -> None:
    """q1 at its min of 2; between two looks a third pod of q1 was created, counted by the
    scheduler (assumed or bound), a pod of q1 taken back for q2's pod, and the third
    deleted: no list showed it, the watch did. Without the watch's word the same eviction
    is refused."""
    quotas = [quota("q1", "2"), quota("q2", "2")]
    a, b = (in_namespace(bound(n, "n1", T0 - 10), "q1") for n in ("a", "b"))
    waiting = in_namespace(bound("p", "", T0), "q2")
    waiting["spec"]["nodeName"] = ""
    unlisted = in_namespace(bound("c", "n1", T0 + 0.5), "q1")
    nodes = {"n1": node("n1")}
    event = {
        "metadata": {"uid": "e1"},
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "a"},
    }
    found = []
    for departed in ([unlisted], []):
        checker = Checker(SCHEDULER)
        checker.liveness = False
        assert checker.check(Snapshot(T0, nodes, [a, b, waiting], quotas, [])) == []
        after = Snapshot(T0 + 1, nodes, [b, waiting], quotas, [], [event], departed)
        found.append(and_later(checker, after))
    assert found[0] == []
    assert "the victim's quota was not over its min" in found[1][0]


@pytest.mark.parametrize("over_at_eviction", [True, False])
def test_an_eviction_is_judged_by_the_looks_around_it_not_around_its_late_event(
    over_at_eviction: bool,
) -> None:
    """The scheduler sends its events from a queue: under load a Preempted event comes
    minutes after the eviction. q1 (min 2) held 3 pods when one was taken back for q2's
    pod, and 2 when the event came, a minute later: the reclaim was right. The other way
    round (2 then, 3 by the event's time) it was not."""
    quotas = [quota("q1", "2"), quota("q2", "2")]
    a, b, c = (in_namespace(bound(n, "n1", T0 - 10), "q1") for n in "abc")
    waiting = in_namespace(bound("p", "", T0), "q2")
    waiting["spec"]["nodeName"] = ""
    event = {
        "metadata": {"uid": "e1"},
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "a"},
    }
    nodes = {"n1": node("n1")}
    checker = Checker(SCHEDULER)
    checker.liveness = False
    then, later = ([a, b, c], [a, b]) if over_at_eviction else ([a, b], [a, b, c])
    found = checker.check(Snapshot(T0, nodes, [*then, waiting], quotas, []))
    for at in range(1, 60, 10):
        found += checker.check(Snapshot(T0 + at, nodes, [*then[1:], waiting], quotas, []))
    found += checker.check(Snapshot(T0 + 60, nodes, [*later[1:], waiting], quotas, [], [event]))
    assert found == (
        []
        if over_at_eviction
        else [
            "q2/p preempted q1/a: the victim's quota was not over its min "
            "(its pods either look saw: cpu 2 of 2)"
        ]
    )


KOORD = "quota.scheduling.koordinator.sh/"
TREE_RECLAIMED = "rl: preempting to return capacity over its runtime to the quota tree"


def tree_quota(
    name: str, namespace: str, cpu_min: str, parent: str | None = None
) -> dict[str, Any]:
    """A quota of the tree "dept" (min and max 4, in the quota-less namespace "free") over
    "a" (namespace ta) and "b" (namespace tb), each of max 4."""
    labels = {KOORD + "is-parent": "false" if parent else "true"}
    if parent:
        labels[KOORD + "parent"] = parent
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "creationTimestamp": stamp(T0)},
        "spec": {"min": {"cpu": cpu_min}, "max": {"cpu": "4"}},
    }  # fmt: skip


DEPT = [tree_quota("dept", "free", "4"), tree_quota("a", "ta", "2", "dept"),
        tree_quota("b", "tb", "2", "dept")]  # fmt: skip


def test_tree_quotas_follow_the_trees_rules_not_the_flat_ones() -> None:
    """The parent's namespace holds 6 quota-less pods (a parent governs no namespace's
    pods) and team a 4 (its max): as flat quotas, both would be over their max and the
    sum of mins. One more pod of team a is over a's max and dept's."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = {"n1": node("n1"), "n2": node("n2")}
    free = [bound(f"x{i}", "n1", T0) for i in range(6)]
    team = [in_namespace(bound(f"a{i}", "n2", T0), "ta") for i in range(4)]
    assert checker.check(Snapshot(T0, nodes, [*free, *team], DEPT, [])) == []
    more = in_namespace(bound("a4", "n2", T0), "ta")
    assert checker.check(Snapshot(T0 + 1, nodes, [*free, *team, more], DEPT, [])) == [
        "ElasticQuota ta/a: its subtree's bound pods use 5 cpu, over its max 4",
        "ElasticQuota free/dept: its subtree's bound pods use 5 cpu, over its max 4",
    ]


def test_a_leaf_that_starts_borrowing_counts_once() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = {"n1": node("n1")}
    pods = [in_namespace(bound(f"a{i}", "n1", T0), "ta") for i in range(3)]
    for at, many in ((T0, 3), (T0 + 1, 3), (T0 + 2, 2), (T0 + 3, 3)):
        checker.check(Snapshot(at, nodes, pods[:many], DEPT, []))
    assert checker.counts["tree borrows"] == 2


@pytest.mark.parametrize(("borrowed", "reported"), [(4, True), (2, False)])
def test_a_tree_pod_within_its_min_is_due_by_reclaim_from_a_sibling_over_its_runtime(
    borrowed: int, reported: bool
) -> None:
    """Team b holds ``borrowed`` of dept's 4 on the one node, full with quota-less pods
    besides; team a's pod (priority 0, below all of them) comes back within a's min of 2.
    With 4, b is over its runtime (at most 4 - 1): evicting b's pods would place it, and
    45 s of that is a violation. With 2, b holds no more than its min and a reclaim has
    nothing to take (nor is the node's room there)."""
    checker = Checker(SCHEDULER)
    nodes = {"n1": node("n1")}
    team_b = [in_namespace(bound(f"b{i}", "n1", T0 - 60, priority=100), "tb")
              for i in range(borrowed)]  # fmt: skip
    free = [bound(f"x{i}", "n1", T0 - 60, priority=100) for i in range(8 - borrowed)]
    pending = in_namespace(waiting("p", priority=0), "ta")
    found = []
    for at in (T0, T0 + 30, T0 + 50, T0 + 80):
        found += checker.check(Snapshot(at, nodes, [*team_b, *free, pending], DEPT, []))
    expected = "pod ta/p Pending 45s+ while a reclaim in its quota tree would place it (n1 frees"
    assert [line[: len(expected)] for line in found] == ([expected] if reported else [])


@pytest.mark.parametrize("reserved", [True, False])
def test_a_tree_reclaim_is_judged_by_the_trees_rules_and_after_its_reservation(
    reserved: bool,
) -> None:
    """Team a's pod of priority 0 reclaims from team b's pod of priority 100: no priority
    rule applies, only the order: its Reservation first."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = {"n1": node("n1")}
    victim = in_namespace(bound("v", "n1", T0 - 60, priority=100), "tb")
    preemptor = in_namespace(waiting("p", priority=0), "ta")
    assert checker.check(Snapshot(T0, nodes, [victim, preemptor], DEPT, [])) == []
    victim["metadata"]["deletionTimestamp"] = stamp(T0 + 1)
    victim["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "message": TREE_RECLAIMED}
    )
    event = {
        "metadata": {"uid": "e1"},
        "reason": "Preempted",
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "v"},
        "eventTime": stamp(T0 + 1),
    }
    held = {"metadata": {"name": "r", "uid": "r", "creationTimestamp": stamp(T0),
                         "labels": {"berth.io/preemptor": "p"}}, "spec": {}}  # fmt: skip
    after = Snapshot(T0 + 1, nodes, [victim, preemptor], DEPT, [held] if reserved else [], [event])
    found = and_later(checker, after) + checker.check(replace(after, taken_at=T0 + 20))
    unordered = "Pod tb/v was evicted to reclaim quota for pod p with no Reservation owned by it"
    assert found == ([] if reserved else [f"{unordered} made before"])
    assert checker.counts["tree reclaims"] == 1


def test_a_tree_pod_takes_no_pod_outside_the_tree() -> None:
    checker = Checker(SCHEDULER)
    checker.liveness = False
    nodes = {"n1": node("n1")}
    victim = bound("v", "n1", T0 - 60, priority=0)
    preemptor = in_namespace(waiting("p", priority=100), "ta")
    assert checker.check(Snapshot(T0, nodes, [victim, preemptor], DEPT, [])) == []
    event = {
        "metadata": {"uid": "e1"},
        "reason": "Preempted",
        "message": "Preempted by pod p on node n1",
        "involvedObject": {"uid": "v"},
    }
    after = Snapshot(T0 + 1, nodes, [preemptor], DEPT, [], [event])
    assert and_later(checker, after) == [
        "ta/p preempted free/v: a tree quota's pod reclaims from other tree quotas only"
    ]


def once(name: str, node_name: str, cpu: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(T0)},
        "spec": {
            "allocateOnce": True,
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": cpu}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
        },
        "status": {"phase": "Available", "nodeName": node_name, **status},
    }


def test_an_allocate_once_reservation_whose_owner_left_holds_nothing() -> None:
    """Its owner deleted before the operator wrote Succeeded, the reservation is spent:
    the scheduler may use its room for others, and that is no over-commitment."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    n1 = node("n1")
    owner = bound("owner", "n1", T0, labels={"app": "web"})
    owner["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-allocated": '{"name": "r", "uid": "uid-r"}'
    }
    others = [bound(f"p{i}", "n1", T0) for i in range(7)]
    r = once("r", "n1", "4")
    assert checker.check(Snapshot(T0 + 1, {"n1": n1}, [owner, *others], [], [r])) == []
    # The owner is gone; seven pods and nothing held on an 8-CPU node.
    assert checker.check(Snapshot(T0 + 2, {"n1": n1}, others, [], [r])) == []
    # Recorded by the scheduler, the checker never having seen the owner: spent too.
    fresh = Checker(SCHEDULER)
    fresh.liveness = False
    recorded = once("r", "n1", "4", currentOwners=[{"namespace": "free", "name": "x"}])
    assert fresh.check(Snapshot(T0 + 2, {"n1": n1}, others, [], [recorded])) == []
    # Not spent, it holds its 4 CPUs: 11 on the node, in two looks in a row (one alone
    # may fall between a pod's Reserve into a reservation and its owner record).
    unspent = Snapshot(T0 + 3, {"n1": n1}, others, [], [once("s", "n1", "4")])
    assert fresh.check(unspent) == []
    (found,) = fresh.check(Snapshot(T0 + 4, {"n1": n1}, others, [], [once("s", "n1", "4")]))
    assert found.startswith("node n1: 11 cpu used > 8 allocatable")
    assert found.endswith(f"at the looks of {clock(T0 + 3)} and {clock(T0 + 4)}"), found


def test_a_pod_allocated_from_a_reservation_made_again_under_an_ended_ones_name() -> None:
    """A preemptor's reservation is named after its pod: its node deleted, it ends Failed
    and a later preemption makes another of that name. The pod allocated from the second
    is no pod allocated from an ended reservation; one allocated from the first is."""
    checker = Checker(SCHEDULER)
    checker.liveness = False
    n1 = node("n1")
    first = once("r", "gone", "2", conditions=[{"type": "Ready", "reason": "NodeDeleted"}])
    first["status"]["phase"] = "Failed"
    assert checker.check(Snapshot(T0, {"n1": n1}, [], [], [first])) == []
    second = once("r", "n1", "2")
    second["metadata"]["uid"] = "uid-r-again"
    owner = bound("owner", "n1", T0 + 20, labels={"app": "web"})
    owner["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-allocated": '{"name": "r", "uid": "uid-r-again"}'
    }
    assert checker.check(Snapshot(T0 + 21, {"n1": n1}, [owner], [], [second])) == []
    stale = bound("stale", "n1", T0 + 22, labels={"app": "web"})
    stale["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-allocated": '{"name": "r", "uid": "uid-r"}'
    }
    found = checker.check(Snapshot(T0 + 23, {"n1": n1}, [owner, stale], [], [second]))
    assert "pod free/stale allocated from reservation r after it ended" in found


def test_a_reservation_pinned_to_a_deleted_node_is_placeable_nowhere() -> None:
    """A preemptor's reservation names the node its victims leave; that node deleted before
    it was placed, no other node may take it, however empty (it stays Pending until its
    ttl). Pinned to a node with room, it is due like any other."""
    checker = Checker(SCHEDULER)
    nodes = {"n1": node("n1")}

    def pinned(to: str) -> dict[str, Any]:
        template = {"schedulerName": SCHEDULER, "nodeName": to, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}  # fmt: skip
        return {
            "metadata": {"name": f"r-{to}", "uid": f"uid-{to}"},
            "spec": {"template": {"spec": template}, "preAllocation": True},
            "status": {"phase": "Pending"},
        }

    found = []
    for look in range(5):
        reservations = [pinned("gone"), pinned("n1")]
        found += checker.check(Snapshot(T0 + 10 * look, nodes, [], [], reservations))
    assert found == [
        "reservation r-n1 Pending 30s+ while some node could take it (n1 has cpu 8, pods 110)"
    ]


def test_a_preemptor_is_due_only_through_the_reservation_its_preemption_made() -> None:
    """n1 is empty; the preemptor's Reservation on n2 is Waiting: it is not due on n1 (it
    waits for its own). Once the Reservation is Available, it is due through it."""
    nodes = {"n1": node("n1"), "n2": node("n2")}

    def made(phase: str) -> dict[str, Any]:
        template = {"schedulerName": SCHEDULER, "nodeName": "n2", "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}  # fmt: skip
        return {
            "metadata": {
                "name": "preempt-free-p",
                "uid": "uid-r",
                "labels": {PREEMPTOR: "p"},
                "creationTimestamp": stamp(T0),
            },
            "spec": {
                "template": {"spec": template},
                "owners": [{"object": {"namespace": "free", "name": "p", "uid": "p"}}],
                "allocateOnce": True,
                "preAllocation": True,
            },
            "status": {"phase": phase, "nodeName": "n2"},
        }

    # Recorded as its owner by an attempt whose binding never happened (a scheduler killed
    # in between), it is still the preemptor's: due through it too. Recorded for another
    # pod, it is nobody's room.
    mine = [{"namespace": "free", "name": "p", "uid": "p"}]
    other = [{"namespace": "free", "name": "x", "uid": "x"}]
    for phase, recorded, expected in (
        ("Waiting", None, []),
        ("Available", None, ["its reservation preempt-free-p"]),
        ("Available", mine, ["its reservation preempt-free-p"]),
        ("Available", other, []),
    ):
        checker = Checker(SCHEDULER)
        reservation = made(phase)
        if recorded is not None:
            reservation["status"]["currentOwners"] = recorded
        found = []
        for look in range(5):
            found += checker.check(
                Snapshot(T0 + 10 * look, nodes, [waiting("p")], [], [reservation])
            )
        assert [line.split(" on n2")[0].split("(")[-1] for line in found] == expected, found


def test_a_preemptor_is_due_through_its_own_reservation_with_what_its_made_one_holds() -> None:
    """n1 (8 cpu) runs 4, r holds 2 for app=web, and the Reservation p's preemption made
    holds 2, Waiting. p (app=web) asks 4: r's 2 and the made one's 2 are both p's (the made
    one is let go when p goes into r), so p is due through r."""
    nodes = {"n1": node("n1")}
    pods = [bound(f"b{i}", "n1", T0 - 60) for i in range(4)]
    p = waiting("p", labels={"app": "web"})
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    r = once("r", "n1", "2")
    r["spec"]["allocateOnce"] = False
    template = {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "2"}}}]}
    made = {
        "metadata": {"name": "preempt-free-p", "uid": "uid-m", "labels": {PREEMPTOR: "p"}},
        "spec": {"template": {"spec": template}, "allocateOnce": True, "preAllocation": True},
        "status": {"phase": "Waiting", "nodeName": "n1"},
    }
    checker = Checker(SCHEDULER)
    found = []
    for look in range(5):
        found += checker.check(Snapshot(T0 + 10 * look, nodes, [*pods, p], [], [r, made]))
    assert [line.split(" (")[-1] for line in found] == ["its reservation r on n1 has room)"]
    # The made one on n2 instead: p is placed there alone, and r on n1 is not its room.
    nodes["n2"] = node("n2")
    made["status"]["nodeName"] = made["spec"]["template"]["spec"]["nodeName"] = "n2"
    for n in range(8):
        pods.append(bound(f"c{n}", "n2", T0 - 60))
    checker = Checker(SCHEDULER)
    found = []
    for look in range(5):
        found += checker.check(Snapshot(T0 + 10 * look, nodes, [*pods, p], [], [r, made]))
    assert found == []


def test_at_rest_a_reservation_may_record_an_owner_that_still_waits() -> None:
    """The scheduler records an allocateOnce reservation's owner before binding it; killed
    in between, the reservation lists a pod still Pending, and holds for it alone. Listing
    a pod that is bound without it, or gone, is a status out of step."""
    n1 = node("n1")
    r = once("r", "n1", "4", currentOwners=[{"namespace": "free", "name": "p", "uid": "p"}])
    assert Checker(SCHEDULER).at_rest(Snapshot(T0, {"n1": n1}, [waiting("p")], [], [r])) == []
    elsewhere = bound("p", "n1", T0)
    assert Checker(SCHEDULER).at_rest(Snapshot(T0, {"n1": n1}, [elsewhere], [], [r])) == [
        "reservation r: currentOwners ['free/p'] != []"
    ]
    assert Checker(SCHEDULER).at_rest(Snapshot(T0, {"n1": n1}, [], [], [r])) == [
        "reservation r: currentOwners ['free/p'] != []"
    ]


# -- migrations -----------------------------------------------------------------------------

WEB = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-web"}


def of_web(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [{**WEB, "controller": True}]
    return pod


def migration_reservation(phase: str = "Pending", *, closed: bool = True) -> dict[str, Any]:
    """As a ReservationFirst job makes it for a pod of ``web`` on n1: the pod's spec, kept
    off n1, owned by the pod's controller, closed to it until the job evicts."""
    off_source = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
    template = {
        "schedulerName": SCHEDULER,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [off_source]}}},
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }  # fmt: skip
    return {
        "metadata": {"name": "m1", "uid": "uid-m1", "creationTimestamp": stamp(T0)},
        "spec": {
            "template": {"spec": template},
            "owners": [{"controller": {**WEB, "controller": True, "namespace": "free"}}],
            "allocateOnce": True,
            "unschedulable": closed,
        },
        "status": {"phase": phase, **({"nodeName": "n2"} if phase != "Pending" else {})},
    }


def test_a_migration_reservation_is_due_on_a_node_other_than_its_pods() -> None:
    """Scheduled like a pod with the job's affinity: room on the pod's own node alone does
    not make it due; room on another node does."""
    nodes = {"n1": node("n1"), "n2": node("n2")}
    pod = of_web(bound("web-a", "n1", T0))
    n2_pods = [bound(f"p{i}", "n2", T0) for i in range(8)]

    def looks(pods: list[dict[str, Any]]) -> list[str]:
        checker = Checker(SCHEDULER)
        return [
            line
            for look in range(5)
            for line in checker.check(
                Snapshot(T0 + 10 * look, nodes, pods, [], [migration_reservation()])
            )
        ]

    assert looks([pod, *n2_pods]) == []  # n1 has 7 CPUs free, n2 none
    assert looks([pod, *n2_pods[:7]]) == [
        "reservation m1 Pending 30s+ while some node could take it (n2 has cpu 1, pods 103)"
    ]


def test_a_migration_moves_its_pod_into_its_reservation_as_the_rules_allow() -> None:
    """Evicted through the Eviction API (no Preempted event, no reclaim's mark), its pod's
    replacement waits while the reservation is closed and is due in it once opened; placed
    there it is an owner (through its controller) on the reservation's node. A pod of
    another controller placed there is not."""
    checker = Checker(SCHEDULER)
    nodes = {"n1": node("n1"), "n2": node("n2")}
    full = [bound(f"p{i}", "n1", T0) for i in range(7)] + [
        bound(f"q{i}", "n2", T0) for i in range(7)
    ]
    source = of_web(bound("web-a", "n1", T0))
    going = of_web(bound("web-a", "n1", T0))
    going["metadata"]["deletionTimestamp"] = stamp(T0 + 40)
    by_eviction_api = {"reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
    going["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", **by_eviction_api}
    )
    replacement = of_web(waiting("web-b"))
    found = checker.check(
        Snapshot(T0, nodes, [*full, source], [], [migration_reservation("Available")])
    )
    # Closed: no room for the replacement anywhere, for longer than any bound.
    for look in range(1, 5):
        closed = [migration_reservation("Available")]
        pods = [*full, going, replacement]
        found += checker.check(Snapshot(T0 + 10 * look, nodes, pods, [], closed, disrupted=[going]))
    assert found == []
    opened = migration_reservation("Available", closed=False)
    n1_full = [*full, bound("p7", "n1", T0 + 45)]  # what the evicted pod left is taken
    for look in range(5, 10):
        found += checker.check(
            Snapshot(T0 + 10 * look, nodes, [*n1_full, replacement], [], [opened])
        )
    assert found == ["pod free/web-b Pending 30s+ while some node could take it "
                     "(its reservation m1 on n2 has room)"]  # fmt: skip
    in_it = {"scheduling.koordinator.sh/reservation-allocated": '{"name": "m1"}'}
    moved = of_web(bound("web-b", "n2", T0 + 95))
    moved["metadata"]["annotations"] = in_it
    stranger = bound("other", "n2", T0 + 95)
    stranger["metadata"]["annotations"] = in_it
    assert checker.check(Snapshot(T0 + 96, nodes, [*n1_full, moved], [], [opened])) == []
    assert checker.counts["evictions judged"] == checker.counts["evictions unjudged"] == 0
    fresh = Checker(SCHEDULER)
    fresh.liveness = False
    assert fresh.check(Snapshot(T0 + 97, nodes, [*n1_full, stranger], [], [opened])) == [
        "pod free/other allocated from reservation m1 but is not its owner"
    ]


# -- gangs ----------------------------------------------------------------------------------


def gang(title: str, minimum: int, *members: Member) -> GangTimeline:
    return GangTimeline(title, minimum, {m.name: m for m in members})


def member(name: str, bound: float | None = None, left: float | None = None) -> Member:
    return Member(name, T0 - 60, bound, left)


def test_a_placement_that_leaves_its_gang_below_its_minimum_is_reported_once_due() -> None:
    """Two of a gang of minimum 4 bound and two left pending: reported once the window
    and the looks after it are past, not before (the other two may still land)."""
    short = gang("PodGroup q1/g1", 4, *(member(f"m{i}", T0 + i) for i in range(2)),
                 member("m2"), member("m3"))  # fmt: skip
    assert below_minimum(short, T0 + PLACEMENT_WITHIN) == []
    assert below_minimum(short, T0 + PLACEMENT_WITHIN + SLACK) == [
        f"PodGroup q1/g1: a placement at {T0:.0f} bound 2 with 0 already bound "
        "(0 left unseen) of minimum 4"
    ]


def test_a_placement_whose_bindings_land_over_its_window_reaches_its_minimum() -> None:
    """Four bindings over 7 s (retries, a loaded API) are one placement of four."""
    whole = gang("Gang free/g2", 4, *(member(f"m{i}", T0 + 2.5 * i) for i in range(4)))
    assert [p.bound for p in placements(whole)] == [4]
    assert below_minimum(whole, T0 + 60) == []


def test_members_bound_before_or_gone_around_a_placement_count_towards_it() -> None:
    """Minimum 4, placed whole at -100; two of those left at -50. A new member bound at 0
    joins one still there, one deleted by the churn just before (the scheduler may still
    have counted it) and one deleted unseen inside the window (it may have been placed,
    then lost). Without the two that left around it, the second placement is short."""
    first = [member(f"x{i}", T0 - 100, T0 - 50) for i in range(2)] + [member("old", T0 - 100)]
    around = [member("gone", T0 - 100, T0 - 3), member("unseen", None, T0 + 4)]
    new = member("new", T0)
    assert below_minimum(gang("Gang q2/g3", 4, *first, *around, new), T0 + 60) == []
    earlier = member("gone", T0 - 100, T0 - 3 * SLACK)
    assert below_minimum(gang("Gang q2/g3", 4, *first, earlier, new), T0 + 60) == [
        f"Gang q2/g3: a placement at {T0:.0f} bound 1 with 1 already bound (0 left unseen) "
        "of minimum 4"
    ]


def test_a_placement_a_kill_cut_between_its_bindings_is_excused() -> None:
    short = gang("PodGroup free/g4", 3, member("m0", T0), member("m1"), member("m2"))
    assert below_minimum(short, T0 + 60, kills=[T0 + 0.5]) == []
    assert len(below_minimum(short, T0 + 60, kills=[T0 - 30])) == 1


def test_two_gangs_each_partly_placed_with_members_pending_are_reported() -> None:
    at = T0 + 60
    first = gang("PodGroup free/a", 3, member("a0", T0), member("a1"), member("a2"))
    second = gang("Gang free/b", 2, member("b0", T0 + 5), member("b1"))
    assert partly_placed_together([first, second], at) == [
        f"gangs each partly placed at once at {at:.0f}: Gang free/b 1 of 2 bound, "
        "1 pending; PodGroup free/a 1 of 3 bound, 2 pending"
    ]
    # One such gang alone holds nothing another waits for.
    assert partly_placed_together([first], at) == []
    # Mid-placement (a binding within the window): the rest may still land.
    assert partly_placed_together([first, second], T0 + 6) == []


def test_gangs_short_because_members_left_or_a_kill_are_not_partly_placed() -> None:
    """A gang placed whole that lost a member to the churn is short by what left; one
    whose placement a kill cut may stay short; the gang with neither is."""
    at = T0 + 60
    lost = gang("PodGroup free/a", 3, member("a0", T0), member("a1", T0),
                member("a2", T0, T0 + 30), member("a3"))  # fmt: skip
    cut = gang("Gang free/c", 3, member("c0", T0 + 20), member("c1"), member("c2"))
    plain = gang("Gang free/b", 2, member("b0", T0), member("b1"))
    assert partly_placed(lost, at) is None
    assert partly_placed(cut, at, kills=[T0 + 21]) is None
    assert partly_placed(plain, at) == (1, 1)
    assert partly_placed_together([lost, cut, plain], at, kills=[T0 + 21]) == []
    assert len(partly_placed_together([lost, cut, plain], at)) == 1


def gang_pod(name: str, node_name: str, at: float, group: str = "g") -> dict[str, Any]:
    pod = in_namespace(bound(name, node_name, at), "q1")
    pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    if not node_name:
        pod["spec"]["nodeName"] = ""
        pod["status"] = {"phase": "Pending"}
    return pod


def test_the_gang_judge_follows_members_across_looks_and_the_watch() -> None:
    """A PodGroup of minimum 2: one member bound at +1, one bound between two looks and
    deleted before the next (only the watch saw it), one pending. The one the watch saw
    counts: no report. Without it, the placement is reported once, after its window."""
    group = {"metadata": {"name": "g", "namespace": "q1"}, "spec": {"minMember": 2}}
    nodes = {"n1": node("n1")}
    for watched, expected in ((True, 0), (False, 1)):
        judge_ = GangJudge(SCHEDULER)
        first = Snapshot(T0, nodes, [gang_pod("a", "", T0), gang_pod("c", "", T0)], [], [],
                         podgroups=[group])  # fmt: skip
        assert judge_.check(first) == []
        pods = [gang_pod("a", "n1", T0 + 1), gang_pod("c", "", T0)]
        second = Snapshot(T0 + 2, nodes, pods, [], [], podgroups=[group])
        second.departed = [gang_pod("b", "n1", T0 + 1)] if watched else []
        found = judge_.check(second)
        for at in range(3, 20):
            found += judge_.check(Snapshot(T0 + at, nodes, pods, [], [], podgroups=[group]))
        assert len(found) == expected, found
        assert judge_.counts["gang placements judged"] == 1


def test_a_pending_gang_member_is_not_due_as_a_single_pod() -> None:
    """A node has had room for the member for a minute: its gang decides, not the room."""
    checker = Checker(SCHEDULER)
    pending = in_namespace(waiting("m"), "q1")
    pending["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/name": "g"}
    alone = in_namespace(waiting("p"), "q1")
    found = []
    for at in (T0, T0 + 40):
        found += checker.check(Snapshot(at, {"n1": node("n1")}, [pending, alone], [], []))
    assert [line.split(" Pending")[0] for line in found] == ["pod q1/p"]


# -- NUMA -----------------------------------------------------------------------------------


def topology(name: str, *zones: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [
            {"name": f"z{i}", "resources": [{"name": "cpu", "available": cpu}]}
            for i, cpu in enumerate(zones)
        ],
    }


def guaranteed_on(name: str, node_name: str, cpu: str) -> dict[str, Any]:
    pod = bound(name, node_name, T0)
    pod["spec"]["containers"] = [
        {"name": "c", "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}}
    ]
    return pod


def test_exclusive_pods_past_the_largest_zone_are_reported_once_per_episode() -> None:
    """Two zones of 4 CPUs: 3 + 1 exclusive CPUs fit the largest zone counted pending in
    each; 3 + 2 do not. Pods sharing the pool (Burstable) are no one's concern here."""
    judge = NumaJudge(SCHEDULER)
    nodes = {"n1": node("n1")}
    topologies = {"n1": topology("n1", "4", "4")}
    shared = bound("shared", "n1", T0)  # 1 CPU requested, no limits
    within = [guaranteed_on("a", "n1", "3"), guaranteed_on("b", "n1", "1"), shared]
    assert judge.check(topologies, nodes, within) == []
    over = [guaranteed_on("a", "n1", "3"), guaranteed_on("c", "n1", "2"), shared]
    assert judge.check(topologies, nodes, over) == [
        "node n1: cpu 5 on its exclusive pods > 4, its largest NUMA zone's (free/a, free/c)"
    ]
    assert judge.check(topologies, nodes, over) == []  # the same episode
    assert judge.check(topologies, nodes, within) == []
    assert len(judge.check(topologies, nodes, over)) == 1  # a new one
    assert judge.counts["exclusive pods bound on numa nodes"] == 3
    # A node that does not align, or is gone, is not judged.
    loose = {"n1": {**topology("n1", "4", "4"), "attributes": []}}
    assert NumaJudge(SCHEDULER).check(loose, nodes, over) == []
    assert NumaJudge(SCHEDULER).check(topologies, {}, over) == []


def test_a_guaranteed_pod_is_placeable_on_a_numa_node_only_where_a_zone_has_room() -> None:
    """An 8-CPU node with 3 exclusive CPUs bound: a 2-CPU Guaranteed pod has room on the
    node but in no zone once they count in each (4 - 3); a Burstable pod fits."""
    checker = Checker(SCHEDULER)
    nodes = {"n1": node("n1")}
    nodes["n1"]["status"]["allocatable"]["memory"] = "32Gi"
    held = guaranteed_on("a", "n1", "3")
    exclusive_pod = waiting("g")
    exclusive_pod["spec"]["containers"] = [
        {"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
    ]
    found = []
    for look in range(5):
        snap = Snapshot(T0 + 10 * look, nodes, [held, exclusive_pod, waiting("b")], [], [])
        snap.topologies = {"n1": topology("n1", "4", "4")}
        found += checker.check(snap)
    assert [line.split(" Pending")[0] for line in found] == ["pod free/b"]


def metric(name: str, at: float, cpu: str) -> dict[str, Any]:
    """A NodeMetric whose latest report, written at ``at``, says the node uses ``cpu``."""
    return {
        "metadata": {"name": name},
        "status": {
            "updateTime": stamp(at),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
        },
    }


def test_a_pod_bound_to_a_node_reported_hot_throughout_is_reported() -> None:
    """Reports every 2 s: hot (7 of 8 cpu) from T0 to T0+20, then cool. A pod bound at
    T0+10 (hot from LAG before until the report after) broke the rule; one bound at T0+3
    (the first hot report younger than LAG), one at T0+21 (a cool report came before the
    next) and one on a node never reported did not; each is judged once a report after
    its binding has been seen."""
    nodes = {"n1": node("n1"), "n2": node("n2")}
    pods = [
        bound("during", "n1", T0 + 10),
        bound("early", "n1", T0 + 3),
        bound("after", "n1", T0 + 21),
        bound("elsewhere", "n2", T0 + 10),
    ]
    judge = LoadJudge(SCHEDULER)
    found = []
    for at in range(0, 30, 2):
        cpu = "7" if at < 20 else "500m"
        found += judge.check(T0 + at + 1, {"n1": metric("n1", T0 + at, cpu)}, nodes, pods)
        if at == 10:
            assert found == []
            assert judge.judging
    assert found == [
        "pod free/during bound to n1 while its NodeMetric said it was over 65% cpu "
        f"(from {LAG:.0f}s before the binding until after)"
    ]
    assert not judge.judging
    assert judge.counts["hot reports seen"] == 10
    assert judge.counts["bindings judged against reports"] == 3


def test_a_hot_or_expired_report_keeps_a_node_from_taking_a_waiting_pod() -> None:
    """Rounded as the scheduler rounds: 65.4% passes, 65.5% is over; a report older than
    the expiry refuses the node, none at all passes it."""
    n1 = node("n1")
    assert not loaded(metric("n1", T0, "5232m"), n1, T0 + 1)
    assert loaded(metric("n1", T0, "5240m"), n1, T0 + 1)
    assert loaded(metric("n1", T0, "100m"), n1, T0 + EXPIRATION_SECONDS)
    assert not loaded(None, n1, T0)
    assert not loaded({"metadata": {"name": "n1"}}, n1, T0)
    checker = Checker(SCHEDULER)
    found = []
    for look in range(5):
        snap = Snapshot(T0 + 10 * look, {"n1": n1}, [waiting("p")], [], [])
        snap.metrics = {"n1": metric("n1", T0 + 10 * look, "6")}
        found += checker.check(snap)
    assert found == []
    snap = Snapshot(T0 + 50, {"n1": n1}, [waiting("p")], [], [])
    snap.metrics = {"n1": metric("n1", T0 + 50, "1")}
    checker.check(snap)
    assert checker.placeable == ["pod free/p (n1 has cpu 8, pods 110)"]


def test_a_gang_preemptions_event_names_its_preemptor_as_a_single_preemptors_does() -> None:
    """The checker judges an eviction by the preemptor its event names: a gang's says
    kube-scheduler's words first, so its reclaims are judged (not read as "pod ?")."""
    single = {"message": "Preempted by pod uid-p on node n1"}
    assert preemptor_of(single) == "uid-p"
    here = Victim("uid-v", "free/v", "n1", 0, 0.0, "")
    whole = Victim("uid-w", "free/w", "n2", 0, 0.0, "free/lo")
    for victim in (here, whole):
        message = evicted_for("PodGroup ta/g", "ta/g-0", "uid-g0", "n1", victim)
        assert preemptor_of({"message": message}) == "uid-g0", message
    assert preemptor_of({"message": "Evicted for reasons of its own"}) == ""
