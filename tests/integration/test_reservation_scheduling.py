"""Reservations end to end on the local cluster, through a real `berth run` (the scheduler
with the Reservation plugin, and the operators): each test is a user story of the design.

Each test has its own kwok nodes (selected by a label in the templates and pods), so the
session's other nodes stay out of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi

from tests.integration.cluster import Nodes, Pods, PriorityClasses, pod_body
from tests.integration.processes import BerthRun
from tests.support import REPO, eventually

GROUP, VERSION, PLURAL = "scheduling.koordinator.sh", "v1alpha1", "reservations"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
MERGE = "application/merge-patch+json"
EXAMPLES = REPO / "docs" / "examples" / "reservations"
Json = dict[str, Any]


def short(namespace: str) -> str:
    return "rs-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


class Story:
    """The test's nodes, reservations and pods, and the scheduler name they use."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.group = short(namespace)
        self.scheduler = self.group
        self.nodes = Nodes(api, self.group)
        self.pods = Pods(api, namespace)
        self.custom = CustomObjectsApi(api)
        self.names: list[str] = []

    async def node(self, suffix: str, cpu: str = "4") -> str:
        return await self.nodes.add(
            suffix,
            labels={"berth.test/group": self.group},
            allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"},
        )

    def select(self) -> dict[str, str]:
        return {"berth.test/group": self.group}

    async def reserve(
        self, suffix: str, cpu: str | None, *, owners: list[Json] | None = None, **spec: Any
    ) -> str:
        name = f"{self.group}-{suffix}"
        requests = {"cpu": cpu} if cpu else {}
        template_spec: Json = {
            "schedulerName": self.scheduler,
            "nodeSelector": self.select(),
            "containers": [
                {"name": "c", "image": "registry.local/app", "resources": {"requests": requests}}
            ],
        }
        if "nodeName" in spec:
            template_spec["nodeName"] = spec.pop("nodeName")
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {
                "template": {"spec": template_spec},
                "owners": owners or [{"labelSelector": {"matchLabels": {"app": self.group}}}],
                **spec,
            },
        }
        await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        self.names.append(name)
        return name

    async def from_example(
        self, file: str, nodes: dict[str, str] | None = None, **spec: Any
    ) -> tuple[str, list[Json]]:
        """Create the Reservation of a guide's YAML under this test's names (its pinned
        node names mapped by ``nodes``); returns its name and the file's other objects."""
        docs = [d for d in yaml.safe_load_all((EXAMPLES / file).read_text()) if d]
        reservation = next(d for d in docs if d["kind"] == "Reservation")
        name = f"{self.group}-{reservation['metadata']['name']}"[:63]
        reservation["metadata"]["name"] = name
        template = reservation["spec"]["template"]["spec"]
        template["schedulerName"] = self.scheduler
        template["nodeSelector"] = self.select()
        if "nodeName" in template:
            template["nodeName"] = (nodes or {})[template["nodeName"]]
        for owner in reservation["spec"]["owners"]:
            if "object" in owner:
                owner["object"]["namespace"] = self.namespace
        reservation["spec"].update(spec)
        await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, reservation)
        self.names.append(name)
        return name, [d for d in docs if d is not reservation]

    async def get(self, name: str) -> Json:
        obj: Json = await self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        return obj

    async def wait_phase(self, name: str, phase: str, within: float = 30) -> Json:
        seen: list[Json] = []

        async def there() -> bool:
            seen[:] = [await self.get(name)]
            return bool((seen[0].get("status") or {}).get("phase") == phase)

        try:
            await eventually(there, within)
        except AssertionError as err:
            raise AssertionError(
                f"{name}: status {seen[0].get('status')} (wanted {phase})"
            ) from err
        return seen[0]

    def owner(self, name: str, cpu: str, **kwargs: Any) -> Json:
        labels = {"app": self.group}
        return pod_body(
            name, self.scheduler, cpu=cpu, labels=labels, nodeSelector=self.select(), **kwargs
        )

    def labelled(self, name: str, cpu: str, labels: dict[str, str], **kwargs: Any) -> Json:
        return pod_body(
            name, self.scheduler, cpu=cpu, labels=labels, nodeSelector=self.select(), **kwargs
        )

    def stranger(self, name: str, cpu: str, **kwargs: Any) -> Json:
        return pod_body(name, self.scheduler, cpu=cpu, nodeSelector=self.select(), **kwargs)

    async def allocated_to(self, pod: str) -> str | None:
        annotations = (await self.pods.get(pod)).metadata.annotations or {}
        text = annotations.get(ALLOCATED)
        return json.loads(text)["name"] if text else None

    async def close(self) -> None:
        for name in self.names:
            with contextlib.suppress(Exception):
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        await self.nodes.delete_all()


@pytest.fixture
async def story(api: ApiClient, crds: None, namespace: str) -> AsyncIterator[Story]:
    made = Story(api, namespace)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with the installed profile's Reservation settings, under this test's name."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": 0.5,
        "podMaxBackoffSeconds": 2,
        "profiles": [
            {
                "schedulerName": short(namespace),
                "plugins": {"multiPoint": {"enabled": [{"name": "Reservation", "weight": 5000}]}},
            }
        ],
    }
    process = BerthRun.configured(kubeconfig_path, config, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


async def test_reserve_then_scale_a_deployment_into_it(story: Story, berth: BerthRun) -> None:
    """docs/examples/reservations/scale-up.yaml"""
    await story.node("a")
    await story.node("b")
    name, rest = await story.from_example("scale-up.yaml")
    reserved = await story.wait_phase(name, "Available")
    node = reserved["status"]["nodeName"]
    assert reserved["status"]["allocatable"] == {"cpu": "2"}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in reserved["status"]["conditions"]}
    assert conditions == {"Scheduled": ("True", "Scheduled"), "Ready": ("True", "Available")}
    deployment = next(d for d in rest if d["kind"] == "Deployment")
    deployment["metadata"]["namespace"] = story.namespace
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_spec["schedulerName"] = story.scheduler
    pod_spec["nodeSelector"] = story.select()
    await AppsV1Api(story.api).create_namespaced_deployment(story.namespace, deployment)

    async def both_in() -> bool:
        listed = await CoreV1Api(story.api).list_namespaced_pod(story.namespace)
        placed = [p for p in listed.items if p.spec.node_name]
        return len(placed) == 2 and all(
            p.spec.node_name == node and (p.metadata.annotations or {}).get(ALLOCATED)
            for p in placed
        )

    await eventually(both_in)

    async def owners_counted() -> bool:
        status = (await story.get(name)).get("status") or {}
        return len(status.get("currentOwners") or []) == 2 and status.get("allocated") == {
            "cpu": "2"
        }

    await eventually(owners_counted)


async def test_descheduling_moves_a_pod_into_its_reservation(story: Story, berth: BerthRun) -> None:
    """docs/examples/reservations/descheduling.yaml"""
    node_a = await story.node("a")
    node_b = await story.node("b")
    await story.pods.create(story.labelled("api-1", "1", {"app": "api"}, nodeName=node_a))
    name, _ = await story.from_example("descheduling.yaml", {"node-b": node_b})
    assert (await story.wait_phase(name, "Available"))["status"]["nodeName"] == node_b
    # Evicted from node a; its controller's replacement goes into the reservation.
    await story.pods.delete("api-1")
    await story.pods.create(story.labelled("api-2", "1", {"app": "api"}))
    assert await story.pods.wait_bound("api-2") == node_b
    assert await story.allocated_to("api-2") == name
    await story.wait_phase(name, "Succeeded")


async def test_capacity_locked_for_a_preemptor_is_not_taken_by_others(
    api: ApiClient, namespace: str, story: Story, berth: BerthRun
) -> None:
    """docs/examples/reservations/preemption.yaml: a higher-priority stranger cannot take it."""
    await story.node("a")
    name, _ = await story.from_example("preemption.yaml")
    await story.wait_phase(name, "Available")
    classes = PriorityClasses(api, story.group)
    try:
        high = await classes.add("high", 1_000_000)
        await story.pods.create(story.stranger("vip", "2", priority_class=high))
        message = await story.pods.wait_event("vip", "FailedScheduling")
        assert "1 Insufficient cpu" in message
        assert "preemption: " in message
        assert not await story.pods.node_of("vip")
        # The pod it was reserved for gets it.
        await story.pods.create(story.stranger("critical-job", "3"))
        await story.pods.wait_bound("critical-job")
        assert await story.allocated_to("critical-job") == name
    finally:
        await classes.delete_all()


async def test_allocate_once_ends_the_reservation_and_frees_the_rest(
    story: Story, berth: BerthRun
) -> None:
    await story.node("a")
    name = await story.reserve("once", "3")  # allocateOnce defaults to true
    await story.wait_phase(name, "Available")
    await story.pods.create(story.stranger("early", "2"))  # 4 - 3 reserved: no room
    await story.pods.wait_event("early", "FailedScheduling")
    await story.pods.create(story.owner("owner", "1"))
    await story.pods.wait_bound("owner")
    assert await story.allocated_to("owner") == name
    await story.wait_phase(name, "Succeeded")
    # What the owner did not use is released: the stranger fits now.
    await story.pods.wait_bound("early")


async def test_a_pod_recorded_as_owner_before_a_kill_is_placed_into_its_reservation(
    story: Story, berth: BerthRun
) -> None:
    """Placing an owner into an allocateOnce reservation, the scheduler records it in
    ``status.currentOwners`` first, then annotates and binds it. Killed between the two,
    it finds on restart a reservation promised to a pod still Pending: that pod goes into
    it (not elsewhere, with nothing to say it was the reservation's), and the reservation
    ends Succeeded."""
    await story.node("a")
    await story.node("b")
    name = await story.reserve("once", "3")
    placed = await story.wait_phase(name, "Available")
    berth.kill()
    await story.pods.create(story.owner("owner", "1"))
    pod = await story.pods.get("owner")
    owner = {"namespace": story.namespace, "name": "owner", "uid": pod.metadata.uid}
    await story.custom.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": {"currentOwners": [owner]}},
        _content_type=MERGE,
    )  # fmt: skip
    berth.start()
    node = await story.pods.wait_bound("owner", within=60)
    assert node == placed["status"]["nodeName"]
    assert await story.allocated_to("owner") == name
    await story.wait_phase(name, "Succeeded")


async def test_restricted_vs_aligned(story: Story, berth: BerthRun) -> None:
    await story.node("a")
    restricted = await story.reserve(
        "restricted", "2", allocatePolicy="Restricted", allocateOnce=False
    )
    await story.wait_phase(restricted, "Available")
    # 3 cpu does not fit in 2 reserved: a Restricted reservation does not take it, and the
    # node's 2 free cpu are not enough either.
    await story.pods.create(story.owner("big", "3"))
    await story.pods.wait_event("big", "FailedScheduling")
    await story.pods.delete("big")
    await story.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, restricted)
    aligned = await story.reserve("aligned", "2", allocateOnce=False)
    await story.wait_phase(aligned, "Available")
    # Aligned: the 2 reserved plus 1 of the node's free capacity.
    await story.pods.create(story.owner("big2", "3"))
    await story.pods.wait_bound("big2")
    assert await story.allocated_to("big2") == aligned


async def test_pre_allocation_waits_until_the_node_frees_capacity(
    story: Story, berth: BerthRun
) -> None:
    """docs/examples/reservations/pre-allocation.yaml"""
    node = await story.node("a")
    await story.pods.create(story.stranger("running", "3"))
    assert await story.pods.wait_bound("running") == node
    name, _ = await story.from_example("pre-allocation.yaml", {"node-a": node})
    waiting = await story.wait_phase(name, "Waiting")
    ready = next(c for c in waiting["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Waiting")
    # The capacity it waits for is not given to anyone else: without the reservation, a
    # 3-cpu pod would fit once "running" is gone.
    await story.pods.create(story.stranger("sneaky", "3"))
    await story.pods.wait_event("sneaky", "FailedScheduling")
    await story.pods.delete("running")
    await story.wait_phase(name, "Available")
    await asyncio.sleep(3)  # retries after the deletion (backoff is at most 2 s here)
    assert not await story.pods.node_of("sneaky")
    # Its owners get it.
    await story.pods.create(story.labelled("batch-1", "2", {"app": "batch"}))
    assert await story.pods.wait_bound("batch-1") == node
    assert await story.allocated_to("batch-1") == name


async def test_two_reservations_on_one_node_the_most_allocated_is_chosen(
    story: Story, berth: BerthRun
) -> None:
    node = await story.node("a", cpu="8")
    big = await story.reserve("big", "3", nodeName=node, allocateOnce=False)
    small = await story.reserve("small", "1", nodeName=node, allocateOnce=False)
    await story.wait_phase(big, "Available")
    await story.wait_phase(small, "Available")
    await story.pods.create(story.owner("w", "1"))
    await story.pods.wait_bound("w")
    assert await story.allocated_to("w") == small  # it ends full; "big" stays whole


async def test_bad_input_is_explained_on_the_reservation(story: Story, berth: BerthRun) -> None:
    await story.node("a")

    async def scheduled_message(name: str) -> str:
        seen: list[str] = []

        async def said() -> bool:
            # The scheduler's refusal, not the operator's Pending ("waiting for the
            # scheduler"), which may be written first.
            status = (await story.get(name)).get("status") or {}
            found = [c for c in status.get("conditions") or () if c["type"] == "Scheduled"]
            refused = found and found[0]["status"] == "False"
            seen[:] = (
                [found[0]["message"]]
                if refused and found[0].get("reason") == "Unschedulable"
                else []
            )
            return bool(seen)

        await eventually(said)
        assert (await story.get(name))["status"]["phase"] == "Pending"
        return seen[0]

    empty = await story.reserve("empty", None)
    assert "the template requests no resources" in await scheduled_message(empty)
    missing = await story.reserve("missing", "1", nodeName="no-such-node")
    assert "node no-such-node (spec.template.spec.nodeName) does not exist" in (
        await scheduled_message(missing)
    )
    huge = await story.reserve("huge", "64")
    assert "Insufficient cpu" in await scheduled_message(huge)


# -- never giving away what they hold (and Story 1) ---------------------------------------

WITHIN = 60.0  # a loaded 2-core machine


def millis(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


async def test_an_owner_is_charged_to_the_reservation_it_fits_with(
    story: Story,
    berth: BerthRun,
) -> None:
    """4 cpu, reservations of 3 and 1: a 2-cpu owner goes into the 3-cpu one, and the node
    never holds more than it has (the owner, plus what both reservations still hold)."""
    node = await story.node("a", cpu="4")
    three = await story.reserve("three", "3", nodeName=node, allocateOnce=False)
    one = await story.reserve("one", "1", nodeName=node, allocateOnce=False)
    await story.wait_phase(three, "Available", WITHIN)
    await story.wait_phase(one, "Available", WITHIN)
    await story.pods.create(story.owner("w", "2"))
    assert await story.pods.wait_bound("w", WITHIN) == node
    assert await story.allocated_to("w") == three

    async def accounted() -> bool:
        status = (await story.get(three)).get("status") or {}
        return bool(status.get("allocated", {}).get("cpu") == "2")

    await eventually(accounted, WITHIN)
    # The owner, plus what each reservation still holds, fits the node's 4 cpu.
    held = 0
    for reservation in (three, one):
        status = (await story.get(reservation)).get("status") or {}
        used = millis((status.get("allocated") or {}).get("cpu", "0"))
        held += max(0, millis(status["allocatable"]["cpu"]) - used)
    assert millis("2") + held <= 4000, held
    # And the next owner asking for exactly what "one" holds fits there.
    await story.pods.create(story.owner("x", "1"))
    assert await story.pods.wait_bound("x", WITHIN) == node
    assert await story.allocated_to("x") in (three, one)


async def test_a_stranger_never_evicts_the_owners_of_a_reusable_reservation(
    api: ApiClient,
    story: Story,
    berth: BerthRun,
) -> None:
    node = await story.node("a", cpu="4")
    name = await story.reserve("web", "3", nodeName=node, allocateOnce=False)
    await story.wait_phase(name, "Available", WITHIN)
    await story.pods.create(story.owner("w1", "1500m"))
    assert await story.pods.wait_bound("w1", WITHIN) == node
    classes = PriorityClasses(api, story.group)
    try:
        top = await classes.add("top", 1_000_000)
        await story.pods.create(story.stranger("vip", "2", priority_class=top))
        # The decision was made with w1 on the node as a would-be victim ...
        message = await story.pods.wait_event("vip", "FailedScheduling", WITHIN)
        assert (
            "No preemption victims found for incoming pod: what could be freed is reserved"
            in message
        )
        # ... and the second owner still gets the rest of its reservation.
        await story.pods.create(story.owner("w2", "1500m"))
        assert await story.pods.wait_bound("w2", WITHIN) == node
        assert await story.allocated_to("w2") == name
        w1 = await story.pods.get("w1")
        assert w1.metadata.deletion_timestamp is None
        assert not await story.pods.events("w1", "Preempted")
        assert not await story.pods.node_of("vip")
    finally:
        await classes.delete_all()


@pytest.fixture
def story_1(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with docs/examples/reservations/preemption-with-reservation.yaml."""
    config: Json = yaml.safe_load((EXAMPLES / "preemption-with-reservation.yaml").read_text())
    config["podInitialBackoffSeconds"] = 0.5
    config["podMaxBackoffSeconds"] = 2
    config["profiles"][0]["schedulerName"] = short(namespace)
    process = BerthRun.configured(kubeconfig_path, config, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


async def test_story_1_a_stranger_arriving_after_the_eviction_cannot_take_the_freed_capacity(
    api: ApiClient, story: Story, story_1: BerthRun
) -> None:
    node = await story.node("a", cpu="4")
    classes = PriorityClasses(api, story.group)
    try:
        mid = await classes.add("mid", 1000)
        top = await classes.add("top", 1_000_000)
        await story.pods.create(story.stranger("low", "4"))
        assert await story.pods.wait_bound("low", WITHIN) == node
        await story.pods.create(story.stranger("preemptor", "4", priority_class=mid))
        await story.pods.wait_event("low", "Preempted", WITHIN)
        # The Reservation made for it names it as its only owner, before the eviction.
        preemptor = await story.pods.get("preemptor")
        found = await story.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, label_selector=f"berth.io/preemptor={preemptor.metadata.uid}"
        )
        (reservation,) = found["items"]
        name = reservation["metadata"]["name"]
        story.names.append(name)
        owner = {"namespace": story.namespace, "name": "preemptor", "uid": preemptor.metadata.uid}
        assert reservation["spec"]["owners"] == [{"object": owner}]
        events = await story.pods.events("preemptor", "ReservedForPreemption")
        assert events, "the preemptor's describe tells the story"
        # A stranger above the preemptor arrives between the eviction and the bind.
        await story.pods.create(story.stranger("vip", "4", priority_class=top))
        assert await story.pods.wait_bound("preemptor", WITHIN) == node
        assert await story.allocated_to("preemptor") == name
        message = await story.pods.wait_event("vip", "FailedScheduling", WITHIN)
        assert "Insufficient cpu" in message
        assert not await story.pods.node_of("vip")
        await story.wait_phase(name, "Succeeded", WITHIN)  # allocateOnce: used by its owner
    finally:
        await classes.delete_all()


async def reservation_events(api: ApiClient, uid: str, reason: str) -> list[str]:
    found = await CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.uid={uid}"
    )
    return [e.message for e in found.items if e.reason == reason]


async def test_koordinators_selection_rules_choose_the_reservation(
    story: Story, berth: BerthRun
) -> None:
    """reservation-order, reservationSelectorTerms, exact-match-reservation and
    reservation-ignored, each deciding which reservation a pod uses (or none)."""
    node = await story.node("a", cpu="8")
    order = "scheduling.koordinator.sh/reservation-order"
    gold = await story.reserve("gold", "2", nodeName=node, allocateOnce=False)
    silver = await story.reserve("silver", "2", nodeName=node, allocateOnce=False)
    for name, tier, rank in ((gold, "gold", "2"), (silver, "silver", "1")):
        await story.custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            name,
            {"metadata": {"labels": {"tier": tier, order: rank}}},
            _content_type=MERGE,
        )
        await story.wait_phase(name, "Available", WITHIN)
    # The lowest reservation-order is used first.
    await story.pods.create(story.owner("first", "500m"))
    assert await story.pods.wait_bound("first", WITHIN) == node
    assert await story.allocated_to("first") == silver
    # reservationSelectorTerms pick gold whatever the order.
    affine = story.owner("golden", "500m")
    terms = [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}]
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"reservationSelectorTerms": terms}
    }
    affine["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-affinity": json.dumps(affinity)
    }
    await story.pods.create(affine)
    assert await story.pods.wait_bound("golden", WITHIN) == node
    assert await story.allocated_to("golden") == gold
    # exact-match-reservation on cpu: 1 cpu is not what either holds (2): ordinary capacity.
    exact = story.owner("exact", "1")
    exact["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/exact-match-reservation": '{"resourceNames": ["cpu"]}'
    }
    await story.pods.create(exact)
    assert await story.pods.wait_bound("exact", WITHIN) == node
    assert await story.allocated_to("exact") is None
    # reservation-ignored: nobody's owner.
    ignoring = story.labelled(
        "ignoring",
        "500m",
        {"app": story.group, "scheduling.koordinator.sh/reservation-ignored": "true"},
    )
    await story.pods.create(ignoring)
    assert await story.pods.wait_bound("ignoring", WITHIN) == node
    assert await story.allocated_to("ignoring") is None


async def test_a_placed_reservation_edited_bigger_keeps_what_it_holds_and_says_why(
    api: ApiClient, story: Story, berth: BerthRun
) -> None:
    node = await story.node("a", cpu="4")
    name = await story.reserve("grow", "2", nodeName=node, allocateOnce=False)
    placed = await story.wait_phase(name, "Available", WITHIN)
    template = placed["spec"]["template"]
    template["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "7"}
    await story.custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"spec": {"template": template}}, _content_type=MERGE
    )
    uid = placed["metadata"]["uid"]

    async def explained() -> bool:
        return bool(await reservation_events(api, uid, "ResizeRefused"))

    await eventually(explained, WITHIN)
    (message,) = await reservation_events(api, uid, "ResizeRefused")
    assert f"now requests cpu=7 but the reservation holds cpu=2 on node {node}" in message
    assert (await story.get(name))["status"]["allocatable"]["cpu"] == "2"
    # What it holds is still 2 of 4: a 2-cpu stranger fits, a 3-cpu one does not.
    await story.pods.create(story.stranger("two", "2"))
    assert await story.pods.wait_bound("two", WITHIN) == node


async def test_a_reservation_keeps_its_templates_pod_anti_affinity(
    story: Story, berth: BerthRun
) -> None:
    """Placed like its template's pod: required anti-affinity against app=web keeps it off
    the node running such a pod, though that node is the emptier one."""
    web_node = await story.node("a", cpu="8")
    other = await story.node("b", cpu="8")
    await story.pods.create(story.labelled("web", "1", {"app": "web"}, nodeName=web_node))
    await story.pods.create(story.stranger("busy", "4", nodeName=other))
    await story.pods.wait_bound("web", WITHIN)
    await story.pods.wait_bound("busy", WITHIN)
    name = f"{story.group}-apart"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"namespace": story.namespace},
                "spec": {
                    "schedulerName": story.scheduler,
                    "nodeSelector": story.select(),
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.local/app",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app": "web"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": story.group}}}],
        },
    }
    await story.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    story.names.append(name)
    placed = await story.wait_phase(name, "Available", WITHIN)
    assert placed["status"]["nodeName"] == other


@pytest.mark.parametrize(
    ("held", "low", "stranger"),
    [
        # The reservation fills the node, and the lower owner fills it.
        ("4", "4", None),
        # r = 3 holding the lower owner (2 cpu), a stranger beside it (1 cpu): only the
        # owner's share is needed, and it goes back into r; the stranger stays.
        ("3", "2", "1"),
    ],
)
async def test_an_owner_preempting_a_lower_owner_gets_what_it_frees_through_the_reservation(
    api: ApiClient, story: Story, berth: BerthRun, held: str, low: str, stranger: str | None
) -> None:
    """Two owners of one reusable reservation on a 4-cpu node: the higher one, asking for
    the whole reservation, evicts the lower one, and no pod beside it; what that frees comes
    back to it through the reservation."""
    node = await story.node("a", cpu="4")
    name = await story.reserve("shared", held, nodeName=node, allocateOnce=False)
    await story.wait_phase(name, "Available", WITHIN)
    await story.pods.create(story.owner("low", low))
    assert await story.pods.wait_bound("low", WITHIN) == node
    if stranger is not None:
        await story.pods.create(story.stranger("x", stranger))
        assert await story.pods.wait_bound("x", WITHIN) == node
    classes = PriorityClasses(api, story.group)
    try:
        high = await classes.add("high", 1000)
        await story.pods.create(story.owner("high", held, priority_class=high))
        await story.pods.wait_event("low", "Preempted", WITHIN)
        assert await story.pods.wait_bound("high", WITHIN) == node
        assert await story.allocated_to("high") == name
        if stranger is not None:
            x = await story.pods.get("x")
            assert x.metadata.deletion_timestamp is None
            assert not await story.pods.events("x", "Preempted")
    finally:
        await classes.delete_all()
