"""Berth beside kube-scheduler on the same cluster: the same pods on the same nodes, the
same PodScheduled messages, and the same per-plugin scores (kube-scheduler's -v=10 log).

Each case sets up its own kwok nodes (and pods pinned to them by nodeName, which neither
scheduler places), then runs its pods twice: first under kube-scheduler (the local
cluster's build, a process of its own), then, once those pods are gone, under Berth. Each
pod selects the case's nodes, so the rest of the cluster shows in both messages alike.
kube-scheduler's profile leaves out DynamicResources, whose PostFilter adds its own words
to every failure message; Berth refuses device claims by name instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.localcluster.build import cached
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import CycleState, Plugin
from berth.scheduler.service import Scheduler
from tests.integration.cluster import (
    Nodes,
    Pods,
    PriorityClasses,
    config_for,
    pod_body,
    running,
)
from tests.integration.processes import process
from tests.support import eventually

SMALL = {"cpu": "4", "memory": "8Gi", "pods": "110"}
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
SIDE = "parity-side"
WITHIN = 90.0
SCORED = re.compile(
    r'"Plugin scored node for pod" pod="(?P<pod>[^"]+)" plugin="(?P<plugin>[^"]+)" '
    r'node="(?P<node>[^"]+)" score=(?P<score>-?\d+)'
)


def short(namespace: str) -> str:
    """A name for the case's nodes and schedulers that fits in 63 characters."""
    return "p-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


@dataclass
class Side:
    """One scheduler's run of a case: its scheduler name and what it decided."""

    label: str
    scheduler: str
    placed: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    # plugin -> node -> weighted score, for the pods whose scores were compared
    scores: dict[str, dict[str, int]] = field(default_factory=dict)


class Case:
    """The nodes and pinned pods of one test, and running its pods under each scheduler."""

    def __init__(self, api: ApiClient, namespace: str, kubeconfig: str, tmp: Path) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.tmp = tmp
        self.tag = short(namespace)
        self.selector = {"berth-test": self.tag}
        self.nodes = Nodes(api, self.tag)
        self.pods = Pods(api, namespace)

    async def node(self, suffix: str, **labels: str) -> str:
        return await self.nodes.add(suffix, labels={**self.selector, **labels}, allocatable=SMALL)

    async def pin(self, name: str, node: str, **kwargs: Any) -> None:
        """A pod bound by its nodeName: part of the cluster both schedulers see."""
        await self.pods.create(pod_body(name, "none", nodeName=node, **kwargs))
        await self.pods.wait_bound(name, WITHIN)

    def body(self, side: Side, name: str, **kwargs: Any) -> dict[str, Any]:
        labels = {**kwargs.pop("labels", {}), SIDE: side.label}
        body = pod_body(name, side.scheduler, labels=labels, nodeSelector=self.selector, **kwargs)
        body["metadata"]["namespace"] = self.namespace
        return body

    async def bind(self, side: Side, name: str, **kwargs: Any) -> str:
        await self.pods.create(self.body(side, name, **kwargs))
        side.placed[name] = await self.pods.wait_bound(name, WITHIN)
        return side.placed[name]

    async def refuse(self, side: Side, name: str, **kwargs: Any) -> str:
        """Create a pod that fits nowhere; its PodScheduled message once it has one."""
        await self.pods.create(self.body(side, name, **kwargs))
        found: list[str] = []

        async def unschedulable() -> bool:
            pod = await self.pods.get(name)
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    found[:] = [condition.message or ""]
                    return bool(found[0])
            return False

        await eventually(unschedulable, WITHIN)
        side.messages[name] = found[0]
        return found[0]

    async def clear(self, side: Side) -> None:
        """Delete a side's pods and wait until they are gone from the API."""
        selector = f"{SIDE}={side.label}"
        await self.core.delete_collection_namespaced_pod(
            self.namespace, label_selector=selector, grace_period_seconds=0
        )

        async def gone() -> bool:
            found = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
            return not found.items

        await eventually(gone, WITHIN)

    @contextlib.asynccontextmanager
    async def kube_scheduler(self, verbosity: int = 2) -> AsyncIterator[Side]:
        binaries = cached()
        assert binaries.complete(), "the local cluster binaries are not built"
        name = f"kube-{self.tag}"
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": self.kubeconfig, "qps": 200, "burst": 400},
            "podInitialBackoffSeconds": 1,
            "podMaxBackoffSeconds": 2,
            "profiles": [
                {
                    "schedulerName": name,
                    "plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}},
                }
            ],
        }
        path = self.tmp / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = self.tmp / "kube-scheduler.log"
        argv = [
            str(binaries["kube-scheduler"]),
            f"--config={path}",
            "--secure-port=0",
            f"--v={verbosity}",
        ]
        side = Side("kube", name)
        with process(argv, self.log):
            yield side
        await self.clear(side)

    @contextlib.asynccontextmanager
    async def berth(self) -> AsyncIterator[tuple[Side, Scheduler]]:
        side = Side("berth", f"berth-{self.tag}")
        async with running(self.api, config_for(side.scheduler)) as scheduler:
            yield side, scheduler
        await self.clear(side)

    def kube_scores(self, pod: str) -> dict[str, dict[str, int]]:
        """kube-scheduler's weighted score per plugin and node for a pod (-v=10)."""
        scores: dict[str, dict[str, int]] = {}
        for match in SCORED.finditer(self.log.read_text(errors="replace")):
            if match["pod"] == f"{self.namespace}/{pod}":
                scores.setdefault(match["plugin"], {})[match["node"]] = int(match["score"])
        return scores

    def berth_scores(self, scheduler: Scheduler, body: dict[str, Any]) -> dict[str, dict[str, int]]:
        """Berth's weighted score per plugin and node for a pod, on its view now."""
        profile = scheduler.profiles[body["spec"]["schedulerName"]]
        framework = profile.framework
        pod = PodInfo.from_pod(body)
        state = CycleState()
        rows, _ = profile.cycle.feasible(state, pod)
        nodes = scheduler.view.nodes
        scores: dict[str, dict[str, int]] = {}
        for plugin in framework.score:
            name = cast(Plugin, plugin).name
            values = plugin.score(state, pod, nodes, rows)
            scores[name] = {
                nodes.names[int(r)]: int(v) * framework.weights[name]
                for r, v in zip(rows, values, strict=True)
            }
        return scores

    async def both(
        self, run: Callable[[Side, Scheduler | None], Awaitable[None]], verbosity: int = 2
    ) -> tuple[Side, Side]:
        async with self.kube_scheduler(verbosity) as kube:
            await run(kube, None)
        async with self.berth() as (berth, scheduler):
            await run(berth, scheduler)
        return kube, berth


@pytest.fixture
async def case(
    api: ApiClient, namespace: str, kubeconfig_path: str, tmp_path: Path
) -> AsyncIterator[Case]:
    made = Case(api, namespace, kubeconfig_path, tmp_path)
    yield made
    await made.nodes.delete_all()


def anti(key: str, labels: dict[str, str]) -> dict[str, Any]:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": labels}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def affinity(key: str, labels: dict[str, str]) -> dict[str, Any]:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": labels}}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


WEB = {"app": "web"}
DB = {"app": "db"}


async def test_one_replica_per_node_by_anti_affinity(case: Case) -> None:
    for i in range(3):
        await case.node(f"n{i}")

    async def run(side: Side, _: Scheduler | None) -> None:
        for i in range(3):
            await case.bind(side, f"web-{i}", cpu="100m", labels=WEB, affinity=anti(HOSTNAME, WEB))
        await case.refuse(side, "web-3", cpu="100m", labels=WEB, affinity=anti(HOSTNAME, WEB))

    kube, berth = await case.both(run)
    assert sorted(kube.placed.values()) == sorted(berth.placed.values()) == case.nodes.names
    assert "3 node(s) didn't match pod anti-affinity rules" in kube.messages["web-3"]
    assert berth.messages == kube.messages


async def test_spread_across_zones_with_max_skew_1(case: Case) -> None:
    for zone in ("a", "b", "c"):
        for i in range(2):
            await case.node(f"{zone}{i}", **{ZONE: f"{case.tag}-{zone}"})
    zone_of = {name: name.rsplit("-", 1)[-1][0] for name in case.nodes.names}
    spread = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": WEB},
    }

    async def run(side: Side, _: Scheduler | None) -> None:
        for i in range(6):
            await case.bind(
                side, f"web-{i}", cpu="100m", labels=WEB, topologySpreadConstraints=[spread]
            )

    kube, berth = await case.both(run)

    def per_zone(side: Side) -> list[int]:
        zones = [zone_of[n] for n in side.placed.values()]
        return [zones.count(z) for z in "abc"]

    assert per_zone(kube) == per_zone(berth) == [2, 2, 2]


async def test_a_pod_follows_its_peer_by_affinity(case: Case) -> None:
    for i in range(3):
        await case.node(f"n{i}")
    peer_node = case.nodes.names[1]
    await case.pin("db", peer_node, cpu="100m", labels=DB)

    async def run(side: Side, _: Scheduler | None) -> None:
        await case.bind(side, "follower", cpu="100m", affinity=affinity(HOSTNAME, DB))
        await case.refuse(side, "lost", cpu="100m", affinity=affinity(HOSTNAME, {"app": "x"}))

    kube, berth = await case.both(run)
    assert kube.placed == berth.placed == {"follower": peer_node}
    assert "node(s) didn't match pod affinity rules" in kube.messages["lost"]
    assert berth.messages == kube.messages


async def test_symmetric_anti_affinity_refusal(case: Case) -> None:
    for i in range(2):
        await case.node(f"n{i}")
        await case.pin(
            f"guard-{i}", case.nodes.names[i], cpu="100m", labels=DB, affinity=anti(HOSTNAME, WEB)
        )

    async def run(side: Side, _: Scheduler | None) -> None:
        await case.refuse(side, "web", cpu="100m", labels=WEB)

    kube, berth = await case.both(run)
    assert "2 node(s) didn't satisfy existing pods anti-affinity rules" in kube.messages["web"]
    assert berth.messages == kube.messages


async def test_a_relabelled_pod_is_matched_by_its_new_labels(case: Case) -> None:
    # A bound pod relabelled out of an anti-affinity term no longer keeps others off its
    # node: both schedulers hold each pod's latest version (kube-scheduler's UpdatePod).
    only = await case.node("n0")

    async def run(side: Side, _: Scheduler | None) -> None:
        await case.bind(side, "web-0", cpu="100m", labels=WEB)
        await case.core.patch_namespaced_pod("web-0", case.namespace, {"metadata": {"labels": DB}})
        await case.bind(side, "web-1", cpu="100m", labels=WEB, affinity=anti(HOSTNAME, WEB))

    kube, berth = await case.both(run)
    assert kube.placed == berth.placed == {"web-0": only, "web-1": only}


async def test_score_case_two_nodes(case: Case) -> None:
    # Two 4 cpu / 8Gi nodes, one holding 2 cpu / 4Gi, the other 250m / 6Gi; a pod of
    # 500m / 256Mi. kube-scheduler v1.36 scores balance by the change the pod brings.
    first = await case.node("first")
    second = await case.node("second")
    await case.pin("load-1", first, cpu="2", memory="4Gi")
    await case.pin("load-2", second, cpu="250m", memory="6Gi")

    async def run(side: Side, scheduler: Scheduler | None) -> None:
        if scheduler is not None:
            side.scores = case.berth_scores(
                scheduler, case.body(side, "p", cpu="500m", memory="256Mi")
            )
        await case.bind(side, "p", cpu="500m", memory="256Mi")

    kube, berth = await case.both(run, verbosity=10)
    kube.scores = case.kube_scores("p")
    assert kube.placed == berth.placed == {"p": second}
    assert kube.scores["NodeResourcesFit"] == {first: 41, second: 51}
    assert kube.scores["NodeResourcesBalancedAllocation"] == {first: 72, second: 77}
    for plugin, by_node in berth.scores.items():
        # A plugin kube-scheduler skipped for this pod does not appear in its log.
        assert kube.scores.get(plugin, {first: 0, second: 0}) == by_node, plugin


async def test_preemption_frees_an_anti_affinity_conflict(case: Case, api: ApiClient) -> None:
    classes = PriorityClasses(api, case.tag)
    low = await classes.add("low", 10)
    mid = await classes.add("mid", 100)
    high = await classes.add("high", 1000)
    for i in range(2):
        await case.node(f"n{i}")
    first, second = case.nodes.names

    async def run(side: Side, _: Scheduler | None) -> None:
        # Each node has one web pod: the cheaper one to evict is on the first node.
        for name, node, priority in (("web-low", first, low), ("web-mid", second, mid)):
            labels = {**WEB, SIDE: side.label}
            await case.pin(
                f"{side.label}-{name}", node, cpu="100m", labels=labels, priority_class=priority
            )
        await case.bind(
            side,
            "web-high",
            cpu="100m",
            labels=WEB,
            affinity=anti(HOSTNAME, WEB),
            priority_class=high,
        )
        left = await case.core.list_namespaced_pod(
            case.namespace, label_selector=f"{SIDE}={side.label}"
        )
        side.messages["left"] = ",".join(
            sorted(p.metadata.name.split("-", 1)[1] for p in left.items)
        )

    try:
        kube, berth = await case.both(run)
    finally:
        await classes.delete_all()
    assert kube.placed == berth.placed == {"web-high": first}
    assert kube.messages == berth.messages == {"left": "high,web-mid"}
