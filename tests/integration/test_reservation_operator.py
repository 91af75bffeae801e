"""The Reservation operator (a real `berth run --no-scheduler` process): expiry, node loss,
allocateOnce, owner accounting, garbage collection, and a crash in the middle.

The scheduler is not running: each test writes the scheduler's part itself, placing a
reservation with the status subresource and creating owner pods already bound and
annotated, as the scheduler binds them.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes, Pods, pod_body
from tests.integration.nodemetrics import made_nodes
from tests.integration.processes import BerthRun
from tests.support import eventually

GROUP, VERSION, PLURAL = "scheduling.koordinator.sh", "v1alpha1", "reservations"
MERGE = "application/merge-patch+json"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
GC_PERIOD_ENV = "BERTH_RESERVATION_GC_PERIOD"
PROMPT = 5  # seconds: how late after its deadline an expiry may be written

Json = dict[str, Any]
Operator = Callable[..., BerthRun]


@pytest.fixture
def operator(kubeconfig_path: str, crds: None, tmp_path: Path) -> Iterator[Operator]:
    """Starts `berth run --no-scheduler` with a GC period; every one started is stopped."""
    config = tmp_path / "config.yaml"
    config.write_text("leaderElection: {leaderElect: false}\n")  # one process: no election
    started: list[BerthRun] = []

    def start(gc_period: str = "24h") -> BerthRun:
        run = BerthRun(
            kubeconfig_path,
            config,
            tmp_path / "operator.log",
            scheduler=False,
            env={GC_PERIOD_ENV: gc_period},
        )
        started.append(run.start())
        return run

    try:
        yield start
    finally:
        for run in started:
            run.stop()


@pytest.fixture
async def nodes(api: ApiClient) -> AsyncIterator[Nodes]:
    async with made_nodes(api, "rsv") as made:
        yield made


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Reservations:
    """The test's reservations (deleted after it), the scheduler's writes, and reads."""

    def __init__(self, api: ApiClient, prefix: str) -> None:
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.prefix = prefix
        self.names: list[str] = []
        self.last: dict[str, Json | None] = {}

    async def create(self, suffix: str, *, cpu: str = "2", **spec: Any) -> Json:
        name = f"{self.prefix}-{suffix}"
        template: Json = {
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "4Gi"}}}
                ],
                **spec.pop("template_spec", {}),
            }
        }
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {
                "template": template,
                "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
                **spec,
            },
        }
        created: Json = await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        self.names.append(name)
        return created

    async def place(self, name: str, node: str, phase: str = "Available") -> None:
        """What the scheduler writes when it places a reservation."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = ("True", "Available") if phase == "Available" else ("False", "Waiting")
        status = {
            "phase": phase,
            "nodeName": node,
            "allocatable": {"cpu": "2", "memory": "4Gi"},
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "message": f"placed on {node}",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Ready",
                    "status": ready[0],
                    "reason": ready[1],
                    "message": phase,
                    "lastTransitionTime": now,
                },
            ],
        }
        await self.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, {"status": status}, _content_type=MERGE
        )

    async def get(self, name: str) -> Json | None:
        obj: Json | None = None
        try:
            obj = await self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as err:
            if err.status != 404:
                raise
        self.last[name] = obj
        return obj

    async def wait(self, name: str, check: Callable[[Json], bool], within: float = 30) -> Json:
        """Until the reservation exists and passes ``check``; its status in the failure."""

        async def passes() -> bool:
            obj = await self.get(name)
            return obj is not None and check(obj)

        try:
            await eventually(passes, within)
        except AssertionError as err:
            seen = self.last.get(name)
            raise AssertionError(f"{name}: {seen and seen.get('status')}") from err
        obj = self.last[name]
        assert obj is not None
        return obj

    async def wait_gone(self, name: str, within: float = 30) -> None:
        async def gone() -> bool:
            return await self.get(name) is None

        await eventually(gone, within)

    async def events(self, uid: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the events about the reservation, oldest first."""
        found = await self.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.uid={uid}"
        )
        ordered = sorted(found.items, key=lambda e: (e.first_timestamp, e.metadata.name))
        return [(e.type, e.reason, e.message) for e in ordered]

    async def expect_events(
        self,
        uid: str,
        expected: list[Any],
        part: Callable[[tuple[str, str, str]], Any] = lambda e: e,
    ) -> None:
        """Until the events (or the ``part`` of each) are ``expected``: they are posted just
        after the status they explain, so a test reading right after the status may be early."""
        seen: list[Any] = []

        async def equal() -> bool:
            seen[:] = [part(e) for e in await self.events(uid)]
            return seen == expected

        try:
            await eventually(equal, within=15)
        except AssertionError:
            assert seen == expected

    async def delete_all(self) -> None:
        for name in self.names:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture
async def reservations(api: ApiClient) -> AsyncIterator[Reservations]:
    made = Reservations(api, f"rsv-{uuid.uuid4().hex[:6]}")
    try:
        yield made
    finally:
        await made.delete_all()


def phase(obj: Json) -> str | None:
    return (obj.get("status") or {}).get("phase")


def condition(obj: Json, kind: str) -> Json:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def phase_is(expected: str) -> Callable[[Json], bool]:
    return lambda obj: phase(obj) == expected


def owners_are(*names: str) -> Callable[[Json], bool]:
    def check(obj: Json) -> bool:
        owners = (obj.get("status") or {}).get("currentOwners") or []
        return [o["name"] for o in owners] == list(names)

    return check


def owner_pod(name: str, node: str, reservation: Json, *, cpu: str = "500m") -> Json:
    """A pod as the scheduler binds it into a reservation: one of its owners, bound,
    annotated."""
    meta = reservation["metadata"]
    labels = {"app": meta["name"]}  # what the test's reservations name as their owners
    body = pod_body(name, "nobody", cpu=cpu, memory="1Gi", nodeName=node, labels=labels)
    target = {"name": meta["name"], "uid": meta["uid"]}
    body["metadata"]["annotations"] = {ALLOCATED: json.dumps(target)}
    return body


async def test_ttl_expires_a_pending_and_an_available_reservation(
    reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    operator()
    node = await nodes.add("a")
    pending = await reservations.create("pending", ttl="6s")
    available = await reservations.create("available", ttl="6s")
    await reservations.place(available["metadata"]["name"], node)
    forever = await reservations.create("forever", ttl="0s")

    for created, was in ((pending, "Pending"), (available, "Available")):
        name = created["metadata"]["name"]
        obj = await reservations.wait(name, phase_is("Failed"))
        ready = condition(obj, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "Expired")
        deadline = parse_time(created["metadata"]["creationTimestamp"]) + timedelta(seconds=6)
        assert ready["message"] == (
            f"expired at {deadline.strftime('%Y-%m-%dT%H:%M:%SZ')} "
            f"(ttl 6s after creation) while {was}"
        )
        written = parse_time(ready["lastTransitionTime"])
        assert deadline <= written <= deadline + timedelta(seconds=PROMPT)
        await reservations.expect_events(
            created["metadata"]["uid"], [("Warning", "Expired", ready["message"])]
        )
    # The scheduler's Scheduled condition is kept as it was.
    obj = await reservations.wait(available["metadata"]["name"], phase_is("Failed"))
    assert condition(obj, "Scheduled")["reason"] == "Scheduled"
    # ttl 0s never expires: it is Pending from creation, with nothing else written to it.
    obj = await reservations.wait(forever["metadata"]["name"], phase_is("Pending"))
    assert (condition(obj, "Scheduled")["status"], condition(obj, "Scheduled")["reason"]) == (
        "False",
        "Pending",
    )
    assert set(obj["status"]) == {"phase", "conditions"}
    # The default GC period (24h) keeps ended reservations for describe to show.
    assert await reservations.get(pending["metadata"]["name"]) is not None


async def test_node_deletion_fails_its_reservations_which_then_go(
    api: ApiClient, reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    operator()
    node = await nodes.add("doomed")
    available = await reservations.create("on-node", ttl="1h")
    waiting = await reservations.create("waiting", ttl="1h", preAllocation=True)
    await reservations.place(available["metadata"]["name"], node)
    await reservations.place(waiting["metadata"]["name"], node, phase="Waiting")
    # A template pinned to a node that does not exist: the scheduler's to report, not
    # NodeDeleted for the operator.
    pinned = await reservations.create(
        "pinned", ttl="1h", template_spec={"nodeName": f"{nodes.prefix}-missing"}
    )
    await reservations.wait(available["metadata"]["name"], phase_is("Available"))

    await CoreV1Api(api).delete_node(node)

    message = f"node {node} was deleted; the reservation holds nothing any more"
    for created in (available, waiting):
        await reservations.wait_gone(created["metadata"]["name"])
        await reservations.expect_events(
            created["metadata"]["uid"], [("Warning", "NodeDeleted", message)]
        )
    obj = await reservations.wait(pinned["metadata"]["name"], phase_is("Pending"))
    assert phase(obj) == "Pending"  # never placed: Pending from creation, not NodeDeleted
    assert await reservations.events(pinned["metadata"]["uid"]) == []


async def test_allocate_once_succeeds_then_is_collected_and_the_owner_keeps_running(
    api: ApiClient, namespace: str, reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    operator(gc_period="8s")
    node = await nodes.add("a")
    created = await reservations.create("once", ttl="1h")
    name = created["metadata"]["name"]
    await reservations.place(name, node)
    await reservations.wait(name, phase_is("Available"))
    pods = Pods(api, namespace)

    await pods.create(owner_pod("owner", node, created))

    obj = await reservations.wait(name, phase_is("Succeeded"))
    status = obj["status"]
    assert [(o["namespace"], o["name"]) for o in status["currentOwners"]] == [(namespace, "owner")]
    assert status["allocated"] == {"cpu": "500m", "memory": "1Gi"}
    ready = condition(obj, "Ready")
    succeeded = f"allocated once by pod {namespace}/owner; the capacity it did not use is released"
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Succeeded", succeeded)
    await reservations.expect_events(
        created["metadata"]["uid"],
        [
            ("Normal", "OwnerAllocated", f"pod {namespace}/owner allocated cpu 500m, memory 1Gi"),
            ("Normal", "Succeeded", succeeded),
        ],
    )

    # Garbage collection after the configured period, counted from the end.
    ended = parse_time(ready["lastProbeTime"])
    await reservations.wait_gone(name, within=30)
    assert datetime.now(ended.tzinfo) >= ended + timedelta(seconds=8)
    pod = await pods.get("owner")
    assert pod.metadata.deletion_timestamp is None
    assert pod.status.phase == "Running"


async def test_allocate_once_ends_with_the_owner_the_scheduler_recorded_once_it_is_gone(
    api: ApiClient, namespace: str, reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    """The scheduler records the owner before binding it. While that pod waits to be bound
    the reservation stays Available; deleted before it ever was, the reservation has
    served its one pod all the same."""
    operator()
    node = await nodes.add("a")
    created = await reservations.create("recorded", ttl="1h")
    name = created["metadata"]["name"]
    await reservations.place(name, node)
    # A reusable sibling given the same record: the operator drops it there (the pod is
    # not bound), which shows the recorded one has been decided too (one worker, in order).
    sibling = await reservations.create("sibling", ttl="1h", allocateOnce=False)
    await reservations.place(sibling["metadata"]["name"], node)
    pods = Pods(api, namespace)
    await pods.create(pod_body("waiting", "nobody", cpu="500m", memory="1Gi"))
    uid = (await pods.get("waiting")).metadata.uid
    owner = {"namespace": namespace, "name": "waiting", "uid": uid}
    for each in (name, sibling["metadata"]["name"]):
        await reservations.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, each, {"status": {"currentOwners": [owner]}},
            _content_type=MERGE,
        )  # fmt: skip
    await reservations.wait(sibling["metadata"]["name"], owners_are())
    obj = await reservations.get(name)
    assert obj is not None
    assert obj["status"]["phase"] == "Available"
    assert obj["status"]["currentOwners"] == [owner]

    await pods.core.delete_namespaced_pod("waiting", namespace, grace_period_seconds=0)
    obj = await reservations.wait(name, phase_is("Succeeded"), within=60)
    assert obj["status"]["currentOwners"] == [owner]
    message = f"allocated once by pod {namespace}/waiting; the capacity it did not use is released"
    assert condition(obj, "Ready")["message"] == message


async def test_a_reusable_reservation_follows_owners_that_come_and_go(
    api: ApiClient, namespace: str, reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    operator()
    node = await nodes.add("a")
    created = await reservations.create("reusable", ttl="1h", allocateOnce=False)
    name = created["metadata"]["name"]
    await reservations.place(name, node)
    pods = Pods(api, namespace)

    await pods.create(owner_pod("a", node, created))
    obj = await reservations.wait(name, owners_are("a"))
    assert obj["status"]["allocated"] == {"cpu": "500m", "memory": "1Gi"}

    await pods.create(owner_pod("b", node, created, cpu="1"))
    # Annotated for an earlier reservation of the same name, or not bound: not owners.
    stale = owner_pod("stale", node, created)
    stale["metadata"]["annotations"][ALLOCATED] = json.dumps({"name": name, "uid": "earlier"})
    await pods.create(stale)
    unbound = owner_pod("unbound", node, created)
    del unbound["spec"]["nodeName"]
    await pods.create(unbound)
    # Annotated by hand (or copied from a template) on a pod the owners do not match.
    forged = owner_pod("forged", node, created)
    forged["metadata"]["labels"] = {"app": "someone-else"}
    await pods.create(forged)
    obj = await reservations.wait(name, owners_are("a", "b"))
    assert obj["status"]["allocated"] == {"cpu": "1500m", "memory": "2Gi"}

    # A finished owner holds nothing; a deleted one neither.
    await CoreV1Api(api).patch_namespaced_pod_status(
        "a", namespace, {"status": {"phase": "Succeeded"}}, _content_type=MERGE
    )
    obj = await reservations.wait(name, owners_are("b"))
    assert obj["status"]["allocated"] == {"cpu": "1", "memory": "1Gi"}
    await pods.delete("b")
    obj = await reservations.wait(name, owners_are())
    assert "allocated" not in obj["status"]
    assert phase(obj) == "Available"
    await reservations.expect_events(
        created["metadata"]["uid"],
        ["OwnerAllocated", "OwnerAllocated", "OwnerReleased", "OwnerReleased"],
        lambda e: e[1],
    )


async def test_an_operator_restart_in_the_middle_loses_no_status(
    api: ApiClient, namespace: str, reservations: Reservations, nodes: Nodes, operator: Operator
) -> None:
    running = operator()
    node = await nodes.add("a")
    doomed = await nodes.add("doomed")
    reusable = await reservations.create("reusable", ttl="1h", allocateOnce=False)
    reusable_name = reusable["metadata"]["name"]
    await reservations.place(reusable_name, node)
    on_doomed = await reservations.create("on-doomed", ttl="1h")
    await reservations.place(on_doomed["metadata"]["name"], doomed)
    pods = Pods(api, namespace)
    await pods.create(owner_pod("a", node, reusable))
    await reservations.wait(reusable_name, owners_are("a"))
    # Its event follows the status write: killed between the two, it would never be posted.
    allocated_a = f"pod {namespace}/a allocated cpu 500m, memory 1Gi"
    await reservations.expect_events(reusable["metadata"]["uid"], [allocated_a], lambda e: e[2])

    running.kill()
    # While the operator is down: owners change, a reservation expires, a node goes.
    await pods.create(owner_pod("b", node, reusable, cpu="1"))
    await pods.delete("a")
    short = await reservations.create("short", ttl="2s")
    await CoreV1Api(api).delete_node(doomed)
    await eventually(_passed(parse_time(short["metadata"]["creationTimestamp"]), 3))

    operator()
    obj = await reservations.wait(reusable_name, owners_are("b"))
    assert obj["status"]["allocated"] == {"cpu": "1", "memory": "1Gi"}
    assert phase(obj) == "Available"
    expired = await reservations.wait(short["metadata"]["name"], phase_is("Failed"))
    assert condition(expired, "Ready")["reason"] == "Expired"
    await reservations.wait_gone(on_doomed["metadata"]["name"])
    # Recomputed, not repeated: one event per change, whichever process saw it.
    await reservations.expect_events(
        reusable["metadata"]["uid"],
        [
            allocated_a,
            f"pod {namespace}/a no longer uses the reservation (finished or deleted)",
            f"pod {namespace}/b allocated cpu 1, memory 1Gi",
        ],
        lambda e: e[2],
    )


def _passed(start: datetime, seconds: float) -> Callable[[], Any]:
    async def passed() -> bool:
        return datetime.now(start.tzinfo) >= start + timedelta(seconds=seconds)

    return passed
