"""Gang preemption on the local cluster, through a real `berth run` (scheduler-plugins'
Coscheduling beside CapacityScheduling, docs/examples/gang/scheduler-config.yaml): a
high-priority gang evicts the lower-priority pods that fill its nodes and is bound whole;
one whose quorum would not fit even with every lower-priority pod gone evicts nothing and
says why; a victim gang is evicted whole, not in part.

Each test adds kwok nodes labelled for it and its pods select them; "nothing evicted" is
checked only after the members' events show the scheduler decided.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.integration import test_gang
from tests.integration.cluster import Nodes, Pods, PriorityClasses, pod_body
from tests.integration.processes import BerthRun
from tests.integration.test_gang import DECIDED, SCHEDULER_PLUGINS, Gang, mine, short
from tests.support import eventually

nodes = test_gang.nodes
berth = test_gang.berth


@pytest.fixture
async def classes(api: ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    """PriorityClasses of this test: low (10), high (1000) and above the gangs (2000)."""
    made = PriorityClasses(api, short(namespace))
    yield {name: await made.add(name, value) for name, value in TIERS.items()}
    await made.delete_all()


TIERS = {"low": 10, "high": 1000, "above": 2000}


async def fill(pods: Pods, scheduler: str, names: dict[str, str], namespace: str) -> None:
    """Bound pods of this test, ``name -> priority class``, each taking a 2-cpu node."""
    for name, priority in names.items():
        body = pod_body(
            name, scheduler, cpu="2", priority_class=priority, nodeSelector=mine(namespace)
        )
        await pods.create(body)
    for name in names:
        await pods.wait_bound(name, within=DECIDED)


async def gone_or_leaving(pods: Pods, name: str) -> bool:
    found = [p for p in (await pods.core.list_namespaced_pod(pods.namespace)).items]
    return all(p.metadata.name != name or p.metadata.deletion_timestamp for p in found)


@dataclass
class Scene:
    """Three 2-cpu kwok nodes of this test and `berth run` started."""

    api: ApiClient
    namespace: str
    scheduler: str
    pods: Pods
    classes: dict[str, str]

    async def gang(self, name: str, size: int, tier: str) -> Gang:
        """A gang of ``size`` members of 2 cpu (a node each) at a priority tier."""
        gang = await Gang(SCHEDULER_PLUGINS, self.api, self.namespace, name, size).create()
        for i in range(size):
            await gang.add(str(i), self.scheduler, cpu="2", priority_class=self.classes[tier])
        return gang


@pytest.fixture
async def scene(
    api: ApiClient, namespace: str, nodes: Nodes, berth: BerthRun, classes: dict[str, str]
) -> Scene:
    for i in range(3):
        await nodes.add(f"n{i}", labels=mine(namespace), allocatable={"cpu": "2", "pods": "10"})
    berth.start()
    return Scene(api, namespace, short(namespace), Pods(api, namespace), classes)


async def test_a_high_priority_gang_evicts_lower_pods_and_is_bound_whole(scene: Scene) -> None:
    namespace, pods = scene.namespace, scene.pods
    lows = {f"low-{i}": scene.classes["low"] for i in range(3)}
    await fill(pods, scene.scheduler, lows, namespace)
    gang = await scene.gang("train", 3, "high")
    said = await gang.says(gang.members[0], "preempts 3 lower-priority pods")
    assert f"PodGroup {namespace}/train preempts" in said

    async def all_bound() -> bool:
        return len(await gang.bound()) == 3

    await eventually(all_bound, DECIDED)
    for name in lows:
        assert await gone_or_leaving(pods, name)
        [event] = await pods.events(name, "Preempted")
        assert event.message.startswith("Preempted by pod ")
        assert f": for PodGroup {namespace}/train (pod {namespace}/train-" in event.message


async def test_a_gang_whose_quorum_would_not_fit_evicts_nothing_and_says_why(
    scene: Scene,
) -> None:
    pods, tiers = scene.pods, scene.classes
    # Two of the three nodes hold lower-priority pods; the third a pod above the gang.
    held = {"low-0": tiers["low"], "low-1": tiers["low"], "keeper": tiers["above"]}
    await fill(pods, scene.scheduler, held, scene.namespace)
    gang = await scene.gang("train", 3, "high")
    for member in gang.members:
        message = await gang.says(member, "does not preempt")
        assert "with every pod it may evict gone, 2 of the 3 members it needs fit" in message
        assert message.endswith("nothing is evicted")
    # Decided (the events above): nothing was evicted, nothing of the gang bound.
    for name in held:
        assert (await pods.get(name)).metadata.deletion_timestamp is None
        assert await pods.events(name, "Preempted") == []
    assert await gang.bound() == []


async def test_a_victim_gang_is_evicted_whole_not_in_part(scene: Scene) -> None:
    namespace, pods = scene.namespace, scene.pods
    victims = await scene.gang("lo", 2, "low")

    async def victims_bound() -> bool:
        return len(await victims.bound()) == 2

    await eventually(victims_bound, DECIDED)
    await fill(pods, scene.scheduler, {"keeper": scene.classes["above"]}, namespace)
    # One member's room on one node: gang lo holds two nodes and goes whole.
    gang = await scene.gang("train", 1, "high")
    await gang.says(gang.members[0], "preempts 2 lower-priority pods")

    async def bound() -> bool:
        return len(await gang.bound()) == 1

    await eventually(bound, DECIDED)
    for name in victims.members:
        assert await gone_or_leaving(pods, name)
    messages = [e.message for n in victims.members for e in await pods.events(n, "Preempted")]
    assert any(f"its gang {namespace}/lo is evicted whole" in m for m in messages)
    assert (await pods.get("keeper")).metadata.deletion_timestamp is None
