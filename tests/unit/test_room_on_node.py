"""The room an event makes on one node: which refused pods now fit there, judged as an
attempt would judge that node, shared out in queue order, and tried at once by an idle
loop however often they were refused.

The attempts here run the cycle alone (no PostFilter, no binding) and hand a refusal to
the queue as ``schedule_one`` does, with the plugins that rejected the pod; the watch
events go through the event table.
"""

from __future__ import annotations

import pytest

from berth.scheduler.assembly import assemble
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.config import parse
from berth.scheduler.eventhandlers import RoomOnNode
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.framework.messages import FitError
from berth.scheduler.queue.scheduling_queue import SchedulingQueue
from tests.unit.scheduler_fixtures import (
    SCHEDULER,
    Env,
    Json,
    expr,
    host_port,
    info,
    make_env,
    node,
    pod,
    required_affinity,
    taint,
)
from tests.unit.test_queue import FakeClock, nothing_ready, pop_now

FIT = frozenset({"NodeResourcesFit"})
GPU = taint("dedicated", "gpu")
TOLERATES_GPU = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
TOLERATES_CORDON = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
ADDED_AFFINITY = {
    "pluginConfig": [
        {
            "name": "NodeAffinity",
            "args": {
                "addedAffinity": required_affinity(
                    {"matchExpressions": [expr("pool", "NotIn", "reserved")]}
                )["nodeAffinity"]
            },
        }
    ]
}


def room(env: Env, node_name: str) -> RoomOnNode:
    return RoomOnNode(env.view, {SCHEDULER: env.plugins}, node_name)


# -- the verdict -----------------------------------------------------------------------------


def test_a_node_is_judged_outside_an_attempt_as_an_attempt_judges_it() -> None:
    """Every filter that can judge a row alone says what the attempt's filters say of that
    node: resources beside a nominated preemptor's hold, the pod count, taints, a cordon,
    node affinity (the profile's added affinity and a metadata.name pin), host ports."""
    env = make_env(
        node("plain", labels={"zone": "a"}),
        node("full", labels={"zone": "a"}),
        node("tainted", labels={"zone": "b"}, taints=[GPU]),
        node("cordoned", unschedulable=True),
        node("ports"),
        node("reserved", labels={"pool": "reserved"}),
        node("held"),
        node("crowded", pods="2"),
        pod("filler", "3500m", node_name="full"),
        pod("web", "100m", node_name="ports", ports=[host_port(8080)]),
        pod("preemptor", "3", priority=100, nominated="held"),
        pod("one", "10m", node_name="crowded"),
        pod("two", "10m", node_name="crowded"),
        profile=ADDED_AFFINITY,
    )
    pods = [
        pod("small", "500m"),
        pod("big", "2"),
        pod("tolerant", "1", tolerations=[TOLERATES_GPU]),
        pod("cordon-proof", "1", tolerations=[TOLERATES_CORDON]),
        pod("zoned", "1", node_selector={"zone": "b"}, tolerations=[TOLERATES_GPU]),
        pod("port", "100m", ports=[host_port(8080)]),
        pod(
            "pinned",
            "100m",
            affinity=required_affinity({"matchFields": [expr("metadata.name", "In", "plain")]}),
        ),
        pod("urgent", "2", priority=200),
        pod("named", "100m", node_name="ports"),
    ]
    for raw in pods:
        wanted = info(raw)
        feasible = set(env.feasible(raw))
        for name in env.view.nodes.names:
            assert room(env, name)(wanted, FIT) == (name in feasible), (wanted.name, name)


@pytest.mark.parametrize(
    "rejected_by",
    [frozenset(), frozenset({"NodeResourcesFit", "InterPodAffinity"}), frozenset({"Unknown"})],
)
def test_a_refusal_a_row_alone_cannot_judge_is_not_known_to_be_undone(
    rejected_by: frozenset[str],
) -> None:
    """InterPodAffinity needs its PreFilter's counts; a pod refused for no plugin in
    particular (an error) has nothing to check: the answer is no, and the pod waits out
    its backoff as before."""
    env = make_env(node("n1"))
    assert room(env, "n1")(info(pod("p", "1")), FIT)
    assert not room(env, "n1")(info(pod("p", "1")), rejected_by)


def test_one_event_s_room_goes_to_the_pods_it_holds_in_turn() -> None:
    """Three cpu free: a 2-cpu pod takes two, the next 2-cpu pod finds one, and a 1-cpu
    pod after it takes the last; a node gone makes room for nobody."""
    env = make_env(node("n1"), pod("held", "1", node_name="n1"))
    freed = room(env, "n1")
    asked = (("a", "2"), ("b", "2"), ("c", "1"))
    assert [freed(info(pod(name, cpu)), FIT) for name, cpu in asked] == [True, False, True]
    assert not room(env, "gone")(info(pod("d", "1")), FIT)


# -- the queue -------------------------------------------------------------------------------


class Cluster:
    """The default profile over one view, its queue on a fake clock (backoff 1 s doubling
    to 10 s)."""

    def __init__(self, *objects: Json) -> None:
        self.clock = FakeClock()
        self.queue = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0, clock=self.clock)
        self.parts = assemble([parse({"profiles": [{}]}).profiles[0]], queue=self.queue)
        self.events = self.parts.events
        for obj in objects:
            self.add(obj)

    def add(self, obj: Json) -> None:
        if obj["kind"] == "Node":
            self.events.on_node("ADDED", obj)
        else:
            self.events.on_pod("ADDED", obj)

    def attempt(self, wanted: PodInfo) -> frozenset[str]:
        """One attempt that no node passes: the plugins that rejected the pod."""
        with pytest.raises(FitError) as caught:
            self.parts.profile().cycle.schedule(CycleState(), wanted)
        return caught.value.diagnosis.plugins

    async def refuse(self, times: int) -> PodInfo:
        """The one pending pod popped and refused ``times`` times; between two, sent back
        by a periodic check with its backoff over. Left unschedulable."""
        for done in range(times):
            popped = await pop_now(self.queue)
            self.queue.unschedulable(popped, self.attempt(popped))
            if done + 1 < times:
                self.clock.advance(10)
                self.queue.requeue(frozenset({popped.uid}), "PeriodicCheck")
        return popped

    async def tried(self, refused: PodInfo, *, at_once: bool) -> None:
        """The refused pod is popped at once, or only when its 4 s backoff ends."""
        if not at_once:
            assert await nothing_ready(self.queue)
            self.clock.advance(4)
        assert (await pop_now(self.queue)).uid == refused.uid


def churn_cluster(waiting_cpu: str) -> Cluster:
    """n1 runs 1 and 2 cpu of its 4; n2 is tainted; the pod waiting fits neither."""
    return Cluster(
        node("n1"),
        node("n2", taints=[GPU]),
        pod("one", "1", node_name="n1"),
        pod("two", "2", node_name="n1"),
        pod("waiting", waiting_cpu),
    )


@pytest.mark.parametrize(("deleted", "tried_at_once"), [("two", True), ("one", False)])
async def test_a_pod_refused_again_and_again_is_tried_at_once_when_a_deletion_makes_room(
    deleted: str, tried_at_once: bool
) -> None:
    """Refused three times by NodeResourcesFit (and TaintToleration on n2), a 3-cpu pod
    waits out 4 s backoffs. The 2-cpu pod on n1 leaves: n1 holds it now, and an idle loop
    tries it at once. The 1-cpu pod leaving frees too little: it keeps waiting."""
    cluster = churn_cluster("3")
    refused = await cluster.refuse(3)
    assert cluster.queue.is_unschedulable(refused.uid)
    cluster.events.on_pod("DELETED", pod(deleted, "2" if deleted == "two" else "1", node_name="n1"))
    if tried_at_once:
        assert (await pop_now(cluster.queue)).uid == refused.uid
        assert cluster.queue.sent_by(refused.uid) == "AssignedPodDelete"
    else:
        assert await nothing_ready(cluster.queue)


@pytest.mark.parametrize(("deleted", "tried_at_once"), [("two", True), ("one", False)])
async def test_a_pod_waiting_out_its_backoff_is_tried_at_once_when_a_deletion_makes_room(
    deleted: str, tried_at_once: bool
) -> None:
    """A taint change on n2 sends the pod back, to wait out its backoff (n2 still refuses
    it). Room made for it on n1 meanwhile has it tried at once; too little room does not,
    and it is tried when its backoff ends."""
    cluster = churn_cluster("3")
    refused = await cluster.refuse(3)
    cluster.events.on_node("MODIFIED", node("n2", taints=[GPU, taint("disk", "slow")]))
    assert not cluster.queue.is_unschedulable(refused.uid)
    assert await nothing_ready(cluster.queue)
    cluster.events.on_pod("DELETED", pod(deleted, "2" if deleted == "two" else "1", node_name="n1"))
    await cluster.tried(refused, at_once=tried_at_once)


@pytest.mark.parametrize(("untainted", "tried_at_once"), [("n2", True), ("n3", False)])
async def test_a_taint_removed_has_a_pod_tried_at_once_only_where_it_now_tolerates_them(
    untainted: str, tried_at_once: bool
) -> None:
    """The pod tolerates dedicated=gpu; n1 is full, n2 also carries disk=slow, n3 that and
    zone=edge. disk=slow removed from n2 leaves it a node the pod tolerates and fits:
    tried at once. Removed from n3, zone=edge still refuses it there: the taint change
    sends it back (TaintToleration rejected it), to wait out its backoff."""
    slow, edge = taint("disk", "slow"), taint("zone", "edge")
    cluster = Cluster(
        node("n1"),
        node("n2", taints=[GPU, slow]),
        node("n3", taints=[GPU, slow, edge]),
        pod("filler", "4", node_name="n1"),
        pod("waiting", "2", tolerations=[TOLERATES_GPU]),
    )
    refused = await cluster.refuse(3)
    left = [GPU] if untainted == "n2" else [GPU, edge]
    cluster.events.on_node("MODIFIED", node(untainted, taints=left))
    assert not cluster.queue.is_unschedulable(refused.uid)
    await cluster.tried(refused, at_once=tried_at_once)


@pytest.mark.parametrize(("deleted", "outcome"), [("two", "at once"), ("one", "unschedulable")])
async def test_room_made_during_the_attempt_has_the_pod_tried_at_once(
    deleted: str, outcome: str
) -> None:
    """The attempt decided on the view before the deletion (the cycle runs without
    awaits); the deletion came while the pod was in flight. Its refusal then meets the
    event's verdict: room for it on n1, tried at once; too little, unschedulable."""
    cluster = churn_cluster("3")
    refused = await cluster.refuse(2)
    cluster.clock.advance(10)
    cluster.queue.requeue(frozenset({refused.uid}), "PeriodicCheck")
    popped = await pop_now(cluster.queue)
    rejected_by = cluster.attempt(popped)
    cluster.events.on_pod("DELETED", pod(deleted, "2" if deleted == "two" else "1", node_name="n1"))
    cluster.queue.unschedulable(popped, rejected_by)
    if outcome == "at once":
        assert (await pop_now(cluster.queue)).uid == refused.uid
    else:
        assert cluster.queue.is_unschedulable(refused.uid)
