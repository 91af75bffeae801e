"""NUMA fit with the pending ledger on the local cluster: NodeResourceTopology objects
written by the test as a topology updater would, Berth's scheduler in the test's event loop.

The node has 3 NUMA zones of 4 cpu (12 cpu): it fits four Guaranteed pods of 3 cpu, its
zones only three. A report is never fresher than the scheduler's latest decision; with the
ledger off, a burst is placed on what looks free and one pod too many lands on the node.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from berth.localcluster.kubectl import Kubectl
from berth.numa.fingerprint import sign
from berth.scheduler.service import Scheduler
from tests.integration.cluster import (
    Nodes,
    Pods,
    config_for,
    numa_topology,
    pod_body,
    running,
)
from tests.support import eventually

GROUP, VERSION, PLURAL = "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies"


def short(namespace: str) -> str:
    return "nu-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


class Numa:
    """The test's kwok node and its NodeResourceTopology."""

    def __init__(self, api: ApiClient, group: str) -> None:
        self.group = group
        self.nodes = Nodes(api, group)
        self.custom = CustomObjectsApi(api)
        self.node = ""
        self.reported = False

    async def add(self) -> str:
        self.node = await self.nodes.add(
            "numa",
            labels={"berth.test/group": self.group},
            allocatable={"cpu": "12", "memory": "64Gi", "pods": "110"},
        )
        return self.node

    async def report(
        self, zones: list[str], *, scope: str = "container", pods: list[str] | None = None,
        namespace: str = "", method: str | None = None,
    ) -> None:  # fmt: skip
        """Write the NRT as an updater would (with the fingerprint of ``pods`` if given)."""
        attributes = [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": scope},
        ]
        if pods is not None:
            value = sign((namespace, name) for name in pods)
            attributes.append({"name": "nodeTopologyPodsFingerprint", "value": value})
        if method is not None:
            attributes.append({"name": "nodeTopologyPodsFingerprintMethod", "value": method})
        body = numa_topology(self.node, zones)
        body["attributes"] = attributes
        try:
            current = await self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, self.node)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await self.custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, self.node, body)
        except Exception:
            await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        # The report's time is its write time in seconds: let decisions come strictly after.
        await asyncio.sleep(1.1)

    def pod(self, name: str, scheduler: str, cpus: tuple[str, ...] = ("3",)) -> dict[str, Any]:
        body = pod_body(name, scheduler, nodeSelector={"berth.test/group": self.group})
        body["spec"]["containers"] = [
            {
                "name": f"c{i}",
                "image": "registry.local/app",
                "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}},
            }
            for i, cpu in enumerate(cpus)
        ]
        return body

    async def close(self) -> None:
        if self.reported:
            await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, self.node)
        await self.nodes.delete_all()


@pytest.fixture
async def numa(api: ApiClient, crds: None, namespace: str) -> AsyncIterator[Numa]:
    made = Numa(api, short(namespace))
    await made.add()
    try:
        yield made
    finally:
        await made.close()


def numa_config(name: str, *, pending: bool) -> Any:
    args = {"cacheResyncPeriodSeconds": 5} if pending else {}
    return config_for(
        name,
        {
            "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
            "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
        },
    )


async def bound(pods: Pods) -> list[str]:
    listed = await pods.core.list_namespaced_pod(pods.namespace)
    return sorted(p.metadata.name for p in listed.items if p.spec.node_name)


@pytest.mark.parametrize("pending", [False, True], ids=["ledger-off", "ledger-on"])
async def test_a_burst_of_guaranteed_pods_and_the_zones(
    api: ApiClient, namespace: str, numa: Numa, pending: bool
) -> None:
    await numa.report(["4", "4", "4"], pods=[], namespace=namespace)
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, numa_config(scheduler, pending=pending)):
        for i in range(4):
            await pods.create(numa.pod(f"p{i}", scheduler))
        if not pending:
            # The stale report says every zone is free: all four land, one more than the
            # zones can take (the kubelet would refuse it with TopologyAffinityError).
            async def four() -> bool:
                return len(await bound(pods)) == 4

            await eventually(four)
            return
        # Pessimistic: the first pod may be in any zone, so no zone shows 3 cpu any more.
        await eventually(lambda: _count_is(pods, 1))
        waiting = [f"p{i}" for i in range(4) if f"p{i}" not in await bound(pods)]
        assert len(waiting) == 3
        # Reports that account for the bound pods, one zone at a time: never more than 3.
        for filled in range(1, 4):
            names = await bound(pods)
            zones = ["1"] * filled + ["4"] * (3 - filled)
            await numa.report(zones, pods=names, namespace=namespace)
            expected = min(filled + 1, 3)
            await eventually(lambda expected=expected: _count_is(pods, expected))
        await asyncio.sleep(1)
        assert len(await bound(pods)) == 3


async def _count_is(pods: Pods, count: int) -> bool:
    return len(await bound(pods)) == count


async def test_a_stale_report_keeps_pending_and_a_restart_rebuilds_it(
    api: ApiClient, namespace: str, numa: Numa
) -> None:
    await numa.report(["4", "4", "4"], pods=[], namespace=namespace)
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, numa_config(scheduler, pending=True)):
        await pods.create(numa.pod("p0", scheduler))
        await pods.wait_bound("p0")
    # A newer report that does not include p0 yet (its fingerprint is of no pods).
    await numa.report(["4", "4", "4"], pods=[], namespace=namespace)
    # A new scheduler process rebuilds pending from the API: p0 still counts.
    async with running(api, numa_config(scheduler, pending=True)):
        await pods.create(numa.pod("p1", scheduler))
        nodes = len((await pods.core.list_node()).items)
        await pods.wait_message(
            "p1",
            f"0/{nodes} nodes are available: 1 cannot align container: c0, {nodes - 1} "
            "node(s) didn't match Pod's node affinity/selector. preemption: "
            f"0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.",
        )
        # The report that includes p0: pending clears, p1 goes to another zone.
        await numa.report(["1", "4", "4"], pods=["p0"], namespace=namespace)
        await pods.wait_bound("p1")


@pytest.mark.parametrize(("scope", "fits"), [("pod", False), ("container", True)])
async def test_pod_and_container_scope_differ(
    api: ApiClient, namespace: str, numa: Numa, scope: str, fits: bool
) -> None:
    await numa.report(["4", "4", "4"], scope=scope)
    pods = Pods(api, namespace)
    scheduler = short(namespace)
    async with running(api, numa_config(scheduler, pending=True)):
        # 6 cpu: no zone takes it whole, but each 3-cpu container fits a zone.
        await pods.create(numa.pod("two", scheduler, cpus=("3", "3")))
        if fits:
            await pods.wait_bound("two")
        else:
            message = await pods.wait_event("two", "FailedScheduling")
            assert "1 cannot align pod: two" in message
            assert not await pods.node_of("two")


async def _failures(pods: Pods, name: str) -> int:
    """Scheduling attempts that failed (a repeated event is folded into one, counted)."""
    return sum(e.count or 1 for e in await pods.events(name, "FailedScheduling"))


async def test_a_label_or_annotation_on_a_stale_report_keeps_pending(
    api: ApiClient, namespace: str, numa: Numa, kubeconfig_path: str
) -> None:
    """The reproduction: ``kubectl label`` on a stale NodeResourceTopology (no fingerprint)
    used to count as a report (its managedFields time was newest) and drop p0 from pending,
    so p1 went into a zone p0 may hold. Only the updater's own report clears it."""
    await numa.report(["4", "4", "4"])
    pods = Pods(api, namespace)
    scheduler_name = short(namespace)
    kubectl = Kubectl(kubeconfig_path)
    refused = (
        "0/{n} nodes are available: 1 cannot align container: c0, {m} node(s) didn't match "
        "Pod's node affinity/selector. preemption: 0/{n} nodes are available: {n} Preemption "
        "is not helpful for scheduling."
    )
    async with running(api, numa_config(scheduler_name, pending=True)) as scheduler:
        await pods.create(numa.pod("p0", scheduler_name))
        await pods.wait_bound("p0")
        await pods.create(numa.pod("p1", scheduler_name))
        nodes = len((await pods.core.list_node()).items)
        await pods.wait_message("p1", refused.format(n=nodes, m=nodes - 1))
        plugin = scheduler.profiles[scheduler_name].framework.instances["NodeResourceTopologyMatch"]

        for command in (
            ("label", PLURAL, numa.node, "berth.test/rack=r1"),
            ("annotate", PLURAL, numa.node, "berth.test/owner=ops"),
        ):
            before = await _failures(pods, "p1")
            await asyncio.to_thread(kubectl, *command)
            key = command[-1].split("=")[0]

            async def seen(key: str = key) -> bool:
                meta = scheduler.view.custom["NodeResourceTopology"][numa.node]["metadata"]
                return key in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}

            await eventually(seen, within=60)
            # Decided: with the write seen, the ledger still holds p0's 3 cpu ...
            row = scheduler.view.nodes.index[numa.node]
            pending = plugin.pending(row, numa.node, plugin._topologies[numa.node])
            assert pending.get("cpu") == 3000, pending
            # ... and the attempt the write's event triggers refuses p1 again.
            await eventually(lambda before=before: _more_failures(pods, "p1", before), within=90)
            assert not await pods.node_of("p1")

        # The updater's report that includes p0 (zone 0 down to 1 cpu): p1 fits. A
        # report's time is its write's whole second (managedFields): one written in the
        # second p0 was placed in reads as older than p0, so the updater writes after it.
        p0 = next(p.uid for p in scheduler.view.pods.values() if p.name == "p0")
        placed = scheduler.view.placed_at[p0]
        await asyncio.sleep(max(0.0, math.floor(placed) + 1 - time.time()))
        await numa.report(["1", "4", "4"])
        try:
            await pods.wait_bound("p1", within=90)
        except AssertionError as err:
            raise AssertionError(await _where_held(scheduler, pods, numa, "p1")) from err


async def _where_held(scheduler: Scheduler, pods: Pods, numa: Numa, name: str) -> str:
    """What the scheduler holds of a pod that stays pending: its queue, the report it
    sees and the pending requests it derives, and its watches."""
    plugin = next(
        p.framework.instances["NodeResourceTopologyMatch"] for p in scheduler.profiles.values()
    )
    queue = scheduler.queue
    uid = next(p.uid for p in scheduler.view.pods.values() if p.name == name)
    row = scheduler.view.nodes.index[numa.node]
    topology = plugin._topologies[numa.node]
    watches = {i.kind: vars(i.stats) for i in scheduler.custom_informers}
    return (
        f"{name} pending: in flight {uid in queue._in_flight}, unschedulable "
        f"{queue.is_unschedulable(uid)}, backoff {uid in queue._backoff_set}, active "
        f"{uid in queue._active_set}; failures {await _failures(pods, name)}; report at "
        f"{topology.reported_at} seen {scheduler.view.custom['NodeResourceTopology'][numa.node]}"
        f"; pending {plugin.pending(row, numa.node, topology)}; placed "
        f"{[(p.name, scheduler.view.placed_at.get(p.uid)) for p in scheduler.view.pods_at(row)]}"
        f"; watches {watches}"
    )


async def _more_failures(pods: Pods, name: str, before: int) -> bool:
    return await _failures(pods, name) > before


async def test_an_exclusive_resources_fingerprint_clears_pending(
    api: ApiClient, namespace: str, numa: Numa
) -> None:
    """The updater fingerprints only the pods with exclusive resources: a Burstable pod on
    the node is not in it, and the report that lists p0 still matches."""
    method = "with-exclusive-resources"
    await numa.report(["4", "4", "4"], pods=[], namespace=namespace, method=method)
    pods = Pods(api, namespace)
    await pods.create(pod_body("shared", "nobody", cpu="500m", nodeName=numa.node))
    scheduler_name = short(namespace)
    async with running(api, numa_config(scheduler_name, pending=True)):
        await pods.create(numa.pod("p0", scheduler_name))
        await pods.wait_bound("p0")
        await pods.create(numa.pod("p1", scheduler_name))
        await pods.wait_event("p1", "FailedScheduling", within=60)
        assert not await pods.node_of("p1")
        # Zone 0 down to 1 cpu, fingerprint of p0 alone: matched, nothing pending.
        await numa.report(["1", "4", "4"], pods=["p0"], namespace=namespace, method=method)
        await pods.wait_bound("p1", within=90)
