"""Gang scheduling on the local cluster, through a real `berth run` (the scheduler with
Coscheduling and CapacityScheduling, and the operators), for each of the three ways to
declare a gang: scheduler-plugins' PodGroup and its pod label, Koordinator's gang
annotations, and kube-scheduler 1.36's PodGroup (scheduling.k8s.io/v1alpha2) named by
the pod's spec.schedulingGroup (skipped where the API server does not serve it).

For each of them: a gang that fits is bound whole and none of it before its quorum; one
that does not fit has nothing bound and says why on every member; of two gangs that each
take 60 % of one ElasticQuota exactly one is placed whole, the quota's status.used counts
only that one, and the other holds no quota and no capacity; and a `berth run` killed
(SIGKILL) while a gang is part bound (an admission policy denies one member's binding)
binds the rest once started again, the bound members left where they were and no node
beyond its room. The PodGroups' own conditions (Scheduled, PodGroupScheduled) are checked
along the way. Besides: a large gang that cannot be placed does not keep a smaller one
from its place, and Koordinator's gang group is bound only when each of its gangs can be.

Each test adds kwok nodes labelled for it and its pods select them. Deadlines are sized
for a loaded 2-core machine; a "nothing bound" check comes only after the events show
the scheduler decided.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, ApisApi, CoreV1Api, CustomObjectsApi

from tests.integration.cluster import DeniedBindings, Nodes, Pods, only_these_quotas, pod_body
from tests.integration.processes import BerthRun
from tests.support import REPO, eventually

EXAMPLE = REPO / "docs" / "examples" / "gang"
DECIDED = 90.0  # a first decision, with `berth run` starting on a loaded machine
QUOTA = ("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas")


def short(namespace: str) -> str:
    return "g-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def mine(namespace: str) -> dict[str, str]:
    return {"berth-test": short(namespace)}


@dataclass(frozen=True)
class Family(ABC):
    """One way to declare a gang: the object that declares it (if any), how a pod joins
    it, and how Berth's messages and the object's condition speak of it."""

    id: str
    title: str
    """How messages name a gang: ``{title} team-a/train``."""
    quorum: str
    """How messages name its minimum."""
    resource: tuple[str, str, str] | None = None
    """The declaring object's group, version and plural; None: the pods alone declare it."""
    condition: str | None = None
    """The condition Berth keeps on that object."""
    waiting_reason: str = ""
    """The condition's reason while members are missing."""
    phases: tuple[str, ...] = ()
    """The object's status.phase once the gang is placed; empty: it has none."""

    def declaration(self, name: str, minimum: int) -> dict[str, Any] | None:
        """The object declaring a gang of ``minimum``; None: its pods alone declare it."""
        return None

    @abstractmethod
    def join(self, body: dict[str, Any], gang: str, minimum: int) -> None:
        """Make the pod ``body`` a member of ``gang``."""


class SchedulerPlugins(Family):
    def declaration(self, name: str, minimum: int) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": minimum},
        }

    def join(self, body: dict[str, Any], gang: str, minimum: int) -> None:
        body["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = gang


class Koordinator(Family):
    def join(self, body: dict[str, Any], gang: str, minimum: int) -> None:
        body["metadata"]["annotations"] = {
            "gang.scheduling.koordinator.sh/name": gang,
            "gang.scheduling.koordinator.sh/min-available": str(minimum),
        }


class KubeScheduler(Family):
    def declaration(self, name: str, minimum: int) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": minimum}}},
        }

    def join(self, body: dict[str, Any], gang: str, minimum: int) -> None:
        body["spec"]["schedulingGroup"] = {"podGroupName": gang}


SCHEDULER_PLUGINS = SchedulerPlugins(
    "scheduler-plugins",
    "PodGroup",
    "minMember",
    ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
    "Scheduled",
    "WaitingForMembers",
    ("Scheduling", "Running"),
)
FAMILIES = (
    SCHEDULER_PLUGINS,
    Koordinator("koordinator", "Gang", "minMember"),
    KubeScheduler(
        "kube-scheduler",
        "PodGroup.scheduling.k8s.io",
        "minCount",
        ("scheduling.k8s.io", "v1alpha2", "podgroups"),
        "PodGroupScheduled",
        "Unschedulable",
    ),
)


async def served(api: ApiClient, group: str, version: str) -> bool:
    listed = await ApisApi(api).get_api_versions()
    return any(
        g.name == group and any(v.version == version for v in g.versions) for g in listed.groups
    )


@pytest.fixture(params=FAMILIES, ids=lambda family: family.id)
async def family(request: pytest.FixtureRequest, api: ApiClient) -> Family:
    found: Family = request.param
    if found.resource is not None and not await served(api, *found.resource[:2]):
        group, version, _ = found.resource
        pytest.skip(
            f"the API server does not serve {group}/{version} (kube-scheduler's PodGroup "
            "needs the GenericWorkload feature gate and its runtime-config)"
        )
    return found


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
    """A gang of this test, declared the family's way, and its member pods."""

    def __init__(
        self, family: Family, api: ApiClient, namespace: str, name: str, min_member: int
    ) -> None:
        self.family = family
        self.api = api
        self.namespace = namespace
        self.name = name
        self.min_member = min_member
        self.pods = Pods(api, namespace)
        self.members: list[str] = []

    @property
    def title(self) -> str:
        """How Berth's messages name the gang."""
        return f"{self.family.title} {self.namespace}/{self.name}"

    async def create(self) -> Gang:
        body = self.family.declaration(self.name, self.min_member)
        if body is not None and self.family.resource is not None:
            group, version, plural = self.family.resource
            await CustomObjectsApi(self.api).create_namespaced_custom_object(
                group, version, self.namespace, plural, body
            )
        return self

    async def add(
        self, suffix: str, scheduler: str, cpu: str = "1", priority_class: str | None = None
    ) -> str:
        name = f"{self.name}-{suffix}"
        body = pod_body(
            name,
            scheduler,
            cpu=cpu,
            priority_class=priority_class,
            nodeSelector={"berth-test": scheduler},
        )
        self.family.join(body, self.name, self.min_member)
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
        group, version, plural = self.family.resource or ("", "", "")
        obj = await CustomObjectsApi(self.api).get_namespaced_custom_object(
            group, version, self.namespace, plural, self.name
        )
        return dict(obj.get("status") or {})

    async def condition(self, within: float = 60.0, **expected: str) -> dict[str, Any] | None:
        """The family's condition on the declaring object (with the object's phase), once
        it has the expected fields; None for a family without one (Koordinator's gang has
        no object: its reasons are on its members only)."""
        wanted = self.family.condition
        if wanted is None:
            return None
        found: dict[str, Any] = {}

        async def has() -> bool:
            status = await self.status()
            for condition in status.get("conditions") or ():
                if condition["type"] == wanted:
                    found.clear()
                    found.update(condition, phase=status.get("phase"))
                    return all(str(condition.get(k, "")).find(v) >= 0 for k, v in expected.items())
            return False

        try:
            await eventually(has, within)
        except AssertionError as err:
            raise AssertionError(f"{wanted} condition {found} lacks {expected}") from err
        return found


async def test_a_gang_that_fits_is_bound_whole_and_none_before_its_quorum(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun, family: Family
) -> None:
    scheduler = short(namespace)
    for i in range(2):
        await nodes.add(f"n{i}", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    gang = await Gang(family, api, namespace, "train", 3).create()
    berth.start()
    first = await gang.add("0", scheduler)
    second = await gang.add("1", scheduler)
    waiting = f"{gang.title} is waiting for members: 2 of 3 ({family.quorum}) exist"
    assert await gang.says(second, waiting) == waiting
    await gang.says(first, f"{gang.title} is waiting for members")
    assert await gang.bound() == []  # decided: two of three are never bound
    await gang.condition(status="False", reason=family.waiting_reason, message="2 of 3")

    await gang.add("2", scheduler)

    async def all_bound() -> bool:
        return len(await gang.bound()) == 3

    await eventually(all_bound, DECIDED)
    condition = await gang.condition(status="True", reason="Scheduled")
    if condition is not None and family.phases:
        assert condition["phase"] in family.phases


async def test_a_gang_that_does_not_fit_binds_nothing_and_says_why_on_every_member(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun, family: Family
) -> None:
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    gang = await Gang(family, api, namespace, "train", 3).create()
    berth.start()
    for i in range(3):
        await gang.add(str(i), scheduler)
    for member in gang.members:
        message = await gang.says(
            member, f"{gang.title} cannot be placed: 2 of the 3 members it needs fit"
        )
        assert "Insufficient cpu" in message
    assert await gang.bound() == []
    await gang.condition(status="False", reason="Unschedulable", message="cannot be placed")


async def test_two_gangs_of_60_percent_of_one_quota_one_placed_whole_the_other_holds_nothing(
    api: ApiClient,
    namespace: str,
    second_namespace: str,
    nodes: Nodes,
    berth: BerthRun,
    family: Family,
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
    custom = CustomObjectsApi(api)
    group, version, plural = QUOTA
    await custom.create_namespaced_custom_object(group, version, namespace, plural, quota)
    gangs = [await Gang(family, api, namespace, name, 3).create() for name in ("first", "second")]
    berth.start()
    for i in range(3):
        for gang in gangs:
            await gang.add(str(i), scheduler)

    async def one_placed() -> bool:
        return sorted([len(await g.bound()) for g in gangs]) == [0, 3]

    await eventually(one_placed, DECIDED)
    [waiting] = [g for g in gangs if not await g.bound()]
    [placed] = [g for g in gangs if g is not waiting]
    for member in waiting.members:
        message = await waiting.says(
            member, f"{waiting.title} is waiting for quota for its 3 members"
        )
        assert f"ElasticQuota {namespace} is more than Max" in message
    assert await waiting.bound() == []
    await waiting.condition(status="False", reason="Unschedulable", message="waiting for quota")
    await placed.condition(status="True", reason="Scheduled")

    async def used_is_one_gang() -> bool:
        obj = await custom.get_namespaced_custom_object(group, version, namespace, plural, "quota")
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


async def binding_retried(berth: BerthRun, member: str, text: str) -> None:
    """Berth's own word that a member's binding failed with ``text`` and is retried into
    its gang's hold: the pod hears of it only once the gang's wait is up (gang/hold.py;
    five minutes for kube-scheduler's PodGroup)."""

    async def said() -> bool:
        for line in berth.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if (
                    entry.get("event") == "gang member's binding retried"
                    and entry.get("name") == member
                    and text in str(entry.get("error"))
                ):
                    return True
        return False

    await eventually(said, DECIDED)


async def test_a_scheduler_killed_with_a_gang_half_bound_binds_the_rest_after_restart(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun, family: Family
) -> None:
    """An admission policy denies one member's binding, so the others are bound and its
    binding keeps failing: `berth run` is killed with the gang part bound. Started again
    with the policy gone, it binds that member beside the others, which stay where they
    were; the nodes have exactly the room for the gang, so none is overfilled."""
    scheduler = short(namespace)
    room = {"n0": 2, "n1": 1}
    for suffix, cpu in room.items():
        await nodes.add(suffix, labels=mine(namespace), allocatable={"cpu": str(cpu), "pods": "10"})
    gang = await Gang(family, api, namespace, "train", 3).create()
    for i in range(3):
        await gang.add(str(i), scheduler)
    *others, last = gang.members
    paused = "binding paused by the test"
    allowed = f"request.name != '{last}'"
    async with DeniedBindings(api, namespace, f"deny-{scheduler}", allowed, paused) as policy:
        await policy.in_force(last, nodes.names[0])
        berth.start()
        await binding_retried(berth, last, paused)  # its binding was tried and failed

        async def others_bound() -> bool:
            return await gang.bound() == others

        await eventually(others_bound, DECIDED)
        where = {m: await gang.pods.node_of(m) for m in others}
        berth.kill()
        assert await gang.bound() == others  # the crash left the gang part bound
    berth.start()  # the policy lifted

    await gang.pods.wait_bound(last, within=DECIDED)
    assert {m: await gang.pods.node_of(m) for m in others} == where
    core = CoreV1Api(api)
    filled = {}
    for suffix in room:
        node = f"{short(namespace)}-{suffix}"
        on = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        filled[suffix] = len(on.items)  # every pod on them is a member of 1 cpu
    assert filled == room
    for member in gang.members:
        node = await gang.pods.node_of(member)
        events = await gang.pods.events(member, "Scheduled")
        assert sum(e.count or 1 for e in events) <= 1, f"{member} bound twice: {events}"
        assert all(e.message.endswith(f" to {node}") for e in events)
    await gang.condition(status="True", reason="Scheduled")


async def test_a_large_gang_that_cannot_be_placed_does_not_block_a_smaller_one(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun
) -> None:
    scheduler = short(namespace)
    await nodes.add("n0", labels=mine(namespace), allocatable={"cpu": "3", "pods": "10"})
    large = await Gang(SCHEDULER_PLUGINS, api, namespace, "large", 4).create()
    small = await Gang(SCHEDULER_PLUGINS, api, namespace, "small", 2).create()
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
