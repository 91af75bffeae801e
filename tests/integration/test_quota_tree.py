"""Koordinator's quota tree on the local cluster, through a real `berth run`: the
docs/examples/quota-tree walk-through. A department (max 8 of 10 GPUs) over two teams
(min 2, max 8, weights 8 and 16) shares its runtime by weight and bounds its teams; an idle
team's share goes to its sibling and comes back by reclaim, each freed GPU held by a
Reservation of the reclaiming pod; non-preemptible pods stay within their quota's min and
are never reclaimed; a lending limit caps what a sibling borrows.
Status and Koordinator's annotations carry the runtime table.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi

from berth.reservation.owners import ALLOCATED_ANNOTATION
from berth.reservation.preemption import reservation_name
from tests.integration.cluster import Nodes, pod_body
from tests.integration.processes import BerthRun
from tests.reliability.checker import Snapshot, snapshot
from tests.reliability.quota_invariants import (
    reclaim_victim,
    reclaim_without_reservation,
    tree_over_max,
)
from tests.support import REPO, eventually

GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
GPU = "nvidia.com/gpu"
PREFIX = "quota.scheduling.koordinator.sh/"
EXAMPLE = REPO / "docs" / "examples" / "quota-tree"
CONFIG = EXAMPLE / "scheduler-config.yaml"
WITHIN = 120.0


def short(namespace: str) -> str:
    return "qt-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLE / name).read_text()) if d]


class Walkthrough:
    """The example's namespaces and quota names mapped onto this test's: tree quotas are
    known by name across the cluster, so each test names its own."""

    def __init__(self, api: ApiClient, namespaces: dict[str, str], prefix: str) -> None:
        self.api = api
        self.namespaces = namespaces  # example namespace -> this test's
        self.prefix = prefix
        self.scheduler = prefix

    def quota_name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    async def apply_quotas(self, annotations: dict[str, dict[str, str]] | None = None) -> None:
        """The example's quotas, with ``annotations`` added by example quota name."""
        custom = CustomObjectsApi(self.api)
        for doc in documents("quotas.yaml"):
            if doc["kind"] != "ElasticQuota":
                continue
            meta = doc["metadata"]
            meta.setdefault("annotations", {}).update((annotations or {}).get(meta["name"], {}))
            meta["name"] = self.quota_name(meta["name"])
            meta["namespace"] = self.namespaces[meta["namespace"]]
            labels = meta.get("labels") or {}
            if PREFIX + "parent" in labels:
                labels[PREFIX + "parent"] = self.quota_name(labels[PREFIX + "parent"])
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], PLURAL, doc
            )

    async def apply_workloads(
        self, name: str, teams: tuple[str, ...] = ("team-a", "team-b"), cpu: str | None = None
    ) -> None:
        """The example's Deployments of ``teams``; ``cpu`` adds a cpu request to each pod."""
        for doc in documents(name):
            if doc["metadata"]["namespace"] not in teams:
                continue
            doc["metadata"]["namespace"] = namespace = self.namespaces[doc["metadata"]["namespace"]]
            doc["spec"]["template"]["spec"]["schedulerName"] = self.scheduler
            if cpu is not None:
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    container["resources"].setdefault("requests", {})["cpu"] = cpu
            await AppsV1Api(self.api).create_namespaced_deployment(namespace, doc)

    async def scale(self, team: str, replicas: int) -> None:
        await AppsV1Api(self.api).patch_namespaced_deployment_scale(
            "trainer", self.namespaces[team], {"spec": {"replicas": replicas}}
        )

    async def pods(self, team: str, app: str = "trainer") -> tuple[list[Any], list[Any]]:
        """(bound, waiting) pods of the team's Deployment, not being deleted."""
        listed = await CoreV1Api(self.api).list_namespaced_pod(
            self.namespaces[team], label_selector=f"app={app}"
        )
        live = [p for p in listed.items if p.metadata.deletion_timestamp is None]
        return [p for p in live if p.spec.node_name], [p for p in live if not p.spec.node_name]

    async def quota(self, name: str) -> dict[str, Any]:
        namespace = self.namespaces[name]
        obj: dict[str, Any] = await CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, self.quota_name(name)
        )
        return obj

    async def gpus(self, name: str, field: str) -> str | None:
        return (((await self.quota(name)).get("status") or {}).get(field) or {}).get(GPU)

    async def settle(
        self, expected: dict[str, tuple[int, int]], app: str = "trainer", within: float = WITHIN
    ) -> None:
        """Until each team has (bound, waiting) pods, and stays so for a moment."""
        seen: dict[str, tuple[int, int]] = {}

        async def steady() -> bool:
            for team in expected:
                bound, waiting = await self.pods(team, app)
                seen[team] = (len(bound), len(waiting))
            return seen == expected

        try:
            await eventually(steady, within)
        except AssertionError as err:
            raise AssertionError(f"(bound, waiting) {seen} != {expected}") from err

    async def table(self, expected: dict[str, dict[str, str]]) -> None:
        """Until the quotas' status says ``expected`` (quota -> field -> GPUs)."""
        seen: dict[str, dict[str, str | None]] = {}

        async def written() -> bool:
            for name, fields in expected.items():
                seen[name] = {f: await self.gpus(name, f) for f in fields}
            return seen == expected

        try:
            await eventually(written, WITHIN)
        except AssertionError as err:
            raise AssertionError(f"status {seen} != {expected}") from err

    async def waiting_message(self, team: str, app: str = "trainer") -> str:
        _, waiting = await self.pods(team, app)
        assert waiting
        name = waiting[0].metadata.name
        core = CoreV1Api(self.api)
        messages: list[str] = []

        async def refused() -> bool:
            events = await core.list_namespaced_event(
                self.namespaces[team], field_selector=f"involvedObject.name={name}"
            )
            messages[:] = [e.message for e in events.items if e.reason == "FailedScheduling"]
            return bool(messages)

        await eventually(refused, WITHIN)
        return messages[-1]


class TreeInvariants:
    """The reliability checker's tree invariants judged on the cluster every second while a
    test runs: no quota's subtree over its max, no reclaim eviction before a Reservation of
    its preemptor. Pods and Reservations are remembered as last seen, since victims and
    spent Reservations may be gone by the end."""

    def __init__(self, api: ApiClient, namespaces: Iterable[str]) -> None:
        self.api = api
        self.namespaces = list(namespaces)
        self.samples = 0
        self.found: list[str] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.reservations: dict[str, dict[str, Any]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def sample(self) -> Snapshot:
        snap = await snapshot(self.api, self.namespaces)
        self.samples += 1
        mine = [p for p in snap.pods if p["metadata"]["namespace"] in self.namespaces]
        quotas = [q for q in snap.quotas if q["metadata"]["namespace"] in self.namespaces]
        self.found += tree_over_max(quotas, mine)
        for pod in mine:
            self.remember(pod)
        for reservation in snap.reservations:
            self.reservations[reservation["metadata"]["uid"]] = reservation
        return snap

    def remember(self, pod: dict[str, Any]) -> None:
        """Keep a pod's latest version, but never lose the one that marked it a victim."""
        uid = pod["metadata"]["uid"]
        if reclaim_victim(pod) or not reclaim_victim(self.pods.get(uid, pod)):
            self.pods[uid] = pod

    async def _run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(1.0)

    async def _watch(self, namespace: str) -> None:
        """Every version of the namespace's pods: a victim may be gone between samples."""
        core = CoreV1Api(self.api)
        while True:
            async with watch.Watch().stream(core.list_namespaced_pod, namespace) as stream:
                async for event in stream:
                    self.remember(event["raw_object"])

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._run()),
            *(asyncio.create_task(self._watch(n)) for n in self.namespaces),
        ]

    async def verdict(self) -> list[str]:
        """Every violation seen, the reclaim order judged on a last sample; fails unless
        some reclaim victim was seen marked, so the order check is not vacuous."""
        assert self.tasks, "never started"
        await self.stop()
        last = await self.sample()
        victims = [p for p in self.pods.values() if reclaim_victim(p)]
        assert victims, f"no reclaim victim seen marked in {self.samples} samples"
        return self.found + reclaim_without_reservation(
            last.preempted, self.pods, self.reservations.values()
        )


@pytest.fixture
async def invariants(
    api: ApiClient, team_namespaces: dict[str, str]
) -> AsyncIterator[TreeInvariants]:
    """The tree invariants, judged while the test runs once it calls ``start``."""
    watcher = TreeInvariants(api, team_namespaces.values())
    try:
        yield watcher
    finally:
        await watcher.stop()


@pytest.fixture
async def team_namespaces(api: ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    core = CoreV1Api(api)
    made = {"team-a": f"{namespace[:50]}-a", "team-b": f"{namespace[:50]}-b"}
    for name in made.values():
        await core.create_namespace({"metadata": {"name": name}})
    try:
        yield {"research": namespace, **made}
    finally:
        for name in made.values():
            await core.delete_namespace(name)


@pytest.fixture
async def gpu_nodes(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    nodes = Nodes(api, short(namespace))
    try:
        names = []
        for i, doc in enumerate(documents("gpu-nodes.yaml")):
            names.append(await nodes.add(f"gpu{i}", allocatable=doc["status"]["allocatable"]))
        yield names
    finally:
        await nodes.delete_all()


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` (not started) with the walk-through's scheduler configuration."""
    config = yaml.safe_load(CONFIG.read_text())
    config["profiles"][0]["schedulerName"] = short(namespace)
    process = BerthRun.configured(kubeconfig_path, config, tmp_path)
    try:
        yield process
    finally:
        process.stop()


async def only_this_tree(api: ApiClient, namespaces: set[str]) -> None:
    """Tree quotas of earlier tests (namespaces still being deleted) would share the root."""
    custom = CustomObjectsApi(api)

    async def alone() -> bool:
        listed = await custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return all(
            q["metadata"]["namespace"] in namespaces
            for q in listed["items"]
            if any(k.startswith(PREFIX) for k in q["metadata"].get("labels") or {})
        )

    await eventually(alone, within=WITHIN)


@pytest.fixture
async def walkthrough(
    api: ApiClient,
    namespace: str,
    team_namespaces: dict[str, str],
    gpu_nodes: list[str],
) -> Walkthrough:
    """The example's nodes and namespaces, once no other test's tree is left."""
    await only_this_tree(api, set(team_namespaces.values()))
    return Walkthrough(api, team_namespaces, short(namespace))


async def test_a_department_shares_by_weight_and_bounds_its_teams(
    walkthrough: Walkthrough, berth: BerthRun
) -> None:
    tree = walkthrough
    await tree.apply_quotas()
    await tree.apply_workloads("workloads.yaml")
    # Both teams' 16 pods wait before the scheduler starts, so each team's demand is known
    # from the first decision and the split does not depend on which pod comes first.
    await tree.settle({"team-a": (0, 8), "team-b": (0, 8)})
    berth.start()
    # research: min(10 GPUs, 16 wanted, max 8) = 8. Teams: mins 2 + 2, then the 4 left
    # by weight 8 : 16 -> 1 and 3 (the leftover unit to the larger remainder): 3 and 5.
    await tree.settle({"team-a": (3, 5), "team-b": (5, 3)})
    await tree.table(
        {
            "research": {"runtime": "8", "used": "8", "request": "16"},
            "team-a": {"runtime": "3", "used": "3", "request": "8", "borrowed": "1"},
            "team-b": {"runtime": "5", "used": "5", "request": "8", "borrowed": "3"},
        }
    )
    # Two GPUs stay free: the department's max bounds its teams.
    message = await tree.waiting_message("team-a")
    assert f"Insufficient quotas, quotaName: {tree.quota_name('team-a')}, " in message
    assert "exceedDimensions: [nvidia.com/gpu]" in message
    annotations = (await tree.quota("team-b"))["metadata"]["annotations"]
    assert json.loads(annotations[PREFIX + "runtime"]) == {GPU: "5"}
    assert json.loads(annotations[PREFIX + "request"]) == {GPU: "8"}

    # team-b goes idle: its share (and its min, which it lends) goes to team-a.
    await tree.scale("team-b", 0)
    await tree.settle({"team-a": (8, 0), "team-b": (0, 0)})
    await tree.table(
        {
            "research": {"runtime": "8", "used": "8"},
            "team-a": {"runtime": "8", "used": "8", "borrowed": "6"},
            "team-b": {"runtime": "0", "used": "0", "lent": "2"},
        }
    )


async def test_non_preemptible_pods_stay_within_min(
    walkthrough: Walkthrough, berth: BerthRun
) -> None:
    tree = walkthrough
    await tree.apply_quotas()
    berth.start()
    await tree.apply_workloads("non-preemptible.yaml")
    await tree.settle({"team-a": (2, 1)}, app="server")
    message = await tree.waiting_message("team-a", app="server")
    assert (
        f"Insufficient non-preemptible quotas, quotaName: {tree.quota_name('team-a')}, "
        "min: map[nvidia.com/gpu:2], nonPreemptibleUsed: map[nvidia.com/gpu:2], "
        "pod's request: map[nvidia.com/gpu:1 pods:1], exceedDimensions: [nvidia.com/gpu]"
    ) in message
    # The refusal is the label's: preemptible pods of the same team borrow up to the
    # department's 8 (team-a's demand, 3 + 8 capped at its max 8, all of it).
    await tree.apply_workloads("workloads.yaml", teams=("team-a",))
    await tree.settle({"team-a": (6, 2)})


async def test_a_lending_limit_caps_what_others_borrow(
    walkthrough: Walkthrough, berth: BerthRun
) -> None:
    tree = walkthrough
    await tree.apply_quotas({"team-b": {"berth.io/lending-limit": json.dumps({GPU: "1"})}})
    berth.start()
    await tree.apply_workloads("workloads.yaml", teams=("team-a",))
    # research hands down 8; idle team-b lends only 1 of its min 2 and keeps the other:
    # team-a gets 8 - 1 = 7, not the 8 it would without the limit.
    await tree.settle({"team-a": (7, 1)})
    await tree.table(
        {
            "team-a": {"runtime": "7", "used": "7"},
            "team-b": {"runtime": "1", "used": "0", "lent": "1"},
        }
    )
    assert f"quotaName: {tree.quota_name('team-a')}, " in await tree.waiting_message("team-a")


async def test_borrowed_capacity_comes_back_through_reservations(
    walkthrough: Walkthrough, berth: BerthRun, invariants: TreeInvariants
) -> None:
    tree = walkthrough
    await tree.apply_quotas()
    berth.start()
    invariants.start()
    # A non-preemptible pod of team-a (within its min) and its trainers borrowing the rest.
    await tree.apply_workloads("non-preemptible.yaml")
    await tree.settle({"team-a": (2, 1)}, app="server")
    await tree.apply_workloads("workloads.yaml", teams=("team-a",))
    await tree.settle({"team-a": (6, 2)})
    # team-b's demand returns: runtime team-a 3 (2 servers + 1 trainer), team-b 5. Every
    # GPU team-b gets is reclaimed from team-a's trainers and held for the reclaiming pod.
    await tree.apply_workloads("workloads.yaml", teams=("team-b",))
    await tree.settle({"team-b": (5, 3)}, within=240)
    await tree.settle({"team-a": (1, 7)})
    await tree.settle({"team-a": (2, 1)}, app="server")  # never reclaimed
    await tree.table(
        {
            "team-a": {"runtime": "3", "used": "3"},
            "team-b": {"runtime": "5", "used": "5"},
        }
    )
    core = CoreV1Api(tree.api)
    held = await core.list_namespaced_event(
        tree.namespaces["team-b"], field_selector="reason=ReservedForPreemption"
    )
    assert held.items, "no Reservation held what the reclaim freed"
    # One trainer per reclaiming pod, no more; and what each reclaim freed went to the pod
    # it was freed for, through its own Reservation (none to a third pod).
    preempted = await core.list_namespaced_event(
        tree.namespaces["team-a"], field_selector="reason=Preempted"
    )
    victims = {e.involved_object.name for e in preempted.items}
    assert len(victims) == 5, f"{len(victims)} of team-a's trainers reclaimed, not 5: {victims}"
    pods = await core.list_namespaced_pod(tree.namespaces["team-b"], label_selector="app=trainer")
    bound = [p for p in pods.items if p.spec.node_name and not p.metadata.deletion_timestamp]
    strays = [
        p.metadata.name
        for p in bound
        if allocated_to(p.metadata.annotations)
        != reservation_name(p.metadata.namespace, p.metadata.name, p.metadata.uid)
    ]
    assert not strays, f"team-b pods bound without their own Reservation: {strays}"
    assert await invariants.verdict() == []


def allocated_to(annotations: dict[str, str] | None) -> str:
    """The Reservation a pod was bound into, from Koordinator's annotation."""
    text = (annotations or {}).get(ALLOCATED_ANNOTATION)
    return str(json.loads(text)["name"]) if text else ""


async def test_the_quota_using_least_of_its_runtime_goes_first(
    walkthrough: Walkthrough, berth: BerthRun
) -> None:
    """Each pod asks 16 cpus as well: the nodes (32 cpus each) take 4 pods, fewer than the
    teams' runtimes (3 and 5) admit, so the queue's order decides who gets them. All 16 wait
    before the scheduler starts, team-a's first: in arrival order team-a would take 3 and
    team-b 1; ordered by dominant share (used / runtime) they alternate to 2 and 2."""
    tree = walkthrough
    await tree.apply_quotas()
    await tree.apply_workloads("workloads.yaml", teams=("team-a",), cpu="16")
    await tree.settle({"team-a": (0, 8)})
    await tree.apply_workloads("workloads.yaml", teams=("team-b",), cpu="16")
    await tree.settle({"team-a": (0, 8), "team-b": (0, 8)})
    berth.start()
    await tree.settle({"team-a": (2, 6), "team-b": (2, 6)})
    await tree.table(
        {
            "team-a": {"runtime": "3", "used": "2"},
            "team-b": {"runtime": "5", "used": "2"},
        }
    )


DEFAULT_QUOTA = "koordinator-default-quota"


async def no_gpu_pods_but_ours(api: ApiClient, namespaces: set[str]) -> None:
    """GPU pods of earlier tests (namespaces still being deleted, their quotas gone) would
    count in the default quota, which is the whole cluster's."""
    core = CoreV1Api(api)

    async def alone() -> bool:
        listed = await core.list_pod_for_all_namespaces()
        return all(
            p.metadata.namespace in namespaces
            for p in listed.items
            if any(GPU in ((c.resources and c.resources.requests) or {})
                   or GPU in ((c.resources and c.resources.limits) or {})
                   for c in p.spec.containers)
        )  # fmt: skip

    await eventually(alone, within=WITHIN)


async def test_pods_of_no_quota_count_in_the_default_quota_and_lower_the_runtimes(
    walkthrough: Walkthrough, berth: BerthRun
) -> None:
    """A stored default quota with max 3 GPUs; four one-GPU pods of no quota (in the
    department's namespace: a parent runs no pods, so they are no tree quota's): three run,
    the fourth waits at the default quota's max. The root then hands down 10 - 3 = 7, and
    team-a, wanting 8 while team-b is idle, runs 7; when the pods of no quota go, 8."""
    tree = walkthrough
    research = tree.namespaces["research"]
    await no_gpu_pods_but_ours(tree.api, set(tree.namespaces.values()))
    await tree.apply_quotas()
    custom = CustomObjectsApi(tree.api)
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, research, PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ElasticQuota",
            "metadata": {"name": DEFAULT_QUOTA,
                         "labels": {PREFIX + "parent": "koordinator-root-quota"}},
            "spec": {"max": {GPU: "3"}},
        },
    )  # fmt: skip
    core = CoreV1Api(tree.api)
    for i in range(4):
        body = pod_body(f"batch-{i}", tree.scheduler, labels={"app": "batch"})
        body["spec"]["containers"][0]["resources"]["requests"][GPU] = "1"
        body["spec"]["containers"][0]["resources"]["limits"] = {GPU: "1"}
        await core.create_namespaced_pod(research, body)
    berth.start()
    await tree.settle({"research": (3, 1)}, app="batch")
    message = await tree.waiting_message("research", app="batch")
    assert (
        f"Insufficient quotas, quotaName: {DEFAULT_QUOTA}, runtime: map[nvidia.com/gpu:3], "
        "used: map[nvidia.com/gpu:3]"
    ) in message

    async def default_status(field: str) -> str | None:
        obj = await custom.get_namespaced_custom_object(
            GROUP, VERSION, research, PLURAL, DEFAULT_QUOTA
        )
        return ((obj.get("status") or {}).get(field) or {}).get(GPU)

    async def default_used(expected: str) -> None:
        async def written() -> bool:
            return await default_status("used") == expected

        await eventually(written, WITHIN)

    await default_used("3")
    assert await default_status("runtime") == "3"
    await tree.apply_workloads("workloads.yaml", teams=("team-a",))
    await tree.settle({"team-a": (7, 1)})
    await tree.table(
        {
            "research": {"runtime": "7", "used": "7"},
            "team-a": {"runtime": "7", "used": "7"},
        }
    )
    # The pods of no quota go: the root hands down all 10 again, team-a's eighth pod runs.
    await core.delete_collection_namespaced_pod(
        research, label_selector="app=batch", grace_period_seconds=0
    )
    await tree.settle({"team-a": (8, 0)})
    await tree.table({"team-a": {"runtime": "8", "used": "8"}})
    await default_used("0")


@pytest.fixture
def berth_checking(
    kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path
) -> Iterator[BerthRun]:
    """`berth run` with the walk-through's configuration and the periodic over-runtime
    check every second."""
    config = yaml.safe_load(CONFIG.read_text())
    profile = config["profiles"][0]
    profile["schedulerName"] = short(namespace)
    profile["pluginConfig"].append(
        {"name": "CapacityScheduling", "args": {"overRuntimeCheckInterval": "1s"}}
    )
    process = BerthRun.configured(kubeconfig_path, config, tmp_path)
    try:
        yield process
    finally:
        process.stop()


async def test_young_pods_are_kept_until_min_runtime_then_the_periodic_check_reclaims(
    walkthrough: Walkthrough, berth_checking: BerthRun
) -> None:
    """team-a (min-runtime 25s) borrows all 8 GPUs; team-b's pods come at once and find
    every victim too young. Once the 25 s have passed, no cluster event requeues them: the
    periodic check does, and they reclaim (through reservations) to the runtime split."""
    tree = walkthrough
    min_runtime = 25.0
    await tree.apply_quotas({"team-a": {"berth.io/min-runtime": f"{min_runtime:.0f}s"}})
    berth_checking.start()
    await tree.apply_workloads("workloads.yaml", teams=("team-a",))
    await tree.settle({"team-a": (8, 0)})
    bound, _ = await tree.pods("team-a")
    youngest = max(p.status.start_time.timestamp() for p in bound if p.status.start_time)
    await tree.apply_workloads("workloads.yaml", teams=("team-b",))
    await tree.settle({"team-b": (0, 8)})
    message = await tree.waiting_message("team-b")
    # The decision was made (refused, reclaim tried) while team-a's pods were young ...
    assert "No preemption victims found for incoming pod" in message, message
    assert time.time() - youngest < min_runtime, "too slow to see the pods while young"
    bound, _ = await tree.pods("team-a")
    assert len(bound) == 8, "a pod within its quota's min-runtime was reclaimed"
    # ... and once they are older, the periodic check brings team-b's pods back to reclaim.
    await tree.settle({"team-b": (5, 3)}, within=180)
    await tree.settle({"team-a": (3, 5)})
    assert time.time() - youngest >= min_runtime
    events = await CoreV1Api(tree.api).list_namespaced_event(
        tree.namespaces["team-a"], field_selector="reason=ReclaimRetry"
    )
    assert events.items, "the periodic over-runtime check did not retry team-b's pods"
    assert tree.quota_name("team-a") in events.items[0].message
    held = await CoreV1Api(tree.api).list_namespaced_event(
        tree.namespaces["team-b"], field_selector="reason=ReservedForPreemption"
    )
    assert held.items, "no Reservation held what the reclaim freed"
