"""PodMigrationJobs end to end on the local cluster, through one real `berth run` (the
scheduler with the Reservation and LoadAwareScheduling plugins, the operators, and the
LowNodeLoad balancer of the installed descheduler configuration) for the whole module.

Each test has its own kwok nodes (selected by a label in the pods' template), so the
session's other nodes stay out of it; the jobs apply docs/examples/migration/job.yaml and
web.yaml under the test's names.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, PolicyV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from berth.localcluster.kubectl import Kubectl
from tests.integration.cluster import Nodes
from tests.integration.processes import BerthRun
from tests.support import REPO, eventually

GROUP, VERSION = "scheduling.koordinator.sh", "v1alpha1"
JOBS, RESERVATIONS = "podmigrationjobs", "reservations"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
MERGE = "application/merge-patch+json"
SCHEDULER = "berth-migration"
EXAMPLES = REPO / "docs" / "examples" / "migration"
Json = dict[str, Any]


def example(file: str, kind: str) -> Json:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / file).read_text()) if d]
    found: Json = copy.deepcopy(next(d for d in docs if d["kind"] == kind))
    return found


BALANCED = {"berth.test/balance": "on"}
"""The label of the only nodes the module's balancer looks at (the balancer test's)."""
INTERVAL = 2


def descheduler_config() -> Json:
    """manifests/descheduler-config.yaml, on this module's balanced nodes, every 2 s, and
    acting on the second hot report in a row rather than the fifth."""
    configmap = yaml.safe_load((REPO / "manifests" / "descheduler-config.yaml").read_text())
    config: Json = yaml.safe_load(configmap["data"]["descheduler-config.yaml"])
    config["deschedulingInterval"] = f"{INTERVAL}s"
    for plugin in config["profiles"][0]["pluginConfig"]:
        if plugin["name"] == "LowNodeLoad":
            plugin["args"]["nodeSelector"] = {"matchLabels": BALANCED}
            plugin["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 2}
    return config


@pytest.fixture(scope="module")
def berth(
    kubeconfig_path: str, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BerthRun]:
    """One `berth run` for the module: a profile with the Reservation and load-aware
    plugins, the operators, and the balancer."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": 0.5,
        "podMaxBackoffSeconds": 2,
        "profiles": [
            {
                "schedulerName": SCHEDULER,
                "plugins": {
                    "multiPoint": {
                        "enabled": [
                            {"name": "Reservation", "weight": 5000},
                            {"name": "LoadAwareScheduling"},
                        ]
                    }
                },
            }
        ],
    }
    directory = tmp_path_factory.mktemp("berth-migration")
    descheduling = directory / "descheduler-config.yaml"
    descheduling.write_text(yaml.safe_dump(descheduler_config()))
    # Debug: its log then says each binding and each decision made again, for a failure.
    process = BerthRun.configured(kubeconfig_path, config, directory, log_level="debug")
    process.command.append(f"--descheduler-config={descheduling}")
    process.start()
    try:
        yield process
    finally:
        process.stop()


class Story:
    """The test's nodes, workload and jobs."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.group = "mg-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]
        self.nodes = Nodes(api, self.group)
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.jobs: list[str] = []

    async def node(self, suffix: str, cpu: str = "4", balanced: bool = False) -> str:
        return await self.nodes.add(
            suffix,
            labels={"berth.test/group": self.group, **(BALANCED if balanced else {})},
            allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"},
        )

    async def replicaset(self, replicas: int, cpu: str = "1", pdb_min: int | None = None) -> None:
        """docs/examples/migration/web.yaml, on this test's nodes; its PDB when asked."""
        rs = example("web.yaml", "ReplicaSet")
        rs["metadata"]["namespace"] = self.namespace
        rs["spec"]["replicas"] = replicas
        spec = rs["spec"]["template"]["spec"]
        spec["schedulerName"] = SCHEDULER
        spec["nodeSelector"] = {"berth.test/group": self.group}
        spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
        await AppsV1Api(self.api).create_namespaced_replica_set(self.namespace, rs)
        if pdb_min is not None:
            pdb = example("web.yaml", "PodDisruptionBudget")
            pdb["metadata"]["namespace"] = self.namespace
            pdb["spec"]["minAvailable"] = pdb_min
            await PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(self.namespace, pdb)

    async def pods(self) -> list[Any]:
        listed = await self.core.list_namespaced_pod(self.namespace, label_selector="app=web")
        return list(listed.items)

    async def running(self, count: int, within: float = 90) -> list[Any]:
        """Until ``count`` web pods are bound, Running and not terminating."""
        found: list[Any] = []

        async def there() -> bool:
            found[:] = [
                p
                for p in await self.pods()
                if p.spec.node_name
                and p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
            ]
            return len(found) == count

        await eventually(there, within)
        return found

    async def migrate(self, pod: str, suffix: str = "", file: str = "job.yaml", **spec: Any) -> str:
        """docs/examples/migration/job.yaml (or ``file``) for ``pod``."""
        job = example(file, "PodMigrationJob")
        name = f"{self.group}-{pod}{suffix}"[:63]
        job["metadata"]["name"] = name
        job["spec"]["podRef"] = {"namespace": self.namespace, "name": pod}
        job["spec"].update(spec)
        await self.custom.create_cluster_custom_object(GROUP, VERSION, JOBS, job)
        self.jobs.append(name)
        return name

    async def job(self, name: str) -> Json:
        found: Json = await self.custom.get_cluster_custom_object(GROUP, VERSION, JOBS, name)
        return found

    async def status(self, name: str) -> Json:
        return (await self.job(name)).get("status") or {}

    async def wait(self, name: str, phase: str, within: float = 120) -> Json:
        seen: list[Json] = [{}]

        async def there() -> bool:
            seen[0] = await self.status(name)
            return bool(seen[0].get("phase") == phase)

        try:
            await eventually(there, within)
        except AssertionError as err:
            raise AssertionError(f"{name}: status {seen[0]} (wanted {phase})") from err
        return seen[0]

    async def wait_condition(
        self, name: str, kind: str, status: str, reason: str | None, within: float = 120
    ) -> Json:
        seen: list[Json] = [{}]

        async def there() -> bool:
            seen[0] = await self.status(name)
            return any(
                c["type"] == kind and c["status"] == status and c.get("reason") == reason
                for c in seen[0].get("conditions") or ()
            )

        try:
            await eventually(there, within)
        except AssertionError as err:
            raise AssertionError(f"{name}: status {seen[0]} (wanted {kind} {reason})") from err
        return next(c for c in seen[0]["conditions"] if c["type"] == kind)

    async def reservation(self, name: str) -> Json | None:
        try:
            found: Json = await self.custom.get_cluster_custom_object(
                GROUP, VERSION, RESERVATIONS, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    async def job_events(self, name: str) -> list[str]:
        events = await self.core.list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={name},involvedObject.kind=PodMigrationJob"
        )
        ordered = sorted(events.items, key=lambda e: (e.first_timestamp, e.metadata.name))
        return [e.reason for e in ordered]

    async def close(self) -> None:
        for name in self.jobs:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, JOBS, name)
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, RESERVATIONS, name)
        await self.nodes.delete_all()


@pytest.fixture
async def story(
    api: ApiClient, crds: None, namespace: str, berth: BerthRun
) -> AsyncIterator[Story]:
    made = Story(api, namespace)
    try:
        yield made
    finally:
        await made.close()


async def scrape(berth: BerthRun) -> str:
    """``/metrics`` of the module's `berth run` (its port is in its log)."""
    port = None
    for line in berth.log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == "serving health and metrics":
                port = str(entry["address"]).rpartition(":")[2]
    assert port is not None, "berth run has not logged its health address"
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def test_a_job_moves_a_replicaset_pod_into_a_reservation_made_first(
    story: Story, kubeconfig_path: str, berth: BerthRun
) -> None:
    """docs/examples/migration/job.yaml and web.yaml."""
    hot = await story.node("a")
    await story.replicaset(2)
    pods = await story.running(2)
    assert {p.spec.node_name for p in pods} == {hot}
    idle = await story.node("b")
    moving = pods[0].metadata.name
    name = await story.migrate(moving)

    status = await story.wait(name, "Succeeded")
    assert status["status"] == "Complete"
    assert "reason" not in status  # nothing went wrong
    assert status["nodeName"] == idle
    new_pod = status["podRef"]["name"]
    assert status["message"] == f'Bind Pod "{story.namespace}/{new_pod}" in Reservation "{name}"'
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions == {
        "ReservationCreated": ("True", None),
        "ReservationScheduled": ("True", None),
        "Eviction": ("True", "EvictComplete"),
        "PodBoundReservation": ("True", None),
    }
    # The reservation was Available (scheduled, event recorded) before the eviction began.
    reasons: list[str] = []

    async def told() -> bool:
        reasons[:] = await story.job_events(name)
        return "Complete" in reasons

    await eventually(told, 30)  # events follow the status they explain
    assert reasons.index("ReservationScheduled") < reasons.index("Evicting"), reasons
    assert reasons.index("Evicting") < reasons.index("EvictComplete"), reasons
    # The replacement is on the idle node, in the reservation, which it used up.
    replacement = await story.core.read_namespaced_pod(new_pod, story.namespace)
    assert replacement.spec.node_name == idle
    assert name in replacement.metadata.annotations[ALLOCATED]
    reservation = await story.reservation(name)
    assert reservation is not None
    assert reservation["status"]["phase"] == "Succeeded"
    assert reservation["status"]["nodeName"] == idle
    names = {p.metadata.name for p in await story.running(2)}
    assert moving not in names
    # The metrics count it.
    assert 'berth_pod_migrations_succeeded_total{mode="ReservationFirst"}' in await scrape(berth)
    # kubectl get pmj shows the job, its phase, node, pod and reason.
    table = Kubectl(kubeconfig_path)("get", "pmj", name)
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "PHASE", "STATUS", "REASON", "AGE"]
    assert {"NODE", "POD", "NEWPOD"} <= set(header.split())
    assert row.split()[:3] == [name, "Succeeded", "Complete"]
    assert {idle, moving, new_pod} <= set(row.split())


async def test_evict_directly_only_evicts(story: Story) -> None:
    """docs/examples/migration/evict-directly.yaml: no reservation, the pod is evicted."""
    await story.node("a")
    await story.replicaset(2)
    pods = await story.running(2)
    moving = pods[0].metadata.name
    name = await story.migrate(moving, file="evict-directly.yaml")
    status = await story.wait(name, "Succeeded")
    assert status["message"] == f'Pod "{story.namespace}/{moving}" has been evicted'
    assert "ReservationCreated" not in {c["type"] for c in status["conditions"]}
    assert await story.reservation(name) is None
    assert moving not in {p.metadata.name for p in await story.running(2)}


async def test_a_job_whose_reservation_cannot_be_placed_never_evicts(story: Story) -> None:
    hot = await story.node("a")
    await story.replicaset(2)
    pods = await story.running(2)
    moving = pods[0]
    name = await story.migrate(moving.metadata.name, ttl="25s")

    # The decision: the reservation has no node (only the pod's own node is in the group).
    condition = await story.wait_condition(name, "ReservationScheduled", "False", "Unschedulable")
    assert condition["message"]
    status = await story.wait(name, "Failed", within=90)
    assert (status["reason"], status["message"]) == ("Timeout", "Abort job caused by timeout")
    assert "Eviction" not in {c["type"] for c in status.get("conditions") or ()}
    # The pod never moved, and the reservation is released.
    still = await story.core.read_namespaced_pod(moving.metadata.name, story.namespace)
    assert still.metadata.uid == moving.metadata.uid
    assert still.metadata.deletion_timestamp is None
    assert still.spec.node_name == hot

    async def released() -> bool:
        return await story.reservation(name) is None

    await eventually(released, 60)
    assert "Evicting" not in await story.job_events(name)


async def test_a_pdb_that_refuses_eviction_leaves_the_pod_running_and_fails_the_job(
    story: Story, berth: BerthRun
) -> None:
    """web.yaml's PodDisruptionBudget, asking for every pod to stay."""
    hot = await story.node("a")
    await story.replicaset(2, pdb_min=2)
    pods = await story.running(2)
    await story.node("b")
    moving = pods[0]
    name = await story.migrate(moving.metadata.name, ttl="40s")

    refused = await story.wait_condition(name, "Eviction", "False", "FailedEvict")
    assert "disruption budget" in refused["message"], refused
    status = await story.wait(name, "Failed", within=120)
    assert status["reason"] == "FailedEvict"
    assert "disruption budget" in status["message"]
    assert 'berth_pod_migrations_failed_total{reason="FailedEvict"}' in await scrape(berth)
    still = await story.core.read_namespaced_pod(moving.metadata.name, story.namespace)
    assert still.metadata.uid == moving.metadata.uid
    assert still.metadata.deletion_timestamp is None
    assert still.spec.node_name == hot
    assert len(await story.running(2)) == 2

    async def released() -> bool:
        return await story.reservation(name) is None

    await eventually(released, 60)


async def test_limits_per_node_and_workload_hold_under_a_burst_of_jobs(story: Story) -> None:
    """Twenty jobs at once for a ReplicaSet of twenty pods on one node: Koordinator's
    defaults let two migrate at a time (maxMigratingPerNode 2, maxUnavailablePerWorkload 2
    for twenty replicas), and two per five minutes per workload; the rest wait, saying why."""
    await story.node("a", cpu="8")
    await story.replicaset(20, cpu="100m")
    pods = await story.running(20, within=120)
    await story.node("b")
    await story.node("c")
    names = await asyncio.gather(*(story.migrate(p.metadata.name) for p in pods))

    most_running = 0
    most_unavailable = 0
    held: set[str] = set()
    last: list[Json] = []

    async def two_moved_and_the_rest_held() -> bool:
        nonlocal most_running, most_unavailable
        statuses = await asyncio.gather(*(story.status(n) for n in names))
        last[:] = statuses
        phases = [s.get("phase") for s in statuses]
        most_running = max(most_running, phases.count("Running"))
        ready = [
            p
            for p in await story.pods()
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]
        most_unavailable = max(most_unavailable, 20 - len(ready))
        held.update(s.get("message", "") for s in statuses if s.get("reason") == "Throttled")
        waiting = [s for s in statuses if s.get("phase") == "Pending"]
        limited = all("the workload limiter allows 2" in s.get("message", "") for s in waiting)
        return phases.count("Succeeded") == 2 and len(waiting) == 18 and limited

    try:
        await eventually(two_moved_and_the_rest_held, 240)
    except AssertionError as err:
        seen = sorted({(s.get("phase"), s.get("reason"), s.get("message")) for s in last}, key=str)
        raise AssertionError(f"job statuses: {seen}") from err
    assert most_running <= 2
    # Each migrating pod is unavailable until its replacement runs; never more than two.
    assert most_unavailable <= 2
    # Every job held back named the limit holding it (which one first depends on timing).
    limits = (
        "maxMigratingPerNode 2",
        "maxMigratingPerWorkload 2",
        "maxUnavailablePerWorkload 2",
        "the workload limiter",
    )
    prefix = "Waiting for arbitration: "
    unexplained = [m for m in held if not m.removeprefix(prefix).startswith(limits)]
    assert not unexplained, unexplained


async def test_a_killed_berth_resumes_a_job_where_it_stood(story: Story, berth: BerthRun) -> None:
    await story.node("a")
    await story.replicaset(2)
    pods = await story.running(2)
    idle = await story.node("b")
    moving = pods[0]
    name = await story.migrate(moving.metadata.name)
    await story.wait_condition(name, "ReservationCreated", "True", None)
    berth.kill()
    try:
        reservation = await story.reservation(name)
        assert reservation is not None
        made = reservation["metadata"]["uid"]
    finally:
        berth.start()
    try:
        status = await story.wait(name, "Succeeded")
    except AssertionError as err:
        # What the restarted Berth said of this test's pods and job, and where the pods
        # stand, for the reader of a failure.
        said = [
            line
            for line in berth.log.read_text().splitlines()
            if story.namespace in line or name in line
        ]
        pods = [
            f"{p.metadata.name} node={p.spec.node_name} phase={p.status.phase} "
            f"allocated={(p.metadata.annotations or {}).get(ALLOCATED)}"
            for p in await story.pods()
        ]
        raise AssertionError(
            f"{err}\npods: {pods}\nreservation: {await story.reservation(name)}\n"
            f"berth's log of {story.namespace}:\n" + "\n".join(said[-60:])
        ) from err
    assert status["nodeName"] == idle
    # The reservation made before the kill is the one used: none was made twice.
    used = await story.reservation(name)
    assert used is not None
    assert used["metadata"]["uid"] == made
    assert status["podRef"]["name"] != moving.metadata.name


POD_CPU, BASE_CPU = 800, 400
"""What each web pod and each node's system use, in millicores (as the agent would report)."""


async def report_usage(story: Story, nodes: list[str], stop: asyncio.Event) -> None:
    """Act as the node agents: every second, each node's NodeMetric says what its running
    web pods use (800m each) on top of 400m for the system."""
    metrics = "slo.koordinator.sh", "v1alpha1", "nodemetrics"
    while not stop.is_set():
        pods = await story.pods()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for node in nodes:
            mine = [
                p
                for p in pods
                if p.spec.node_name == node
                and p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
            ]
            cpu = BASE_CPU + POD_CPU * len(mine)
            status = {
                "updateTime": now,
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": f"{cpu}m", "memory": "1Gi"}}},
                "podsMetric": [
                    {
                        "namespace": story.namespace,
                        "name": p.metadata.name,
                        "podUsage": {"resources": {"cpu": f"{POD_CPU}m", "memory": "100Mi"}},
                    }
                    for p in mine
                ],
            }
            with contextlib.suppress(ApiException):  # its NodeMetric may not be made yet
                await story.custom.patch_cluster_custom_object_status(
                    *metrics, node, {"status": status}, _content_type=MERGE
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1)


async def test_the_balancer_relieves_hot_nodes_onto_idle_ones(story: Story) -> None:
    """Two nodes at 90% cpu (four 800m pods and 400m of system on 4 cores), two at 10%:
    LowNodeLoad (highThresholds cpu 75) moves one pod off each hot node, since that brings
    it to 70%, into the idle nodes, and nothing more."""
    hot = [await story.node("h1", balanced=True)]
    await story.replicaset(4)  # 1 core requested each: h1 is full
    await story.running(4)
    hot.append(await story.node("h2", balanced=True))
    await AppsV1Api(story.api).patch_namespaced_replica_set(
        "web", story.namespace, {"spec": {"replicas": 8}}
    )
    placed = await story.running(8)
    assert sorted(p.spec.node_name for p in placed) == sorted(hot * 4)
    idle = [await story.node("i1", balanced=True), await story.node("i2", balanced=True)]
    stop = asyncio.Event()
    reporting = asyncio.create_task(report_usage(story, hot + idle, stop))
    try:
        jobs = await balanced_jobs(story, 2)
        for job in jobs:
            story.jobs.append(job["metadata"]["name"])
        done = [await story.wait(job["metadata"]["name"], "Succeeded") for job in jobs]
        assert {job["metadata"]["annotations"]["berth.dev/hot-node"] for job in jobs} == set(hot)
        assert {status["nodeName"] for status in done} <= set(idle)
        # Every replacement landed on an idle node, none on a hot one.
        for status in done:
            moved = await story.core.read_namespaced_pod(status["podRef"]["name"], story.namespace)
            assert moved.spec.node_name in idle
        # Each hot node is at 70% now, under its high threshold: nothing more moves.
        await asyncio.sleep(5 * INTERVAL)
        assert len(await balanced_jobs(story, 2)) == 2
        spread = sorted(p.spec.node_name for p in await story.running(8))
        assert spread == sorted(hot * 3 + [status["nodeName"] for status in done])
    finally:
        stop.set()
        await reporting


async def balanced_jobs(story: Story, count: int, within: float = 90) -> list[Json]:
    """Until the balancer has made ``count`` jobs for this test's pods; those jobs."""
    found: list[Json] = []

    async def made() -> bool:
        listed = await story.custom.list_cluster_custom_object(
            GROUP, VERSION, JOBS, label_selector="berth.dev/descheduler=LowNodeLoad"
        )
        found[:] = [
            j for j in listed["items"] if j["spec"]["podRef"]["namespace"] == story.namespace
        ]
        return len(found) >= count

    await eventually(made, within)
    return found
