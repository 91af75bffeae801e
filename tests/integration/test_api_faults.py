"""Faults of the API server itself: a restart in the middle of a run (the scheduler's and
the operators' watches reconnect and relist, nothing they decided is lost, and nothing is
admitted twice: a quota at its max stays at its max), and a forced watch expiry (410 Gone)
while Berth missed a deletion and pods kept arriving: the relist reports the deletion, and
the capacity it freed is used. Namespaces being deleted across a restart are deleted whole,
their quotas with them.

Other faults are tested where they belong: a binding refused by the API server is
forgotten and retried (test_scheduler); kill -9 of `berth run` at random points
(tests/reliability); the Informer's relist, 410, DELETED synthesis and bookmarks
(tests/unit/test_kube_watch.py); a leader paused past its lease (test_ha).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.localcluster.cluster import LocalCluster
from tests.conftest import wait_default_service_account
from tests.integration.cluster import Nodes, Pods, pod_body
from tests.integration.processes import BerthRun
from tests.support import eventually

T = TypeVar("T")
EQ = ("scheduling.sigs.k8s.io", "v1alpha1")
RESERVATION = ("scheduling.koordinator.sh", "v1alpha1")
MERGE = "application/merge-patch+json"
CONFLICT = 409
TTL = 45
ROUND = 15  # seconds an owner round may take, up to the expiry
LANES = 4  # writers at once during a burst
DELETED_ACROSS = 30  # namespaces being deleted when the API server restarts
SPREAD = 8.0  # seconds their deletions are spread over before it


async def retried(call: Callable[[], Awaitable[T]]) -> T:
    """The first calls after a restart may meet connections the server closed."""
    for _ in range(20):
        try:
            return await call()
        except (aiohttp.ClientError, OSError):
            await asyncio.sleep(0.5)
    return await call()


async def test_an_api_server_restart_loses_nothing(
    api: ApiClient, kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path
) -> None:
    cluster = LocalCluster.default()
    if Path(kubeconfig_path) != cluster.kubeconfig:
        pytest.skip("restarts the local cluster's API server; not done to another cluster")
    group = "af-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]
    nodes = Nodes(api, group)
    custom = CustomObjectsApi(api)
    profile = {
        "schedulerName": group,
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": "CapacityScheduling"}],
                "disabled": [{"name": "DefaultPreemption"}],
            }
        },
    }
    config = {"leaderElection": {"leaderElect": False}, "profiles": [profile]}
    berth = BerthRun.configured(kubeconfig_path, config, tmp_path)
    pods = Pods(api, namespace)

    def pod(name: str) -> dict[str, Any]:
        return pod_body(name, group, cpu="1", nodeSelector={"berth.test/group": group})

    async def used() -> str | None:
        obj = await custom.get_namespaced_custom_object(*EQ, namespace, "elasticquotas", "cpu")
        return ((obj.get("status") or {}).get("used") or {}).get("cpu")

    try:
        await nodes.add("a", labels={"berth.test/group": group})
        await custom.create_namespaced_custom_object(*EQ, namespace, "elasticquotas", {
            "apiVersion": "/".join(EQ), "kind": "ElasticQuota", "metadata": {"name": "cpu"},
            "spec": {"min": {"cpu": "3"}, "max": {"cpu": "3"}}})  # fmt: skip
        berth.start()
        for name in ("p0", "p1"):
            await pods.create(pod(name))
            await pods.wait_bound(name)
        await eventually(lambda: _is(used, "2"))

        await asyncio.to_thread(cluster.restart_apiserver)

        await retried(lambda: pods.create(pod("p2")))
        await retried(lambda: pods.create(pod("p3")))
        await pods.wait_bound("p2", within=60)
        message = await pods.wait_event("p3", "FailedScheduling", within=60)
        assert "is more than Max (cpu: 3 used + 1 requested > 3)" in message
        assert not await pods.node_of("p3")
        await eventually(lambda: _is(used, "3"), within=60)
    finally:
        berth.stop()
        await retried(nodes.delete_all)


async def test_a_watch_expiry_relists_and_loses_nothing(
    api: ApiClient, kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path
) -> None:
    """Berth is paused (SIGSTOP) while the API server restarts, then a bound pod is deleted
    and new ones arrive: the new server's watch cache starts after Berth's last
    resourceVersion, so on waking every watch gets 410 Gone and relists. Only a relist
    that reports the missed deletion frees the quota share the new pods need."""
    cluster = LocalCluster.default()
    if Path(kubeconfig_path) != cluster.kubeconfig:
        pytest.skip("restarts the local cluster's API server; not done to another cluster")
    group = "we-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]
    nodes = Nodes(api, group)
    custom = CustomObjectsApi(api)
    profile = {"schedulerName": group, "plugins": {"multiPoint": {
        "enabled": [{"name": "CapacityScheduling"}],
        "disabled": [{"name": "DefaultPreemption"}]}}}  # fmt: skip
    config = {"leaderElection": {"leaderElect": False}, "profiles": [profile]}
    berth = BerthRun.configured(kubeconfig_path, config, tmp_path)
    pods = Pods(api, namespace)

    def pod(name: str) -> dict[str, Any]:
        return pod_body(name, group, cpu="1", nodeSelector={"berth.test/group": group})

    async def used() -> str | None:
        obj = await custom.get_namespaced_custom_object(*EQ, namespace, "elasticquotas", "cpu")
        return ((obj.get("status") or {}).get("used") or {}).get("cpu")

    try:
        await nodes.add("a", labels={"berth.test/group": group})
        await custom.create_namespaced_custom_object(*EQ, namespace, "elasticquotas", {
            "apiVersion": "/".join(EQ), "kind": "ElasticQuota", "metadata": {"name": "cpu"},
            "spec": {"min": {"cpu": "3"}, "max": {"cpu": "3"}}})  # fmt: skip
        berth.start()
        for name in ("p0", "p1", "p2"):
            await pods.create(pod(name))
            await pods.wait_bound(name, within=60)
        await eventually(lambda: _is(used, "3"), within=60)
        assert berth.child is not None
        relists_before = berth.log.read_text().count("watch expired, relisting")

        berth.child.send_signal(signal.SIGSTOP)
        try:
            # Restarted first, so no watch of Berth's is open when these happen (events
            # sent before would wait in its sockets and arrive on waking).
            await asyncio.to_thread(cluster.restart_apiserver)
            await retried(lambda: pods.delete("p1"))
            for name in ("p3", "p4", "p5"):
                await retried(functools.partial(pods.create, pod(name)))
        finally:
            berth.child.send_signal(signal.SIGCONT)

        # p1's share is free only if the relist reported p1 gone: one of p3/p4/p5 binds.
        async def one_more_bound() -> bool:
            try:
                bound = [n for n in ("p3", "p4", "p5") if await pods.node_of(n)]
            except (aiohttp.ClientError, OSError):
                return False
            return len(bound) == 1

        await eventually(one_more_bound, within=90)
        log = berth.log.read_text()
        assert log.count("watch expired, relisting") > relists_before, "no watch expired"
        # The quota stays at its max: the other two are refused, with the reason.
        refused = [n for n in ("p3", "p4", "p5") if not await pods.node_of(n)]
        assert len(refused) == 2, refused
        for name in refused:
            message = await pods.wait_event(name, "FailedScheduling", within=60)
            assert "is more than Max" in message
    finally:
        berth.stop()
        await retried(nodes.delete_all)


async def test_namespaces_deleted_across_a_restart_take_their_quotas_with_them(
    api: ApiClient, kubeconfig_path: str, crds: None, namespace: str
) -> None:
    """Namespaces still being deleted when the API server restarts are deleted whole. For
    a second or so after it starts serving, before it is ready, the new server lists no
    custom resource group in its discovery while it refuses their requests (503, 429): a
    namespace controller asking then takes the namespace's ElasticQuotas for gone and
    finishes the namespace without them. The namespaces' deletions are spread over the
    seconds before the restart, so that their controller's retries fall at many moments."""
    cluster = LocalCluster.default()
    if Path(kubeconfig_path) != cluster.kubeconfig:
        pytest.skip("restarts the local cluster's API server; not done to another cluster")
    group = "nd-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]
    nodes = Nodes(api, group)
    core = CoreV1Api(api)
    custom = CustomObjectsApi(api)
    names = [f"{namespace[:50]}-{i}" for i in range(DELETED_ACROSS)]
    quota = {"apiVersion": "/".join(EQ), "kind": "ElasticQuota", "metadata": {"name": "q"},
             "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}}}  # fmt: skip
    try:
        node = await nodes.add("a")
        for name in names:
            await core.create_namespace({"metadata": {"name": name}})
            await custom.create_namespaced_custom_object(*EQ, name, "elasticquotas", quota)
        for name in names:
            await asyncio.to_thread(wait_default_service_account, name)
            await Pods(api, name).create(pod_body("p", group, nodeName=node))
        for name in names:
            await core.delete_namespace(name)
            await asyncio.sleep(SPREAD / DELETED_ACROSS)

        await asyncio.to_thread(cluster.restart_apiserver)

        async def all_gone() -> bool:
            listed = await retried(core.list_namespace)
            return not {ns.metadata.name for ns in listed.items} & set(names)

        await eventually(all_gone, within=240)
        listed = await custom.list_cluster_custom_object(*EQ, "elasticquotas")
        left = sorted(q["metadata"]["namespace"] for q in listed["items"]
                      if q["metadata"]["namespace"] in names)  # fmt: skip
        for gone in left:  # not left to later tests
            await custom.delete_namespaced_custom_object(*EQ, gone, "elasticquotas", "q")
        assert not left, f"{len(left)} namespace(s) finished without their quota: {left}"
    finally:
        for name in names:  # those a failure left before their deletion
            with contextlib.suppress(ApiException):
                await core.delete_namespace(name)
        await retried(nodes.delete_all)


async def test_conflicting_writers_delay_reservation_status_but_lose_none(
    api: ApiClient, kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path
) -> None:
    """Another writer changes the reservation ten times a second throughout its life, so
    the operator's status writes (guarded by the resourceVersion they were decided from)
    meet 409 Conflict; each transition still lands: Available, its owner, Failed on expiry.
    Around the operator's transitions it writes back to back from several lanes, so the
    stored version moves faster than a watch can deliver it, from before each is due until
    the operator logged a conflict or the transition is seen, however slow the machine is.
    Owners come and go, each a transition, until a conflict was met or the expiry nears."""
    group = "cf-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]
    nodes = Nodes(api, group)
    custom = CustomObjectsApi(api)
    profile = {"schedulerName": group,
               "plugins": {"multiPoint": {"enabled": [{"name": "Reservation"}]}}}  # fmt: skip
    config = {"leaderElection": {"leaderElect": False}, "profiles": [profile]}
    berth = BerthRun.configured(kubeconfig_path, config, tmp_path)
    berth.command = [a for a in berth.command if not a.startswith("--log-level")]
    berth.command.append("--log-level=debug")  # the operator logs each conflict at debug
    pods = Pods(api, namespace)
    name = f"{group}-r"
    body = {"apiVersion": "/".join(RESERVATION), "kind": "Reservation", "metadata": {"name": name},
            "spec": {"template": {"spec": {"schedulerName": group,
                "nodeSelector": {"berth.test/group": group},
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
            "ttl": f"{TTL}s", "allocateOnce": False}}  # fmt: skip
    stop = asyncio.Event()
    bumps = [0]
    loop = asyncio.get_running_loop()
    bursts: list[Burst] = []  # back to back, around transitions

    def bursting() -> bool:
        now = loop.time()
        return any(b.start <= now <= b.end for b in bursts)

    async def bump(lane: int) -> None:
        while not stop.is_set():
            if lane and not bursting():
                await asyncio.sleep(0.05)
                continue
            bumps[0] += 1
            patch = {"metadata": {"labels": {f"berth.test/bump-{lane}": str(bumps[0])}}}
            with contextlib.suppress(ApiException):
                await custom.patch_cluster_custom_object(
                    *RESERVATION, "reservations", name, patch, _content_type=MERGE
                )
            await asyncio.sleep(0.002 if bursting() else 0.1)

    async def close_bursts() -> None:
        """A burst has done its work once the operator logged a conflict during it."""
        while not stop.is_set():
            met, now = conflicts(berth.log.read_text()), loop.time()
            for b in bursts:
                if b.start <= now and b.met is None:
                    b.met = met
                elif b.met is not None and met > b.met:
                    b.end = min(b.end, now)
            await asyncio.sleep(0.25)

    async def reservation() -> dict[str, Any]:
        obj: dict[str, Any] = await custom.get_cluster_custom_object(
            *RESERVATION, "reservations", name
        )
        return obj

    async def status_is(check: Callable[[dict[str, Any]], bool]) -> bool:
        return check((await reservation()).get("status") or {})

    bumpers: list[asyncio.Task[None]] = []
    try:
        await nodes.add("a", labels={"berth.test/group": group})
        berth.start()
        await custom.create_cluster_custom_object(*RESERVATION, "reservations", body)
        bumpers = [asyncio.create_task(bump(lane)) for lane in range(LANES)]
        bumpers.append(asyncio.create_task(close_bursts()))
        await eventually(lambda: status_is(lambda s: s.get("phase") == "Available"), within=60)
        now = loop.time()
        stamp = (await reservation())["metadata"]["creationTimestamp"]
        expires = now + TTL - (time.time() - datetime.fromisoformat(stamp).timestamp())
        allocation, expiry = Burst(now), Burst(expires - 2)
        bursts += [allocation, expiry]  # each ends at a conflict or when its transition is seen

        def owners_are(*pods: str) -> Callable[[], Awaitable[bool]]:
            owned = [{"namespace": namespace, "name": pod} for pod in pods]

            def check(s: dict[str, Any]) -> bool:
                return [{k: o.get(k) for k in ("namespace", "name")} for o in
                        s.get("currentOwners") or []] == owned  # fmt: skip

            return lambda: status_is(check)

        # An owner comes, and goes while time allows another round, until the operator
        # met a conflict: a write that happened to land between two bumps injects nothing.
        for round_ in itertools.count(1):
            owner = f"owner-{round_}"
            await pods.create(pod_body(owner, group, cpu="500m", labels={"app": name},
                                       nodeSelector={"berth.test/group": group}))  # fmt: skip
            await pods.wait_bound(owner, within=60)
            await eventually(owners_are(owner), within=60)
            if conflicts(berth.log.read_text()) or expires - loop.time() < ROUND:
                break
            await pods.delete(owner)
            await eventually(owners_are(), within=60)
        allocation.end = min(allocation.end, loop.time())
        await eventually(lambda: status_is(lambda s: s.get("phase") == "Failed"), within=90)
        expiry.end = min(expiry.end, loop.time())
        stop.set()
        await asyncio.gather(*bumpers)
        assert bumps[0] > 100, "the other writer kept writing"
        assert conflicts(berth.log.read_text()) > 0, "no 409 met: nothing was injected"
    finally:
        stop.set()
        for task in bumpers:
            task.cancel()
        await asyncio.gather(*bumpers, return_exceptions=True)
        berth.stop()
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(*RESERVATION, "reservations", name)
        await nodes.delete_all()


@dataclasses.dataclass
class Burst:
    """Back-to-back writes from ``start`` until ``end``; ``met``: the conflicts the operator
    had logged when it began."""

    start: float
    end: float = math.inf
    met: int | None = None


def conflicts(log: str) -> int:
    """The 409 Conflicts the operators logged (each at debug, with its status)."""
    count = 0
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "operators" in str(record.get("logger")):
                count += record.get("status") == CONFLICT
    return count


async def _is(read: Callable[[], Awaitable[str | None]], expected: str) -> bool:
    try:
        return await read() == expected
    except (aiohttp.ClientError, OSError):
        return False
