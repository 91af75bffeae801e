"""Reservations as gang members on the local cluster, through a real `berth run` with
Coscheduling and the Reservation plugin: a job holds room for all of its workers before
any of them exists. Reservations labelled with a PodGroup count towards its minMember and
are placed in one group cycle, all or nothing: none is placed before the quorum, and a
second gang that cannot fit whole holds nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from tests.integration.cluster import Pods
from tests.integration.processes import BerthRun
from tests.integration.test_reservation_scheduling import Story, short, story
from tests.support import eventually

__all__ = ["story"]  # the Reservation tests' fixture: its objects made and cleaned up there

POD_GROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
LABEL = "scheduling.x-k8s.io/pod-group"
DECIDED = 90.0  # a first decision, with `berth run` starting on a loaded machine


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": 0.5,
        "podMaxBackoffSeconds": 2,
        "profiles": [
            {
                "schedulerName": short(namespace),
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "Reservation"}]}
                },
            }
        ],
    }
    process = BerthRun.configured(kubeconfig_path, config, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


async def pod_group(api: ApiClient, namespace: str, name: str, min_member: int) -> None:
    body = {
        "apiVersion": f"{POD_GROUPS[0]}/{POD_GROUPS[1]}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }
    await CustomObjectsApi(api).create_namespaced_custom_object(
        POD_GROUPS[0], POD_GROUPS[1], namespace, POD_GROUPS[2], body
    )


async def member(story: Story, suffix: str, gang: str, cpu: str) -> str:
    """A Reservation of the gang: the label on the Reservation, its template in the test's
    namespace (where the PodGroup is)."""
    name = f"{story.group}-{suffix}"
    body = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "labels": {LABEL: gang}},
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
                            "resources": {"requests": {"cpu": cpu}},
                        }
                    ],
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": gang}}}],
        },
    }
    await story.custom.create_cluster_custom_object(
        "scheduling.koordinator.sh", "v1alpha1", "reservations", body
    )
    story.names.append(name)
    return name


async def says(name: str, text: str, events: Pods) -> str:
    seen: list[str] = []

    async def said() -> bool:
        seen[:] = [e.message for e in await events.events(name, "FailedScheduling")]
        return any(text in message for message in seen)

    try:
        await eventually(said, DECIDED)
    except AssertionError as err:
        raise AssertionError(f"{name} said {seen}, not {text!r}") from err
    return next(m for m in seen if text in m)


async def phases(story: Story, names: list[str]) -> list[str]:
    return [((await story.get(n)).get("status") or {}).get("phase", "") for n in names]


async def test_reservations_of_a_gang_are_placed_whole_and_none_before_the_quorum(
    api: ApiClient, namespace: str, story: Story, berth: BerthRun
) -> None:
    await story.node("a", cpu="2")
    await story.node("b", cpu="2")
    await pod_group(api, namespace, "train", 3)
    events = Pods(api, "default")  # a cluster-scoped object's events
    first = [await member(story, f"train-{i}", "train", "1") for i in range(2)]
    await says(first[0], "is waiting for members: 2 of 3 (minMember) exist", events)
    assert await phases(story, first) == ["Pending", "Pending"]
    third = await member(story, "train-2", "train", "1")
    for name in [*first, third]:
        await story.wait_phase(name, "Available", within=DECIDED)

    # A second gang of three on the one cpu left: none placed, every member says why.
    await pod_group(api, namespace, "eval", 3)
    late = [await member(story, f"eval-{i}", "eval", "1") for i in range(3)]
    for name in late:
        message = await says(name, "cannot be placed: 1 of the 3 members it needs fit", events)
        assert "PodGroup" in message
    assert await phases(story, late) == ["Pending"] * 3
