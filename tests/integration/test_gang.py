"""Gang scheduling with scheduler-plugins' PodGroup on the local cluster, through a real
`berth run` (the scheduler with Coscheduling and CapacityScheduling, and the operators):
a gang that fits is bound whole and none of it before its quorum, one that does not fit
has nothing bound and says why on every member, and of two gangs that each take 60 % of
one ElasticQuota exactly one is placed whole while the other holds no quota and no
capacity. A gang of Koordinator's annotations goes the same way, and a large gang that
cannot be placed does not keep a smaller one from its place.

Each test adds kwok nodes labelled for it and its pods select them. Deadlines are sized
for a loaded 2-core machine; a "nothing bound" check comes only after the events show
the scheduler decided.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from tests.integration.cluster import Nodes, Pods, only_these_quotas, pod_body
from tests.integration.processes import BerthRun
from tests.support import REPO, eventually

GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"
EXAMPLE = REPO / "docs" / "examples" / "gang"
DECIDED = 90.0  # a first decision, with `berth run` starting on a loaded machine


def short(namespace: str) -> str:
    return "g-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def mine(namespace: str) -> dict[str, str]:
    return {"berth-test": short(namespace)}


@pytest.fixture
async def nodes(api: ApiClient, namespace: str) -> AsyncIterator[Nodes]:
    made = Nodes(api, short(namespace))
    yield made
    await made.delete_all()


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with docs/examples/gang/scheduler-config.yaml (scheduler-plugins'
    Coscheduling beside CapacityScheduling) under a name of this test."""
    config = yaml.safe_load((EXAMPLE / "scheduler-config.yaml").read_text())
    config["profiles"][0]["schedulerName"] = short(namespace)
    config.update(podInitialBackoffSeconds=0.5, podMaxBackoffSeconds=2)
    process = BerthRun.configured(kubeconfig_path, config, tmp_path)
    try:
        yield process
    finally:
        process.stop()


class Gang:
    """A PodGroup of this test and its member pods."""

    def __init__(self, api: ApiClient, namespace: str, name: str, min_member: int) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.min_member = min_member
        self.pods = Pods(api, namespace)
        self.members: list[str] = []

    async def create(self) -> Gang:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": self.name},
            "spec": {"minMember": self.min_member},
        }
        await CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return self

    async def add(
        self, suffix: str, scheduler: str, cpu: str = "1", priority_class: str | None = None
    ) -> str:
        name = f"{self.name}-{suffix}"
        labels = {LABEL: self.name}
        selector = {"berth-test": scheduler}
        body = pod_body(
            name,
            scheduler,
            cpu=cpu,
            priority_class=priority_class,
            labels=labels,
            nodeSelector=selector,
        )
        await self.pods.create(body)
        self.members.append(name)
        return name

    async def bound(self) -> list[str]:
        return [m for m in self.members if await self.pods.node_of(m)]

    async def says(self, member: str, text: str, within: float = DECIDED) -> str:
        """The latest FailedScheduling message of a member, once it contains ``text``."""
        seen: list[str] = []

        async def said() -> bool:
            events = await self.pods.events(member, "FailedScheduling")
            seen[:] = [e.message for e in sorted(events, key=lambda e: e.last_timestamp)]
            return any(text in message for message in seen)

        try:
            await eventually(said, within)
        except AssertionError as err:
            raise AssertionError(f"{member} said {seen}, not {text!r}") from err
        return next(m for m in reversed(seen) if text in m)

    async def status(self) -> dict[str, Any]:
        obj = await CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        return dict(obj.get("status") or {})

    async def condition(self, within: float = 60.0, **expected: str) -> dict[str, Any]:
        """The Scheduled condition, once it has the expected fields."""
        found: dict[str, Any] = {}

        async def has() -> bool:
            status = await self.status()
            for condition in status.get("conditions") or ():
                if condition["type"] == "Scheduled":
                    found.clear()
                    found.update(condition, phase=status.get("phase"))
                    return all(str(condition.get(k, "")).find(v) >= 0 for k, v in expected.items())
            return False

        try:
            await eventually(has, within)
        except AssertionError as err:
            raise AssertionError(f"Scheduled condition {found} lacks {expected}") from err
        return found


async def test_a_gang_that_fits_is_bound_whole_and_none_before_its_quorum(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    for i in range(2):
        await nodes.add(f"n{i}", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    gang = await Gang(api, namespace, "train", 3).create()
    berth.start()
    first = await gang.add("0", scheduler)
    second = await gang.add("1", scheduler)
    await gang.says(second, "is waiting for members: 2 of 3 (minMember) exist")
    await gang.says(first, "is waiting for members")
    assert await gang.bound() == []  # decided: two of three are never bound
    await gang.condition(reason="WaitingForMembers", message="2 of 3")

    await gang.add("2", scheduler)

    async def all_bound() -> bool:
        return len(await gang.bound()) == 3

    await eventually(all_bound, DECIDED)
    condition = await gang.condition(status="True", reason="Scheduled")
    assert condition["phase"] in ("Scheduling", "Running")


async def test_a_gang_that_does_not_fit_binds_nothing_and_says_why_on_every_member(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    gang = await Gang(api, namespace, "train", 3).create()
    berth.start()
    for i in range(3):
        await gang.add(str(i), scheduler)
    for member in gang.members:
        message = await gang.says(member, "cannot be placed: 2 of the 3 members it needs fit")
        assert "Insufficient cpu" in message
    assert await gang.bound() == []
    await gang.condition(reason="Unschedulable", message="cannot be placed")


async def test_two_gangs_of_60_percent_of_one_quota_one_placed_whole_the_other_holds_nothing(
    api: ApiClient, namespace: str, second_namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    for i in range(2):
        await nodes.add(f"n{i}", labels=mine(namespace), allocatable={"cpu": "3", "pods": "10"})
    await only_these_quotas(api, {namespace})
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "quota"},
        "spec": {"min": {"cpu": "5"}, "max": {"cpu": "5"}},
    }
    await CustomObjectsApi(api).create_namespaced_custom_object(
        "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
    )
    gangs = [await Gang(api, namespace, name, 3).create() for name in ("first", "second")]
    berth.start()
    for i in range(3):
        for gang in gangs:
            await gang.add(str(i), scheduler)

    async def one_placed() -> bool:
        return sorted([len(await g.bound()) for g in gangs]) == [0, 3]

    await eventually(one_placed, DECIDED)
    [waiting] = [g for g in gangs if not await g.bound()]
    for member in waiting.members:
        message = await waiting.says(member, "is waiting for quota for its 3 members")
        assert f"ElasticQuota {namespace} is more than Max" in message
    assert await waiting.bound() == []

    async def used_is_one_gang() -> bool:
        obj = await CustomObjectsApi(api).get_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", "quota"
        )
        return ((obj.get("status") or {}).get("used") or {}).get("cpu") == "3"

    await eventually(used_is_one_gang, 60)
    # The waiting gang holds no capacity: the 3 cpu left take three pods of a namespace
    # without a quota.
    others = Pods(api, second_namespace)
    for i in range(3):
        await others.create(
            pod_body(f"plain-{i}", scheduler, cpu="1", nodeSelector=mine(namespace))
        )
    for i in range(3):
        await others.wait_bound(f"plain-{i}", within=60)
    assert await waiting.bound() == []


async def test_a_koordinator_gang_is_bound_whole_and_none_before_its_minimum(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    pods = Pods(api, namespace)
    annotations = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "2",
        "gang.scheduling.koordinator.sh/mode": "Strict",
    }

    def member(name: str) -> dict[str, Any]:
        body = pod_body(name, scheduler, cpu="1", nodeSelector=mine(namespace))
        body["metadata"]["annotations"] = annotations
        return body

    berth.start()
    await pods.create(member("a"))
    message = await pods.wait_event("a", "FailedScheduling", within=DECIDED)
    assert message == f"Gang {namespace}/train is waiting for members: 1 of 2 (minMember) exist"
    assert await pods.node_of("a") is None
    await pods.create(member("b"))
    assert await pods.wait_bound("a", within=DECIDED) == await pods.wait_bound("b")


async def test_a_large_gang_that_cannot_be_placed_does_not_block_a_smaller_one(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "3", "pods": "10"})
    large = await Gang(api, namespace, "large", 4).create()
    small = await Gang(api, namespace, "small", 2).create()
    berth.start()
    for i in range(4):
        await large.add(str(i), scheduler)
    for i in range(2):
        await small.add(str(i), scheduler)

    async def small_bound() -> bool:
        return len(await small.bound()) == 2

    await eventually(small_bound, DECIDED)
    await large.says(large.members[0], "cannot be placed")
    assert await large.bound() == []


async def test_a_kube_scheduler_podgroup_is_bound_whole_and_its_condition_set(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    """kube-scheduler 1.36's PodGroup (scheduling.k8s.io/v1alpha2, served by the local
    cluster's feature gates) named by spec.schedulingGroup: one member of a gang of 2 waits
    and its PodGroup says PodGroupScheduled=False; the second brings both to their nodes
    and the condition to True."""
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    custom = CustomObjectsApi(api)
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "train"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    await custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", group
    )
    pods = Pods(api, namespace)

    def member(name: str) -> dict[str, Any]:
        body = pod_body(name, scheduler, cpu="1", nodeSelector=mine(namespace))
        body["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        return body

    async def scheduled() -> dict[str, Any]:
        stored = await custom.get_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", "train"
        )
        found = [
            c
            for c in (stored.get("status") or {}).get("conditions") or ()
            if c["type"] == "PodGroupScheduled"
        ]
        return found[0] if found else {}

    berth.start()
    await pods.create(member("a"))
    message = await pods.wait_event("a", "FailedScheduling", within=DECIDED)
    assert message == (
        f"PodGroup.scheduling.k8s.io {namespace}/train is waiting for members: 1 of 2 "
        "(minCount) exist"
    )
    assert await pods.node_of("a") is None

    async def refused() -> bool:
        return (await scheduled()).get("status") == "False"

    await eventually(refused, within=60)
    assert (await scheduled())["reason"] == "Unschedulable"
    await pods.create(member("b"))
    assert await pods.wait_bound("a", within=DECIDED) == await pods.wait_bound("b")

    async def placed() -> bool:
        return (await scheduled()).get("status") == "True"

    await eventually(placed, within=60)
    assert (await scheduled())["reason"] == "Scheduled"


async def test_a_koordinator_gang_group_is_bound_only_when_each_of_its_gangs_can_be(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    """Two gangs of one gang group (Koordinator's groups annotation), 1 member each: the
    first gang's member waits for the other gang, then both are bound."""
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    pods = Pods(api, namespace)

    def member(name: str, gang: str) -> dict[str, Any]:
        body = pod_body(name, scheduler, cpu="1", nodeSelector=mine(namespace))
        body["metadata"]["annotations"] = {
            "gang.scheduling.koordinator.sh/name": gang,
            "gang.scheduling.koordinator.sh/min-available": "1",
            "gang.scheduling.koordinator.sh/groups": (f'["{namespace}/train", "{namespace}/eval"]'),
        }
        return body

    berth.start()
    await pods.create(member("t", "train"))
    message = await pods.wait_event("t", "FailedScheduling", within=DECIDED)
    assert message == (
        f"Gang {namespace}/train's gang group: gang {namespace}/eval has no members yet"
    )
    assert await pods.node_of("t") is None
    await pods.create(member("e", "eval"))
    assert await pods.wait_bound("t", within=DECIDED) == await pods.wait_bound("e")
