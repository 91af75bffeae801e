"""The scheduling loop without a cluster: schedule_one, a failed binding, the unschedulable
path, queueing hints, and a Reservation placed through the same plugin points.

The writer is a recorder of what the loop would send to the API server: these tests are
about the loop's decisions, the integration tests about the API calls themselves.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from berth.kube.write import Conflict, NotFound
from berth.reservation.owners import ALLOCATED_ANNOTATION
from berth.reservation.preemption import reservation_name
from berth.scheduler.assembly import Assembly, assemble
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import template_pod
from berth.scheduler.config import Profile
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.placement import placeable_on, unplaced
from berth.scheduler.queue.scheduling_queue import SchedulingQueue
from berth.scheduler.schedule_one import ScheduleOne
from berth.scheduler.writer import Writer
from tests.unit.scheduler_fixtures import Json, node, pod

CLOCK = datetime(2026, 1, 1, 1, tzinfo=UTC)  # the scheduler's: an hour after reservations are made

RESERVATION_PROFILE = {
    "schedulerName": "berth-scheduler",
    "plugins": {"multiPoint": {"enabled": [{"name": "Reservation"}]}},
}


class RecordingWriter:
    """What the loop asks the API server to do, in order; ``refuse_bind`` makes bindings fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.versions: list[str | None] = []  # of each reservation_status call
        self.refuse_bind = False
        self.before_evict: Callable[[PodInfo], None] | None = None
        self.gone: set[str] = set()  # pods deleted from the API server: writes meet 404
        self.reservations: dict[str, Json] = {}  # by name, as the API server keeps them
        self.refuse_status = False  # reservation status writes meet 409
        self.hold_evictions: asyncio.Event | None = None  # victims' removals wait for it
        self.refuse_evict = False  # victims' evictions and deletions meet a 500

    async def bind(self, pod: PodInfo, node: str) -> None:
        if self.refuse_bind:
            raise ApiException(status=409, reason="Conflict")
        self.calls.append(("bind", (pod.name, node)))

    async def unschedulable(self, pod: PodInfo, message: str) -> None:
        self.calls.append(("unschedulable", (pod.name, message)))

    async def reservation_status(
        self,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
        still: Callable[[Json], bool] | None = None,
    ) -> None:
        if self.refuse_status:
            raise Conflict(status=409, reason="Conflict")
        self.calls.append(("reservation_status", (name, status)))
        self.versions.append(resource_version)

    async def annotate(self, pod: PodInfo, annotations: dict[str, str | None]) -> None:
        self.calls.append(("annotate", (pod.name, annotations)))

    async def pod_group_scheduled(self, group: Json, condition: Json) -> None:
        self.calls.append(("pod_group_scheduled", (group["metadata"]["name"], condition)))

    async def create_reservation(self, body: Json) -> Json:
        name = body["metadata"]["name"]
        if name in self.reservations:
            self.calls.append(("create_reservation refused", name))
            raise Conflict(status=409, reason="AlreadyExists")
        uid = "rsv-made" if "create_reservation" not in [c[0] for c in self.calls] else "rsv-2"
        created = {**body, "metadata": {**body["metadata"], "uid": uid}}
        self.calls.append(("create_reservation", created))
        self.reservations[name] = created
        return created

    async def read_reservation(self, name: str) -> Json | None:
        return self.reservations.get(name)

    async def delete_reservation(self, name: str, uid: str) -> None:
        self.calls.append(("delete_reservation", (name, uid)))
        if self.reservations.get(name, {}).get("metadata", {}).get("uid") == uid:
            del self.reservations[name]

    async def mark_preempted(self, pod: PodInfo, message: str) -> None:
        if pod.uid in self.gone:
            raise NotFound(status=404, reason="Not Found")
        self.calls.append(("mark_preempted", pod.name))

    async def evict(self, pod: PodInfo) -> None:
        await self._take_off("evict", pod)

    async def delete(self, pod: PodInfo) -> None:
        await self._take_off("delete", pod)

    async def _take_off(self, how: str, pod: PodInfo) -> None:
        """A victim evicted or deleted: ``(how + " asked", name)`` when asked, ``(how,
        name)`` once answered."""
        if self.before_evict is not None:
            self.before_evict(pod)
        self.calls.append((f"{how} asked", pod.name))
        if self.hold_evictions is not None:
            await self.hold_evictions.wait()
        if self.refuse_evict:
            raise ApiException(status=500, reason="Internal Server Error")
        self.calls.append((how, pod.name))

    async def nominate(self, pod: PodInfo, node: str) -> None:
        if pod.uid in self.gone:
            raise ApiException(status=404, reason="Not Found")
        self.calls.append(("nominate", (pod.name, node)))

    def event(self, obj: Json, kind: str, reason: str, message: str, **_: Any) -> None:
        name = (obj.get("metadata") or {}).get("name")
        self.calls.append(("event", (kind, name, reason, message)))

    def events(self, reason: str) -> list[str]:
        return [c[1][3] for c in self.calls if c[0] == "event" and c[1][2] == reason]


class Loop:
    def __init__(self, *objects: Json, profile: Json | None = None) -> None:
        self.writer = RecordingWriter()
        self.queue = SchedulingQueue(initial_backoff=0.0, max_backoff=0.0)
        config = Profile.model_validate(profile or {"schedulerName": "berth-scheduler"})
        self.parts: Assembly = assemble(
            [config], writer=cast(Writer, self.writer), queue=self.queue
        )
        assert self.parts.placement is not None
        for built in self.parts.profiles.values():
            built.framework.handle.clock = lambda: CLOCK
        self.schedule_one = ScheduleOne(
            self.parts.profiles,
            self.parts.view,
            self.queue,
            cast(Writer, self.writer),
            self.parts.events,
            self.parts.placement,
        )
        for obj in objects:
            if obj["kind"] == "Node":
                self.parts.events.on_node("ADDED", obj)
            else:
                self.parts.events.on_pod("ADDED", obj)

    async def attempt(self) -> PodInfo:
        """Pop the next pod, run one attempt and let its binding finish."""
        popped = await asyncio.wait_for(self.queue.pop(), 1)
        await self.schedule_one(popped)
        await asyncio.gather(*self.schedule_one.tasks)
        return popped


def berth_pod(name: str, cpu: str, **kwargs: Any) -> Json:
    raw = pod(name, cpu, **kwargs)
    raw["spec"]["schedulerName"] = "berth-scheduler"
    return raw


async def test_a_pod_is_assumed_reserved_and_bound() -> None:
    loop = Loop(node("n1", cpu="4"), berth_pod("p", "1"))
    await loop.attempt()
    assert ("bind", ("p", "n1")) in loop.writer.calls
    assert loop.writer.events("Scheduled") == ["Successfully assigned default/p to n1"]
    assert "uid-default-p" in loop.parts.view.assumed  # counted until the watch shows the binding
    assert "uid-default-p" not in loop.queue


async def test_a_failed_binding_unreserves_forgets_and_retries() -> None:
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "default", "uid": "q"},
        "spec": {"min": {"cpu": "4"}, "max": {"cpu": "4"}},
    }
    profile = {
        "schedulerName": "berth-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "CapacityScheduling"}]}},
    }
    loop = Loop(node("n1", cpu="4"), berth_pod("p", "1"), profile=profile)
    loop.parts.events.on_custom("ElasticQuota")("ADDED", quota)
    loop.writer.refuse_bind = True
    await loop.attempt()
    capacity: Any = loop.parts.profile().framework.instances["CapacityScheduling"]
    assert capacity.ledger.used_of("default").get("cpu") == 0  # Unreserve gave it back
    assert "uid-default-p" not in loop.parts.view.assumed
    assert loop.parts.view.nodes.requested[0, 0] == 0  # forgotten: the node is free again
    assert loop.writer.events("FailedScheduling") == ["binding rejected: Conflict"]
    assert loop.queue.counts()["backoff"] + loop.queue.counts()["active"] == 1
    loop.writer.refuse_bind = False
    await loop.attempt()
    assert ("bind", ("p", "n1")) in loop.writer.calls


async def test_an_unschedulable_pod_says_why_and_waits_for_an_event_that_helps() -> None:
    loop = Loop(node("n1", cpu="2"), berth_pod("big", "3"))
    await loop.attempt()
    # 3 cpu asked of a 2-cpu node: no eviction can make room (kube-scheduler's wording).
    message = (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling."
    )
    assert ("unschedulable", ("big", message)) in loop.writer.calls
    assert loop.writer.events("FailedScheduling") == [message]
    assert loop.queue.counts()["unschedulable"] == 1
    # A label change cannot help a pod NodeResourcesFit rejected ...
    labelled = node("n1", cpu="2", labels={"zone": "a"})
    loop.parts.events.on_node("MODIFIED", labelled)
    assert loop.queue.counts()["unschedulable"] == 1
    # ... a node whose allocatable grows can.
    loop.parts.events.on_node("MODIFIED", node("n1", cpu="4", labels={"zone": "a"}))
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("big", "n1")) in loop.writer.calls


async def test_a_status_write_leaves_an_unschedulable_pod_waiting_and_a_spec_change_not() -> None:
    """The PodScheduled condition written after a refusal comes back as an update of the
    pod: as in kube-scheduler, an update of its status alone is no reason to try it again
    (or every refusal would bring the next); a change of its labels or spec is."""
    waiting = berth_pod("waiting", "8")
    loop = Loop(node("n1", cpu="2"), waiting)
    await loop.attempt()
    assert loop.queue.is_unschedulable("uid-default-waiting")
    refused = copy.deepcopy(waiting)
    refused["metadata"]["resourceVersion"] = "2"
    refused["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    loop.parts.events.on_pod("MODIFIED", refused)
    assert loop.queue.is_unschedulable("uid-default-waiting")
    relabelled = copy.deepcopy(refused)
    relabelled["metadata"]["labels"] = {"tier": "batch"}
    loop.parts.events.on_pod("MODIFIED", relabelled)
    assert not loop.queue.is_unschedulable("uid-default-waiting")


async def test_a_bound_pod_deleted_brings_back_a_pod_it_kept_out() -> None:
    holder = pod("holder", "2", node_name="n1")
    loop = Loop(node("n1", cpu="2"), holder, berth_pod("waiting", "1"))
    await loop.attempt()
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_pod("DELETED", holder)
    assert loop.queue.counts()["unschedulable"] == 0


def cpu_quota(namespace: str, minimum: str, maximum: str, used: str | None = None) -> Json:
    body: Json = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "q",
            "namespace": namespace,
            "uid": f"q-{namespace}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"min": {"cpu": minimum}, "max": {"cpu": maximum}},
    }
    if used is not None:
        body["status"] = {"used": {"cpu": used}}
    return body


QUOTA_PROFILE = {
    "schedulerName": "berth-scheduler",
    "plugins": {"multiPoint": {"enabled": [{"name": "CapacityScheduling"}]}},
}


def nine_of_ten(*objects: Json) -> Loop:
    """Quotas a (min 4) and b (min 6), together 10 cpu, 9 of them bound on n1 and n2;
    ``objects`` besides."""
    loop = Loop(
        node("n1", cpu="5"),
        node("n2", cpu="5"),
        node("n3", cpu="1"),
        pod("b-held", "5", namespace="b", node_name="n1"),
        pod("b-held2", "1", namespace="b", node_name="n2"),
        pod("a-held", "3", namespace="a", node_name="n2"),
        *objects,
        profile=QUOTA_PROFILE,
    )
    on_quota = loop.parts.events.on_custom("ElasticQuota")
    on_quota("ADDED", cpu_quota("a", "4", "6"))
    on_quota("ADDED", cpu_quota("b", "6", "8"))
    return loop


async def test_a_quota_refusal_waits_for_what_frees_quota_and_only_that() -> None:
    """A pod of b nominated after a preemption holds the tenth cpu, so a's new pod is
    refused for the sum of mins. The operator's status writes and a quota-less pod's
    deletion change nothing the refusal rests on (retrying on them keeps lower priorities
    waiting behind it); the nominated pod's deletion frees the tenth, and the pod binds."""
    quota_less = pod("free", "1", node_name="n3")
    nominated = pod("b-nominated", "1", namespace="b", nominated="n2", scheduler="other")
    loop = nine_of_ten(quota_less, nominated, berth_pod("a-new", "1", namespace="a"))
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    assert "total ElasticQuota used is more than Min (cpu: 9 used + 1 nominated" in refusal
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_custom("ElasticQuota")("MODIFIED", cpu_quota("b", "6", "8", used="6"))
    loop.parts.events.on_pod("DELETED", quota_less)
    assert loop.queue.counts()["unschedulable"] == 1, "nothing it waits for changed"
    loop.parts.events.on_pod("DELETED", nominated)
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("a-new", "n2")) in loop.writer.calls


def team_quota() -> Json:
    """A quota tree's leaf of 2 cpu under the root, for the pods of namespace t."""
    team = cpu_quota("t", "2", "2")
    team["metadata"]["labels"] = {"quota.scheduling.koordinator.sh/is-parent": "false"}
    return team


async def test_beside_a_quota_tree_a_flat_refusal_waits_for_a_flat_quota_pod_to_go() -> None:
    """As above with a quota tree beside the flat quotas: a quota-less pod's deletion, a
    tree pod's and a new node change nothing the flat sum of mins counts, and the refusal
    waits (before, each retried every flat refusal once a tree existed); the nominated pod
    of a flat quota going frees the tenth cpu, and the pod binds."""
    team = team_quota()
    quota_less = pod("free", "1", node_name="n3")
    tree_pod = pod("t-held", "1", namespace="t", node_name="n3")
    nominated = pod("b-nominated", "1", namespace="b", nominated="n2", scheduler="other")
    loop = nine_of_ten(quota_less, tree_pod, nominated, berth_pod("a-new", "1", namespace="a"))
    loop.parts.events.on_custom("ElasticQuota")("ADDED", team)
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    assert "total ElasticQuota used is more than Min (cpu: 9 used + 1 nominated" in refusal
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_pod("DELETED", quota_less)
    loop.parts.events.on_pod("DELETED", tree_pod)
    loop.parts.events.on_node("ADDED", node("n4", cpu="8"))
    assert loop.queue.counts()["unschedulable"] == 1, "nothing it waits for changed"
    loop.parts.events.on_pod("DELETED", nominated)
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert [c for c in loop.writer.calls if c[0] == "bind" and c[1][0] == "a-new"]


@pytest.mark.parametrize("tree", [False, True])
async def test_the_room_a_deletion_frees_is_shared_out_not_offered_to_every_pod(
    tree: bool,
) -> None:
    """The quotas use all 10 cpu of their mins; two pods of a wait, refused for the sum of
    mins. One cpu of b's goes: it admits one of them, so only one is tried (both were,
    and the second refused again with a preemption dry run, while pods of lower
    priority waited). When the one tried leaves the room unused (here it is deleted), the
    periodic check tries the other, within a second: the room is not left unused for the
    over-runtime check's interval. The same with a quota tree beside the flat quotas."""
    loop = nine_of_ten(
        pod("a-fill", "1", namespace="a", node_name="n3"),
        berth_pod("a-p1", "1", namespace="a"),
        berth_pod("a-p2", "1", namespace="a"),
    )
    if tree:
        loop.parts.events.on_custom("ElasticQuota")("ADDED", team_quota())
    for _ in range(2):
        await loop.attempt()
    refusals = loop.writer.events("FailedScheduling")
    assert all("total ElasticQuota used is more than Min" in r for r in refusals), refusals
    assert loop.queue.counts()["unschedulable"] == 2
    plugin = loop.parts.profiles["berth-scheduler"].framework.instances["CapacityScheduling"]
    assert not plugin.retry_now(loop.queue.is_unschedulable, loop.queue.backed_off), (
        "no room, nothing to retry"
    )
    assert plugin.period() == 1.0, "a refused pod waits a second at most for the check"
    loop.parts.events.on_pod("DELETED", pod("b-held2", "1", namespace="b", node_name="n2"))
    assert loop.queue.counts()["unschedulable"] == 1, "the room admits one pod"
    [left] = [p for p in ("a-p1", "a-p2") if loop.queue.is_unschedulable(f"uid-a-{p}")]
    tried = next(p for p in ("a-p1", "a-p2") if p != left)
    loop.parts.events.on_pod("DELETED", berth_pod(tried, "1", namespace="a"))
    assert plugin.retry_now(loop.queue.is_unschedulable, loop.queue.backed_off) == {f"uid-a-{left}"}
    loop.queue.requeue(frozenset({f"uid-a-{left}"}), "CapacitySchedulingPeriodicCheck")
    await loop.attempt()
    assert ("bind", (left, "n2")) in loop.writer.calls


@pytest.mark.parametrize("ahead", [False, True])
async def test_a_pod_only_evictions_admit_is_not_retried_for_room_a_pod_ahead_claims(
    ahead: bool,
) -> None:
    """The quotas use all 10 cpu of their mins. a-big (2 cpu, a over its min) is refused:
    evicting a-low, its one lower-priority pod, leaves 11 > 10. One cpu of b's goes:
    a-low's cpu and the freed one together admit a-big, and alone it is tried again.
    With c-small (1 cpu, of a quota with min 0) ahead of it in the queue, the room goes to
    c-small and a-big waits (before, it was tried after every deletion near the sum of
    mins and refused again after a dry run). Tried alone, it fails (n3 is too small for
    it); a node added then does not bring it back: it holds no pod to evict."""
    objects = [
        pod("a-low", "1", namespace="a", node_name="n3", priority=-1),
        berth_pod("a-big", "2", namespace="a", created=2),
    ]
    if ahead:
        objects.append(berth_pod("c-small", "1", namespace="c", created=1))
    loop = nine_of_ten(*objects)
    loop.parts.events.on_custom("ElasticQuota")("ADDED", cpu_quota("c", "0", "2"))
    for _ in objects[1:]:
        await loop.attempt()
    refusals = loop.writer.events("FailedScheduling")
    assert all("total ElasticQuota used is more than Min" in r for r in refusals), refusals
    assert loop.queue.is_unschedulable("uid-a-a-big")
    loop.parts.events.on_pod("DELETED", pod("b-held2", "1", namespace="b", node_name="n2"))
    assert loop.queue.is_unschedulable("uid-a-a-big") == ahead
    if ahead:
        assert not loop.queue.is_unschedulable("uid-c-c-small"), "the room reaches it"
        return
    await loop.attempt()  # a-low gone, its node n3 would still be too small for a-big
    assert loop.queue.is_unschedulable("uid-a-a-big")
    loop.parts.events.on_node("ADDED", node("n4", cpu="8"))
    assert loop.queue.is_unschedulable("uid-a-a-big"), "a new node has nothing to evict"


async def test_a_pod_within_its_min_is_retried_once_another_quota_borrows() -> None:
    """a uses 3 of its min 4 and b its min 6; a pod of b nominated on n3 holds the tenth
    cpu of the sum of mins. a's new pod (within a's min) is refused, and nobody borrows: no
    victim. The nominated pod is then bound: b uses 7 of its min 6. Nothing is deleted,
    so no cluster event retries a's pod; the periodic check does, within a second, and
    it reclaims from b."""
    nominated = pod("b-nominated", "1", namespace="b", nominated="n3", scheduler="other")
    loop = nine_of_ten(nominated, berth_pod("a-new", "1", namespace="a"))
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    assert "No preemption victims found" in refusal, refusal
    plugin = loop.parts.profiles["berth-scheduler"].framework.instances["CapacityScheduling"]
    assert not plugin.retry_now(loop.queue.is_unschedulable, loop.queue.backed_off), (
        "nobody borrows yet"
    )
    bound = pod("b-nominated", "1", namespace="b", node_name="n3", scheduler="other")
    loop.parts.events.on_pod("MODIFIED", bound)
    assert loop.queue.is_unschedulable("uid-a-a-new"), "a binding is no event that frees"
    assert plugin.period() == 1.0
    assert plugin.retry_now(loop.queue.is_unschedulable, loop.queue.backed_off) == {"uid-a-a-new"}
    assert not plugin.retry_now(loop.queue.is_unschedulable, loop.queue.backed_off), (
        "once per quota that lends"
    )
    loop.queue.requeue(frozenset({"uid-a-a-new"}), "CapacitySchedulingPeriodicCheck")
    await loop.attempt()
    evicted = [c[1] for c in loop.writer.calls if c[0] == "evict"]
    assert evicted, loop.writer.calls
    assert all(name.startswith("b-") for name in evicted), evicted
    assert [c for c in loop.writer.calls if c[0] == "nominate" and c[1][0] == "a-new"]


async def test_a_nomination_to_a_deleted_node_holds_no_quota_share() -> None:
    """As above, but the nominated pod's node is deleted: a nomination there holds no
    room, and no quota share either (scheduler-plugins counts the nominated pods of the
    snapshot's nodes). The refused pod comes back with the node's deletion and binds."""
    gone = node("n4", cpu="1")
    nominated = pod("b-nominated", "1", namespace="b", nominated="n4", scheduler="other")
    loop = nine_of_ten(gone, nominated, berth_pod("a-new", "1", namespace="a"))
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    assert "(cpu: 9 used + 1 nominated + 1 requested > 10)" in refusal
    assert loop.queue.counts()["unschedulable"] == 1
    loop.parts.events.on_node("DELETED", gone)
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert [c[1][0] for c in loop.writer.calls if c[0] == "bind"] == ["a-new"]


async def test_a_nomination_on_a_deleted_node_brings_back_only_the_pods_its_share_admits() -> None:
    """As above, with a second pod of a waiting for 3 cpu: the one cpu the nomination held
    admits a-new, not a-big, which waits on (no pod it may evict either)."""
    gone = node("n4", cpu="1")
    nominated = pod("b-nominated", "1", namespace="b", nominated="n4", scheduler="other")
    loop = nine_of_ten(
        gone,
        nominated,
        berth_pod("a-new", "1", namespace="a"),
        berth_pod("a-big", "3", namespace="a"),
    )
    for _ in range(2):
        await loop.attempt()
    assert loop.queue.counts()["unschedulable"] == 2
    loop.parts.events.on_node("DELETED", gone)
    assert loop.queue.is_unschedulable("uid-a-a-big"), "its quota refuses it still"
    assert not loop.queue.is_unschedulable("uid-a-a-new")


def both_nominated(*pending: Json) -> Loop:
    """As ``nine_of_ten``, a pod of each quota nominated to n2 after a reclaim, and
    ``pending`` before them in the queue."""
    return nine_of_ten(
        *pending,
        berth_pod("b-nominated", "1", namespace="b", nominated="n2"),
        berth_pod("a-nominated", "1", namespace="a", nominated="n2"),
    )


async def test_a_refused_pod_no_eviction_helps_drops_its_nomination() -> None:
    """Quotas a (min 4) and b (min 6) together may use 10 cpu; 9 are bound. A pod of each
    was nominated to n2 after a reclaim, and each nomination counts against the other:
    b's pod is refused for the sum of mins (9 used + 1 nominated + 1 requested > 10) and
    no eviction helps it (nobody is over a min for it), so its nomination goes, as
    kube-scheduler drops a nomination when preemption finds no candidate. a's pod, within
    its min, then fits. Were the nomination kept, a's pod would be refused the same way
    and both would wait for each other forever."""
    loop = both_nominated()
    assert set(loop.parts.view.nominated) == {"uid-b-b-nominated", "uid-a-a-nominated"}
    first = await loop.attempt()
    assert first.name == "b-nominated"
    [refusal] = loop.writer.events("FailedScheduling")
    assert "(cpu: 9 used + 1 nominated + 1 requested > 10)" in refusal
    assert "uid-b-b-nominated" not in loop.parts.view.nominated
    assert ("nominate", ("b-nominated", "")) in loop.writer.calls
    assert loop.queue.is_unschedulable("uid-b-b-nominated")  # its own drop did not help it
    await loop.attempt()
    assert ("bind", ("a-nominated", "n2")) in loop.writer.calls


async def test_a_dropped_nomination_brings_back_the_pods_it_kept_out() -> None:
    """As in the test above, with a pod of a (higher priority, never nominated) refused
    first while both nominations held the share: b's dropped nomination sends it back to
    be tried, as the deletion of a nominated pod would."""
    loop = both_nominated(berth_pod("a-waiting", "1", namespace="a", priority=10))
    assert (await loop.attempt()).name == "a-waiting"
    assert "9 used + 1 nominated + 1 requested > 10" in loop.writer.events("FailedScheduling")[-1]
    assert loop.queue.is_unschedulable("uid-a-a-waiting")
    assert (await loop.attempt()).name == "b-nominated"
    assert ("nominate", ("b-nominated", "")) in loop.writer.calls
    assert not loop.queue.is_unschedulable("uid-a-a-waiting")


async def test_a_pod_whose_victims_still_terminate_keeps_its_nomination() -> None:
    """Not eligible to preempt again (its victim on the nominated node is still leaving),
    the pod keeps the room it was nominated to, as in kube-scheduler."""
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    victim = pod("victim", "4", node_name="n1", deleting=True, conditions=(preempted,))
    loop = Loop(
        node("n1", cpu="4"),
        victim,
        berth_pod("preemptor", "2", priority=100, nominated="n1"),
    )
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    assert "not eligible due to a terminating pod on the nominated node" in refusal
    assert "uid-default-preemptor" in loop.parts.view.nominated
    assert not [c for c in loop.writer.calls if c[0] == "nominate"]
    loop.parts.events.on_pod("DELETED", victim)
    await loop.attempt()
    assert ("bind", ("preemptor", "n1")) in loop.writer.calls


async def refused_at_a_max(a_max: str, *objects: Json) -> tuple[Loop, str]:
    """Quotas a (min and max ``a_max``) and b (min 4, max 8) over ``objects``, after the
    first attempt, which was refused: the loop and the refusal."""
    loop = Loop(*objects, profile=QUOTA_PROFILE)
    on_quota = loop.parts.events.on_custom("ElasticQuota")
    on_quota("ADDED", cpu_quota("a", a_max, a_max))
    on_quota("ADDED", cpu_quota("b", "4", "8"))
    await loop.attempt()
    [refusal] = loop.writer.events("FailedScheduling")
    return loop, refusal


async def test_a_pod_at_its_quota_max_waits_for_room_in_its_own_quota() -> None:
    """a (max 2) holds two 1-cpu pods, and its new pod asks 2: refused for a's max, with
    no lower-priority pod of a to evict. Another quota's pod going frees nothing a's max
    counts; one of a's own going leaves 1 + 2 > 2; the second lets it in. Only then is it
    tried again (each retry would be a refusal and a preemption dry run for nothing); a
    node added never is a reason."""
    first = pod("a-1", "1", namespace="a", node_name="n1")
    second = pod("a-2", "1", namespace="a", node_name="n1")
    other = pod("b-1", "1", namespace="b", node_name="n1")
    loop, refusal = await refused_at_a_max(
        "2", node("n1", cpu="8"), first, second, other, berth_pod("a-big", "2", namespace="a")
    )
    assert "ElasticQuota a is more than Max (cpu: 2 used + 2 requested > 2)" in refusal
    assert "No preemption victims found for incoming pod" in refusal
    for gone in (other, first):
        loop.parts.events.on_pod("DELETED", gone)
        assert loop.queue.is_unschedulable("uid-a-a-big"), f"{gone['metadata']['name']} freed it"
    loop.parts.events.on_node("ADDED", node("n2", cpu="8"))
    assert loop.queue.is_unschedulable("uid-a-a-big"), "a node never makes room in a quota"
    loop.parts.events.on_pod("DELETED", second)
    assert not loop.queue.is_unschedulable("uid-a-a-big")
    await loop.attempt()
    assert [c[1][0] for c in loop.writer.calls if c[0] == "bind"] == ["a-big"]


async def test_a_pod_at_its_quota_max_comes_back_for_what_it_may_preempt() -> None:
    """a (max 3) uses 2 and its new pod asks 2. Evicting a's lower-priority pod would
    bring a within its max, but n1 would still lack room, so the preemption fails. A pod
    of b going makes that room: the pod is tried again, and preempts."""
    blocker = pod("b-1", "1", namespace="b", node_name="n1")
    loop, refusal = await refused_at_a_max(
        "3",
        node("n1", cpu="3"),
        pod("a-low", "1", namespace="a", node_name="n1"),
        pod("a-high", "1", namespace="a", node_name="n1", priority=100),
        blocker,
        berth_pod("a-big", "2", namespace="a", priority=50),
    )
    assert "ElasticQuota a is more than Max (cpu: 2 used + 2 requested > 3)" in refusal
    assert loop.queue.is_unschedulable("uid-a-a-big")
    loop.parts.events.on_pod("DELETED", blocker)
    assert not loop.queue.is_unschedulable("uid-a-a-big")
    await loop.attempt()
    assert ("evict", "a-low") in loop.writer.calls
    assert loop.parts.view.nominated["uid-a-a-big"][0] == "n1"


async def test_a_quota_refusal_is_retried_when_the_quota_rules_change() -> None:
    """Only its rules: the status and the runtime and request annotations the operator
    writes back do not send the pod back."""
    profile = {
        "schedulerName": "berth-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "CapacityScheduling"}]}},
    }
    loop = Loop(
        node("n1", cpu="4"),
        pod("held", "2", namespace="a", node_name="n1"),
        berth_pod("more", "1", namespace="a"),
        profile=profile,
    )
    on_quota = loop.parts.events.on_custom("ElasticQuota")
    on_quota("ADDED", cpu_quota("a", "2", "2"))
    await loop.attempt()
    assert loop.queue.counts()["unschedulable"] == 1
    written = cpu_quota("a", "2", "2", used="2")
    written["metadata"]["annotations"] = {
        "quota.scheduling.koordinator.sh/runtime": '{"cpu":"2"}',
        "quota.scheduling.koordinator.sh/request": '{"cpu":"3"}',
    }
    on_quota("MODIFIED", written)
    assert loop.queue.counts()["unschedulable"] == 1, "what Berth writes back is no rule"
    on_quota("MODIFIED", cpu_quota("a", "3", "3"))
    assert loop.queue.counts()["unschedulable"] == 0
    await loop.attempt()
    assert ("bind", ("more", "n1")) in loop.writer.calls


def reservation(name: str, cpu: str, **spec: Any) -> Json:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": name,
            "uid": f"rsv-{name}",
            "resourceVersion": "5",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "template": {
                "spec": {
                    "schedulerName": "berth-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                }
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            **spec,
        },
    }


async def test_a_pod_bound_outside_reservations_loses_an_annotation_of_an_earlier_try() -> None:
    """A scheduler stopped between writing the annotation and the binding leaves the pod
    naming a reservation it never used; bound elsewhere with it, the pod would count as
    that reservation's owner."""
    stale = berth_pod("p", "1")
    stale["metadata"]["annotations"] = {ALLOCATED_ANNOTATION: '{"name": "r", "uid": "u"}'}
    loop = Loop(node("n1", cpu="4"), stale, profile=RESERVATION_PROFILE)
    await loop.attempt()
    calls = [c for c in loop.writer.calls if c[0] in ("annotate", "bind")]
    assert calls == [("annotate", ("p", {ALLOCATED_ANNOTATION: None})), ("bind", ("p", "n1"))]
    # Without one, nothing is written but the binding.
    loop = Loop(node("n1", cpu="4"), berth_pod("q", "1"), profile=RESERVATION_PROFILE)
    await loop.attempt()
    assert [c[0] for c in loop.writer.calls if c[0] in ("annotate", "bind")] == ["bind"]


def web_pod(name: str, cpu: str) -> Json:
    raw = berth_pod(name, cpu)
    raw["metadata"]["labels"] = {"app": "web"}
    return raw


async def test_an_allocate_once_reservation_serves_one_pod_even_once_it_is_gone() -> None:
    """The owner is recorded on the reservation before it is annotated and bound; deleted
    before the operator saw it bound, it still spent the reservation: nobody else gets it."""
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    placed = reservation("r", "2", allocateOnce=True)
    placed["status"] = {"phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "2"}}
    loop.parts.events.on_custom("Reservation")("ADDED", placed)
    first = web_pod("web-1", "1")
    loop.parts.events.on_pod("ADDED", first)
    await loop.attempt()
    writes = [c for c in loop.writer.calls if c[0] in ("reservation_status", "annotate", "bind")]
    owner = {"namespace": "default", "name": "web-1", "uid": "uid-default-web-1"}
    allocated = json.dumps({"name": "r", "uid": "rsv-r"})
    assert loop.writer.versions == ["5"]  # recorded only on the version it was chosen from
    assert writes == [
        ("reservation_status", ("r", {"currentOwners": [owner]})),
        ("annotate", ("web-1", {ALLOCATED_ANNOTATION: allocated})),
        ("bind", ("web-1", "n1")),
    ]
    bound = {**first, "spec": {**first["spec"], "nodeName": "n1"}}
    bound["metadata"] = {**first["metadata"], "annotations": {ALLOCATED_ANNOTATION: allocated}}
    loop.parts.events.on_pod("MODIFIED", bound)
    loop.parts.events.on_pod("DELETED", bound)
    held = loop.parts.book.held["rsv-r"]
    assert held.used_up
    assert held.remaining() == {}
    assert loop.parts.view.nodes.requested[0, 0] == 0  # it holds nothing any more
    # A second owner is placed beside it, not into it.
    loop.parts.events.on_pod("ADDED", web_pod("web-2", "1"))
    await loop.attempt()
    assert ("bind", ("web-2", "n1")) in loop.writer.calls
    assert not [c for c in loop.writer.calls if c[0] == "annotate" and c[1][0] == "web-2"]


def recorded(owner: dict[str, str]) -> Json:
    """An allocateOnce reservation of 2 CPUs on n1 whose status records ``owner``."""
    placed = reservation("r", "2", allocateOnce=True)
    placed["status"] = {
        "phase": "Available",
        "nodeName": "n1",
        "allocatable": {"cpu": "2"},
        "currentOwners": [owner],
    }
    return placed


async def test_a_restarted_scheduler_sees_a_spent_allocate_once_reservation_in_its_status() -> None:
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    placed = recorded({"namespace": "default", "name": "gone", "uid": "uid-gone"})
    loop.parts.events.on_custom("Reservation")("ADDED", placed)
    assert loop.parts.book.held["rsv-r"].used_up
    assert loop.parts.view.nodes.requested[0, 0] == 0


async def test_a_pod_recorded_by_an_attempt_never_bound_comes_back_to_its_reservation() -> None:
    """A scheduler stopped between recording the owner on an allocateOnce reservation and
    the binding leaves the reservation naming a pod that still waits. Restarted, the
    scheduler keeps its capacity for that pod and places it there; no other pod gets it.
    Once the pod is bound elsewhere or gone, the reservation holds nothing (the operator
    then ends it)."""
    loop = Loop(node("n1", cpu="3"), profile=RESERVATION_PROFILE)
    owner = {"namespace": "default", "name": "web-1", "uid": "uid-default-web-1"}
    placed = recorded(owner)
    loop.parts.events.on_custom("Reservation")("ADDED", placed)
    assert loop.parts.view.nodes.requested[0, 0] == 0  # its pod not seen yet
    # The 2 CPUs are the recorded pod's: another owner finds 1 left on the node.
    loop.parts.events.on_pod("ADDED", web_pod("web-1", "2"))
    assert loop.parts.view.nodes.requested[0, 0] == 2000
    loop.parts.events.on_pod("ADDED", web_pod("web-2", "2"))
    await loop.attempt()
    await loop.attempt()
    allocated = json.dumps({"name": "r", "uid": "rsv-r"})
    writes = [c for c in loop.writer.calls if c[0] in ("reservation_status", "annotate", "bind")]
    assert writes == [
        ("reservation_status", ("r", {"currentOwners": [owner]})),
        ("annotate", ("web-1", {ALLOCATED_ANNOTATION: allocated})),
        ("bind", ("web-1", "n1")),
    ]
    # Bound elsewhere instead (another scheduler, say), it frees what was kept for it.
    fresh = Loop(node("n1", cpu="3"), web_pod("web-1", "2"), profile=RESERVATION_PROFILE)
    fresh.parts.events.on_custom("Reservation")("ADDED", placed)
    assert fresh.parts.view.nodes.requested[0, 0] == 2000
    elsewhere = web_pod("web-1", "2")
    elsewhere["spec"]["nodeName"] = "n2"
    fresh.parts.events.on_pod("MODIFIED", elsewhere)
    assert fresh.parts.view.nodes.requested[0, 0] == 0


async def test_a_reservation_goes_through_the_plugin_points_and_binds_as_its_status() -> None:
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    loop.parts.events.on_custom("Reservation")("ADDED", reservation("r", "3"))
    await loop.attempt()
    (written,) = [c[1] for c in loop.writer.calls if c[0] == "reservation_status"]
    name, status = written
    assert (name, status["phase"], status["nodeName"]) == ("r", "Available", "n1")
    # Written only over the version it was placed from: one the operator ended meanwhile
    # (expired while Pending) is refused, never placed again.
    assert loop.writer.versions == ["5"]
    assert "rsv-r" in loop.parts.book.held  # the book holds the capacity ...
    assert "rsv-r" not in loop.parts.view.assumed  # ... not the assumed template
    assert loop.parts.view.nodes.requested[0, 0] == 3000
    assert not [c for c in loop.writer.calls if c[0] == "bind"]


async def test_a_placement_outruns_the_watch_and_its_earlier_versions_change_nothing() -> None:
    """The placement is written over the operator's Pending status (version 6) and stored as
    version 7; the watch then delivers version 6. Taken as current, it would free the
    reservation's capacity for a moment and queue it to be placed again."""
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    created = reservation("r", "3")
    loop.parts.events.on_custom("Reservation")("ADDED", created)

    async def stored(name: str, status: Json, *_: Any, **__: Any) -> Json:
        return {
            **created,
            "metadata": {**created["metadata"], "resourceVersion": "7"},
            "status": status,
        }

    loop.writer.reservation_status = stored  # type: ignore[method-assign]
    await loop.attempt()
    assert loop.parts.view.nodes.requested[0, 0] == 3000
    pending = {**created, "metadata": {**created["metadata"], "resourceVersion": "6"}}
    pending["status"] = {"phase": "Pending"}
    loop.parts.events.on_custom("Reservation")("MODIFIED", pending)
    assert "rsv-r" in loop.parts.book.held
    assert "rsv-r" not in loop.queue
    loop.parts.events.on_pod("ADDED", berth_pod("p", "2"))
    popped = await loop.attempt()
    assert popped.name == "p"
    assert not [c for c in loop.writer.calls if c[0] == "bind"]  # 3 of 4 CPUs held
    # A version newer than the placement is taken: the operator ended it.
    ended = {**created, "metadata": {**created["metadata"], "resourceVersion": "8"}}
    ended["status"] = {"phase": "Failed", "nodeName": "n1"}
    loop.parts.events.on_custom("Reservation")("MODIFIED", ended)
    assert "rsv-r" not in loop.parts.book.held
    assert loop.parts.view.nodes.requested[0, 0] == 0


@dataclass
class Placing:
    """A reservation r (3 CPUs) placed on n1 (4 CPUs), its placement's write held until
    ``landed`` is set: the write then stores version 7, or is refused if ``refused``."""

    loop: Loop
    created: Json
    task: asyncio.Task[PodInfo]
    landed: asyncio.Event

    @classmethod
    async def start(cls, *, refused: bool = False) -> Placing:
        loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
        created = reservation("r", "3")
        loop.parts.events.on_custom("Reservation")("ADDED", created)
        writing = asyncio.Event()
        landed = asyncio.Event()

        async def write(name: str, status: Json, *_: Any, **__: Any) -> Json:
            writing.set()
            await landed.wait()
            if refused:
                raise ApiException(status=409, reason="Conflict")
            stored = {**created["metadata"], "resourceVersion": "7"}
            return {**created, "metadata": stored, "status": status}

        loop.writer.reservation_status = write  # type: ignore[method-assign]
        task = asyncio.create_task(loop.attempt())
        await asyncio.wait_for(writing.wait(), 1)
        return cls(loop, created, task, landed)

    def watch_sees(self, status: Json) -> None:
        """The watch delivers version 6 of r, written by the operator meanwhile."""
        seen = {**self.created, "metadata": {**self.created["metadata"], "resourceVersion": "6"}}
        self.loop.parts.events.on_custom("Reservation")("MODIFIED", {**seen, "status": status})

    async def land(self) -> None:
        self.landed.set()
        await self.task


async def test_the_operators_pending_status_seen_during_a_placement_write_frees_nothing() -> None:
    """The scheduler places the reservation from its created version; the operator's
    first status (Pending, a newer version) reaches the watch while the placement is
    being written. Taken as current, it freed the reservation's 3 CPUs of 4 for that
    moment, and a pod of 2 was bound into them: 5 on a node of 4 once the write landed."""
    placing = await Placing.start()
    loop = placing.loop
    placing.watch_sees({"phase": "Pending"})
    assert loop.parts.view.nodes.requested[0, 0] == 3000, "the capacity stays held"
    assert loop.queue.counts()["active"] == 0, "and it is not queued to be placed again"
    loop.parts.events.on_pod("ADDED", berth_pod("p", "2"))
    popped = await asyncio.wait_for(loop.queue.pop(), 1)
    await loop.schedule_one(popped)
    await placing.land()
    assert not [c for c in loop.writer.calls if c[0] == "bind"]
    assert "rsv-r" in loop.parts.book.held
    assert not loop.parts.book.placing


async def test_a_reservation_that_ends_while_its_placement_is_written_is_not_tried_again() -> None:
    """The operator expires the reservation while the scheduler writes its placement: the
    write is refused (it ended), and the reservation leaves the book and the queue. Taken
    as an older version, the expiry was dropped and the reservation tried again and again,
    each time refused."""
    placing = await Placing.start(refused=True)
    loop = placing.loop
    placing.watch_sees({"phase": "Failed"})
    assert "rsv-r" not in loop.parts.book.held
    await placing.land()
    assert "rsv-r" not in loop.queue
    assert loop.parts.view.nodes.requested[0, 0] == 0


async def test_a_pre_allocated_reservation_is_placed_on_a_full_node_and_waits() -> None:
    full = pod("full", "4", node_name="n1")
    loop = Loop(node("n1", cpu="4"), full, profile=RESERVATION_PROFILE)
    loop.parts.events.on_custom("Reservation")("ADDED", reservation("r", "2", preAllocation=True))
    await loop.attempt()
    (written,) = [c[1] for c in loop.writer.calls if c[0] == "reservation_status"]
    assert (written[1]["phase"], written[1]["nodeName"]) == ("Waiting", "n1")


async def test_a_reservation_that_fits_nowhere_says_so_on_its_status() -> None:
    loop = Loop(node("n1", cpu="2"), profile=RESERVATION_PROFILE)
    loop.parts.events.on_custom("Reservation")("ADDED", reservation("r", "3"))
    await loop.attempt()
    await asyncio.gather(*loop.schedule_one.tasks)
    (written,) = [c[1] for c in loop.writer.calls if c[0] == "reservation_status"]
    scheduled = next(c for c in written[1]["conditions"] if c["type"] == "Scheduled")
    assert written[1]["phase"] == "Pending"
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert not [c for c in loop.writer.calls if c[0] == "unschedulable"]  # not a Pod


async def test_a_profile_without_the_reservation_plugin_refuses_reservations_by_name() -> None:
    loop = Loop(node("n1", cpu="4"))
    loop.parts.events.on_custom("Reservation")("ADDED", reservation("r", "1"))
    await asyncio.sleep(0)  # the status write is a task of its own
    await asyncio.gather(*loop.parts.placement._tasks)  # type: ignore[union-attr]
    (refusal,) = loop.writer.events("FailedScheduling")
    assert "does not enable the Reservation plugin" in refusal
    assert "rsv-r" not in loop.queue


def test_a_reservation_template_is_typed_as_one() -> None:
    template = template_pod(reservation("r", "1"), {})
    assert template.reservation is not None
    assert template.reservation["metadata"]["name"] == "r"


async def test_a_placed_reservation_edited_bigger_keeps_what_it_was_granted() -> None:
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    placed = reservation("r", "2")
    placed["status"] = {"phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "2"}}
    loop.parts.events.on_custom("Reservation")("ADDED", placed)
    grown = reservation("r", "7")
    grown["status"] = placed["status"]
    loop.parts.events.on_custom("Reservation")("MODIFIED", grown)
    assert loop.parts.book.held["rsv-r"].allocatable == {"cpu": 2000}
    assert loop.parts.view.nodes.requested[0, 0] == 2000  # never 7000 on a 4000m node
    (warning,) = loop.writer.events("ResizeRefused")
    assert "now requests cpu=7 but the reservation holds cpu=2 on node n1" in warning
    loop.parts.events.on_custom("Reservation")("MODIFIED", grown)
    assert len(loop.writer.events("ResizeRefused")) == 1  # said once per new size


STORY_1 = {
    "schedulerName": "berth-scheduler",
    "plugins": {"multiPoint": {"enabled": [{"name": "Reservation"}]}},
    "pluginConfig": [{"name": "Reservation", "args": {"reservePreemptedCapacity": True}}],
}


async def test_a_preemptor_deleted_while_it_is_nominated_holds_nothing() -> None:
    """The preemptor is deleted while its victims are evicted: the watch shows the
    deletion before the nomination is made, and the nomination's write meets 404. No
    nomination is left behind (it would hold the node's room, and its quota share, with
    nothing to ever drop it)."""
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor)

    def preemptor_deleted(victim: PodInfo) -> None:
        loop.parts.events.on_pod("DELETED", preemptor)
        loop.writer.gone.add("uid-default-preemptor")

    loop.writer.before_evict = preemptor_deleted
    await loop.attempt()
    assert ("delete", "low") in loop.writer.calls
    assert loop.parts.view.nominated == {}


async def test_a_victim_deleted_since_the_dry_run_still_counts_as_freed() -> None:
    """One victim is deleted by someone else between the dry run and the eviction: its
    status write meets 404. The other victim is evicted and the preemptor nominated, as
    kube-scheduler does; the attempt does not fail."""
    gone = pod("gone", "2", node_name="n1")
    low = pod("low", "2", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), gone, low, preemptor)
    loop.writer.gone.add("uid-default-gone")
    await loop.attempt()
    assert ("delete", "low") in loop.writer.calls
    assert ("delete", "gone") not in loop.writer.calls
    assert ("nominate", ("preemptor", "n1")) in loop.writer.calls
    assert loop.parts.view.nominated["uid-default-preemptor"][0] == "n1"


async def test_the_loop_goes_on_while_a_preemptions_evictions_are_under_way() -> None:
    """The victims' evictions run together, in a task of their own (kube-scheduler's async
    preemption): the attempt returns with the preemptor nominated in the view, and the
    preemptor is not tried again until they end; then it waits as unschedulable for
    their deletions."""
    one = pod("one", "2", node_name="n1")
    two = pod("two", "2", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), one, two, preemptor)
    loop.writer.hold_evictions = held = asyncio.Event()
    popped = await asyncio.wait_for(loop.queue.pop(), 1)
    await loop.schedule_one(popped)
    for _ in range(5):  # let the eviction task reach the API calls
        await asyncio.sleep(0)
    assert loop.parts.view.nominated["uid-default-preemptor"][0] == "n1"
    # Both evictions asked for before either was answered.
    assert {c[1] for c in loop.writer.calls if c[0] == "delete asked"} == {"one", "two"}
    assert not [c for c in loop.writer.calls if c[0] == "delete"]
    assert (loop.queue.where("default", "preemptor") or {})["queue"] == "in flight"
    held.set()
    await asyncio.gather(*loop.schedule_one.tasks)
    assert {c[1] for c in loop.writer.calls if c[0] == "delete"} == {"one", "two"}
    assert ("nominate", ("preemptor", "n1")) in loop.writer.calls
    assert (loop.queue.where("default", "preemptor") or {})["queue"] == "unschedulable"


async def test_a_preemptor_tried_again_before_the_watch_shows_its_victims_leaving_waits() -> None:
    """Its victims' deletions accepted, its nomination not yet written back by the watch:
    tried again (an event elsewhere), the preemptor is not eligible to preempt (its victim
    is leaving its nominated node), and nothing more is deleted for it."""
    low = pod("low", "4", node_name="n1")
    other = pod("other", "4", node_name="n2")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), node("n2", cpu="4"), low, other, preemptor)
    await loop.attempt()
    assert len([c for c in loop.writer.calls if c[0] == "delete"]) == 1
    loop.queue.move_all()
    await loop.attempt()
    assert len([c for c in loop.writer.calls if c[0] == "delete"]) == 1
    (message,) = [c[1][1] for c in loop.writer.calls if c[0] == "unschedulable"][-1:]
    assert message.endswith("not eligible due to a terminating pod on the nominated node.")


async def test_a_status_update_written_before_the_nomination_keeps_its_hold() -> None:
    """The preemptor's PodScheduled condition, written as its victims are deleted, comes
    back through the watch before its nomination does, naming none: the room stays held
    (kube-scheduler's nominator keeps it too). Dropped, a second preemptor took the same
    freed room, and one of the two was left waiting there for nothing."""
    first = berth_pod("first", "4", priority=100)
    second = berth_pod("second", "4", priority=100)
    loop = Loop(
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod("cheap", "4", node_name="n1", priority=0),
        pod("dearer", "4", node_name="n2", priority=5),
        first,
        second,
    )
    loop.writer.hold_evictions = held = asyncio.Event()
    await loop.schedule_one(await asyncio.wait_for(loop.queue.pop(), 1))
    assert loop.parts.view.nominated["uid-default-first"][0] == "n1"
    explained = copy.deepcopy(first)
    explained["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    }
    loop.parts.events.on_pod("MODIFIED", explained)
    assert loop.parts.view.nominated["uid-default-first"][0] == "n1"
    await loop.schedule_one(await asyncio.wait_for(loop.queue.pop(), 1))
    assert loop.parts.view.nominated["uid-default-second"][0] == "n2"
    held.set()
    await asyncio.gather(*loop.schedule_one.tasks)
    # Once its status named the node, removing it there drops the hold.
    named = copy.deepcopy(explained)
    named["status"]["nominatedNodeName"] = "n1"
    loop.parts.events.on_pod("MODIFIED", named)
    loop.parts.events.on_pod("MODIFIED", explained)
    assert "uid-default-first" not in loop.parts.view.nominated


async def test_a_preemption_whose_eviction_failed_drops_its_nomination_and_backs_off() -> None:
    """An eviction refused by the API server (not a budget's 429, not a victim gone): the
    preemptor holds no nomination (it would keep the node's room from others) and is tried
    again after its backoff, not left waiting for deletions that will not come."""
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor)
    loop.writer.refuse_evict = True
    await loop.attempt()
    assert ("delete asked", "low") in loop.writer.calls
    assert loop.parts.view.nominated == {}
    assert ("nominate", ("preemptor", "")) in loop.writer.calls
    assert ("nominate", ("preemptor", "n1")) not in loop.writer.calls
    assert (loop.queue.where("default", "preemptor") or {})["queue"] in {"active", "backoff"}


def test_a_pod_leaving_its_node_wakes_the_check_of_waiting_reservations() -> None:
    """A preemptor's Reservation waits (phase Waiting) for its victims to leave; it must turn
    Available before the preemptor, back from its backoff, looks for a node."""
    low = pod("low", "4", node_name="n1")
    loop = Loop(node("n1", cpu="4"), low)
    placement = loop.parts.placement
    assert placement is not None
    assert not placement.room_freed.is_set()
    loop.parts.events.on_pod("ADDED", berth_pod("pending", "1"))
    assert not placement.room_freed.is_set()  # a pod arriving frees nothing
    loop.parts.events.on_pod("DELETED", low)
    assert placement.room_freed.is_set()


async def test_story_1_the_preemptor_gets_a_reservation_before_any_eviction() -> None:
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor, profile=STORY_1)
    await loop.attempt()
    order = [c[0] for c in loop.writer.calls]
    assert order.index("create_reservation") < order.index("reservation_status")
    assert order.index("reservation_status") < order.index("delete")
    (created,) = [c[1] for c in loop.writer.calls if c[0] == "create_reservation"]
    owner = {"namespace": "default", "name": "preemptor", "uid": "uid-default-preemptor"}
    assert created["spec"]["owners"] == [{"object": owner}]
    assert created["spec"]["allocateOnce"] is True
    assert created["spec"]["template"]["spec"]["nodeName"] == "n1"
    assert loop.parts.book.held["rsv-made"].raw["status"]["phase"] == "Waiting"
    # The victim leaves: the reservation turns Available, and a stranger of any priority
    # finds the freed capacity taken.
    loop.parts.events.on_pod("DELETED", low)
    assert loop.parts.placement is not None
    await loop.parts.placement.check_waiting()
    assert loop.parts.book.held["rsv-made"].raw["status"]["phase"] == "Available"
    loop.parts.events.on_pod("ADDED", berth_pod("stranger", "4", priority=1000))
    assert (await loop.attempt()).name == "stranger"
    assert not [c for c in loop.writer.calls if c[0] == "bind"]
    # Both are tried again (the stranger first, by priority): only the preemptor binds,
    # into its reservation.
    loop.queue.move_all()
    assert [(await loop.attempt()).name for _ in range(2)] == ["stranger", "preemptor"]
    assert [c[1] for c in loop.writer.calls if c[0] == "bind"] == [("preemptor", "n1")]


def _made_before(phase: str, node_name: str = "n1") -> Json:
    """A Reservation an earlier preemption made for the preemptor of the tests below."""
    name = reservation_name("default", "preemptor", "uid-default-preemptor")
    return {
        "metadata": {"name": name, "uid": "rsv-earlier"},
        "status": {"phase": phase, "nodeName": node_name},
    }


@pytest.mark.parametrize(
    ("phase", "node_name"), [("Failed", "n1"), ("Waiting", "n2"), ("Pending", "")]
)
async def test_a_preemptor_whose_earlier_reservation_ended_preempts_again(
    phase: str, node_name: str
) -> None:
    """Its earlier Reservation ended (its node deleted, its ttl out), holds another node,
    or was never placed: the new preemption replaces it. Creating one of the same name was
    refused, and the preemptor could not preempt until the old one was collected."""
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor, profile=STORY_1)
    earlier = _made_before(phase, node_name)
    loop.writer.reservations[earlier["metadata"]["name"]] = earlier
    await loop.attempt()
    order = [c[0] for c in loop.writer.calls]
    assert ("delete_reservation", (earlier["metadata"]["name"], "rsv-earlier")) in loop.writer.calls
    assert order.index("delete_reservation") < order.index("create_reservation")
    assert order.index("reservation_status") < order.index("delete")
    assert ("delete", "low") in loop.writer.calls


async def test_a_preemptors_reservation_holding_the_same_node_serves_again() -> None:
    """A second preemption for the same pod on the same node (more room needed in its
    quota, say) keeps the Reservation that already holds that node for it."""
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor, profile=STORY_1)
    earlier = _made_before("Waiting")
    loop.writer.reservations[earlier["metadata"]["name"]] = earlier
    await loop.attempt()
    order = [c[0] for c in loop.writer.calls]
    assert "delete_reservation" not in order
    assert "create_reservation" not in order
    assert ("delete", "low") in loop.writer.calls


async def test_a_preemptors_reservation_that_could_not_be_placed_is_deleted() -> None:
    """Left Pending and unplaced, it waited out its ttl with no one placing it (the
    scheduler counts it as its own), and the next preemption could not make another."""
    low = pod("low", "4", node_name="n1")
    preemptor = berth_pod("preemptor", "4", priority=100)
    loop = Loop(node("n1", cpu="4"), low, preemptor, profile=STORY_1)
    loop.writer.refuse_status = True
    await loop.attempt()
    (created,) = [c[1] for c in loop.writer.calls if c[0] == "create_reservation"]
    name = created["metadata"]["name"]
    assert ("delete_reservation", (name, "rsv-made")) in loop.writer.calls
    assert ("delete", "low") not in loop.writer.calls
    assert loop.writer.reservations == {}


def _held_for(loop: Loop, raw: Json, node_name: str) -> tuple[int, int]:
    """(cpu millis, pod slots) the nominated pods hold on the node against ``raw``."""
    framework = loop.parts.profile().framework
    state = CycleState()
    framework.run_pre_filter(state, PodInfo.from_pod(raw))
    nodes = loop.parts.view.nodes
    if state.nominated is None:
        return 0, 0
    row = nodes.index[node_name]
    return int(state.nominated[row, nodes.columns["cpu"]]), int(
        state.nominated[row, nodes.columns["pods"]]
    )


async def test_a_preemptors_nomination_does_not_hold_again_what_its_reservation_holds() -> None:
    """The Reservation made for the preemptor holds the freed room on the node; its
    nomination holding it too would count it twice, and the next preemptor there would
    evict one pod more than it needs."""
    lows = [pod(f"low-{i}", "1", node_name="n1") for i in range(4)]
    loop = Loop(node("n1", cpu="4"), *lows, berth_pod("p1", "1", priority=100), profile=STORY_1)
    await loop.attempt()
    assert len([c for c in loop.writer.calls if c[0] == "delete"]) == 1
    assert "p1" in {other.name for _node, other in loop.parts.view.nominated.values()}
    assert _held_for(loop, berth_pod("p2", "1", priority=50), "n1") == (0, 0)
    # Without the switch there is no reservation: the nomination holds the room itself.
    plain = Loop(
        node("n1", cpu="4"),
        *lows,
        berth_pod("p1", "1", priority=100),
        profile={**STORY_1, "pluginConfig": []},
    )
    await plain.attempt()
    assert _held_for(plain, berth_pod("p2", "1", priority=50), "n1") == (1000, 1)


async def test_without_the_switch_no_reservation_is_made_for_a_preemptor() -> None:
    profile = {**STORY_1, "pluginConfig": []}
    low = pod("low", "4", node_name="n1")
    loop = Loop(node("n1", cpu="4"), low, berth_pod("p", "4", priority=100), profile=profile)
    await loop.attempt()
    assert ("delete", "low") in loop.writer.calls
    assert not [c for c in loop.writer.calls if c[0] == "create_reservation"]
    # The nominated hold keeps out only pods of lower priority: a stranger above the
    # preemptor takes what the eviction freed (what Story 1 prevents).
    loop.parts.events.on_pod("DELETED", low)
    loop.parts.events.on_pod("ADDED", berth_pod("stranger", "4", priority=1000))
    assert (await loop.attempt()).name == "stranger"
    assert ("bind", ("stranger", "n1")) in loop.writer.calls


async def test_a_reservation_is_placed_like_its_templates_pod_anti_affinity_included() -> None:
    host = "kubernetes.io/hostname"
    web = pod("web", "1", node_name="n1", labels={"app": "web"})
    busy = pod("busy", "2", node_name="n2")  # without the rule, n1 would score higher
    loop = Loop(
        node("n1", cpu="4", labels={host: "n1"}),
        node("n2", cpu="4", labels={host: "n2"}),
        web,
        busy,
        profile=RESERVATION_PROFILE,
    )
    apart = reservation("apart", "1")
    apart["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": host}
            ]
        }
    }
    loop.parts.events.on_custom("Reservation")("ADDED", apart)
    await loop.attempt()
    (written,) = [c[1] for c in loop.writer.calls if c[0] == "reservation_status"]
    assert written[1]["nodeName"] == "n2"


async def test_a_reservation_annotation_berth_does_not_honour_is_refused_by_name() -> None:
    loop = Loop(node("n1", cpu="4"), profile=RESERVATION_PROFILE)
    restricted = reservation("r", "1")
    restricted["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-restricted-options": '{"resources": ["cpu"]}'
    }
    loop.parts.events.on_custom("Reservation")("ADDED", restricted)
    assert loop.parts.placement is not None
    await asyncio.gather(*loop.parts.placement._tasks)
    (refusal,) = loop.writer.events("FailedScheduling")
    assert "scheduling.koordinator.sh/reservation-restricted-options is not supported" in refusal
    assert "rsv-r" not in loop.queue


def test_a_status_write_refused_as_stale_is_made_again_only_when_the_decision_holds() -> None:
    """A refusal is not written over a reservation placed meanwhile (it would turn it back
    to Pending); a placement not over one ended or placed on another node meanwhile."""
    pending, on_n1, on_n2 = ({"status": s} for s in (
        {"phase": "Pending"}, {"phase": "Available", "nodeName": "n1"},
        {"phase": "Available", "nodeName": "n2"}))  # fmt: skip
    expired = {"status": {"phase": "Failed", "nodeName": "n1"}}
    assert [unplaced(r) for r in (pending, {}, on_n1)] == [True, True, False]
    still = placeable_on("n1")
    assert [still(r) for r in (pending, on_n1, on_n2, expired)] == [True, True, False, False]
