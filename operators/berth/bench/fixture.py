"""The cluster state a trial starts from: exactly a workload's nodes, Ready and untainted,
and no pods in the benchmark's namespaces; and the creation of its pods."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import orjson
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.bench.workloads import (
    HIGH_PRIORITY,
    HIGH_PRIORITY_CLASS,
    INIT_NAMESPACE,
    MEASURED_NAMESPACE,
    NAMESPACES,
    ZONE_KEY,
    Workload,
)
from berth.kube.client import checked, succeeded
from berth.kube.earlylist import LIST_PAGE
from berth.kube.write import (
    NODE,
    POD,
    WORKLOAD_POD_GROUP,
    ApiWriter,
    Conflict,
    Kind,
    NotFound,
)
from berth.localcluster.kubectl import Kubectl, KubectlError
from berth.localcluster.paths import REPO_DIR

T = TypeVar("T")
NAMESPACE: Final = Kind("", "v1", "namespaces", namespaced=False)
PRIORITY_CLASS: Final = Kind("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)

CREATE_CONCURRENCY = 32
READY_TIMEOUT = 300.0
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


class FixtureError(RuntimeError):
    """The cluster could not be brought to the trial's starting state."""


def install_crds(kubeconfig: str) -> None:
    """Berth's CRDs, as an installation has them, listable (Established, storage ready);
    without them Berth's scheduler would keep retrying their watches during the trial."""
    kubectl = Kubectl(kubeconfig)
    folder = REPO_DIR / "crds"
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(folder))
    kinds = ",".join(p.name.removesuffix(".yaml") for p in sorted(folder.glob("*.*.yaml")))
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            kubectl("get", kinds, "--all-namespaces")
            return
        except KubectlError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


async def for_each(items: Iterable[T], call: Callable[[T], Awaitable[object]], limit: int) -> None:
    """``call`` on every item, at most ``limit`` in flight."""
    semaphore = asyncio.Semaphore(limit)

    async def one(item: T) -> None:
        async with semaphore:
            await call(item)

    await asyncio.gather(*(one(i) for i in items))


class Fixture:
    def __init__(self, api: ApiClient, say: Callable[[str], None]) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.writer = ApiWriter(api)
        self.say = say
        self._nodes: set[str] = set()
        # From the clock: a cluster kept from an earlier run has had the low numbers.
        self._batches = int(time.time())

    def next_batch(self) -> int:
        """A number no earlier batch of pods of this run had, for their names."""
        self._batches += 1
        return self._batches

    async def namespaces(self) -> None:
        for name in NAMESPACES:
            with contextlib.suppress(Conflict):
                await self.writer.create(
                    NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                )

    async def nodes(self, workload: Workload, count: int) -> None:
        """Exactly the workload's ``count`` nodes, with its zone labels, all Ready.

        A node of another zone is relabelled in place, not deleted and made again under its
        name: kwok, seeing a node of a name it just let go come back, stopped keeping some
        of them (59 of 1000 left Unknown, their pods never Running)."""
        wanted = {n["metadata"]["name"]: n for n in (workload.node(i) for i in range(count))}
        existing = (await self.core.list_node()).items
        extra = [n.metadata.name for n in existing if n.metadata.name not in wanted]
        relabel = {
            n.metadata.name: zone
            for n in existing
            if n.metadata.name in wanted
            and (n.metadata.labels or {}).get(ZONE_KEY)
            != (zone := wanted[n.metadata.name]["metadata"]["labels"].get(ZONE_KEY))
        }
        if extra:
            self.say(f"removing {len(extra)} node(s) the workload does not have")
            await for_each(extra, self._delete_node, CREATE_CONCURRENCY)
        if relabel:
            self.say(f"relabelling {len(relabel)} node(s) for {workload.name}'s zones")
            await for_each(relabel.items(), self._relabel_node, CREATE_CONCURRENCY)
        present = {n.metadata.name for n in existing}
        missing = [body for name, body in wanted.items() if name not in present]
        if missing:
            self.say(f"creating {len(missing)} node(s) for {workload.name}")
            await self._wait_gone(extra)
            await for_each(missing, functools.partial(self.writer.create, NODE), CREATE_CONCURRENCY)
        self._nodes = set(wanted)
        await self._wait_ready(self._nodes)

    async def _relabel_node(self, item: tuple[str, str | None]) -> None:
        name, zone = item
        await self.writer.patch(NODE, name, {"metadata": {"labels": {ZONE_KEY: zone}}})

    async def nodes_ready(self) -> None:
        """Every node of the workload Ready and untainted again (they may have flapped)."""
        await self._wait_ready(self._nodes)

    async def create_node(self, body: dict[str, Any]) -> None:
        """Create a node of the workload's again (a churn took it away); there already: kept."""
        with contextlib.suppress(Conflict):
            await self.writer.create(NODE, body)

    async def _delete_node(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.writer.delete(NODE, name)

    async def _wait_gone(self, names: list[str]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while names and time.monotonic() < deadline:
            remaining = {n.metadata.name for n in (await self.core.list_node()).items}
            if not remaining & set(names):
                return
            await asyncio.sleep(0.5)

    async def _wait_ready(self, names: set[str]) -> None:
        """kwok marks nodes Ready; the controller manager then lifts its not-ready taint.
        On a loaded machine kwok's heartbeats fall behind and nodes flap: the trial waits
        until every node is Ready and untainted at once."""
        deadline = time.monotonic() + READY_TIMEOUT
        ready = 0
        while time.monotonic() < deadline:
            ready = 0
            for node in (await self.core.list_node()).items:
                if node.metadata.name not in names:
                    continue
                conditions = {c.type: c.status for c in node.status.conditions or []}
                taints = {t.key for t in node.spec.taints or []}
                if conditions.get("Ready") == "True" and not taints & NOT_READY_TAINTS:
                    ready += 1
            if ready == len(names):
                return
            await asyncio.sleep(1.0)
        raise FixtureError(
            f"{len(names) - ready} of {len(names)} nodes not Ready and untainted after "
            f"{READY_TIMEOUT:.0f}s (kwok's heartbeats behind: is the machine overloaded?)"
        )

    async def initial_pods(
        self, workload: Workload, count: int, nodes: int, scheduler: str | None = None
    ) -> None:
        """Exactly the workload's ``count`` initial pods, created bound, and kwok done with
        them (every one Running), so that no side's trial pays for kwok's catching up; or
        created pending for ``scheduler`` when the workload's are.

        Created once per case and kept across its trials (every side sees the same bound
        pods, and tens of thousands of them are not made again for each trial), unless the
        workload makes them for each trial."""
        await self.clear_pods()
        if not count:
            return
        how = f"pending for {scheduler}" if workload.init_pending else "bound"
        self.say(f"creating {count} initial pod(s), {how}, for {workload.name}")
        started = time.monotonic()
        batch = self.next_batch()
        await self.create_pods(
            [workload.init_pod(i, nodes, batch, scheduler) for i in range(count)]
        )
        if workload.init_pending:
            return
        # The deadline runs from the last time more were Running: kwok takes minutes over
        # tens of thousands on a loaded machine.
        deadline = time.monotonic() + READY_TIMEOUT
        running = most = 0
        while time.monotonic() < deadline:
            running = sum(phase == "Running" for _, phase in await self._pods(INIT_NAMESPACE))
            if running >= count:
                took = time.monotonic() - started
                self.say(f"  {count} initial pod(s) Running after {took:.0f}s")
                return
            if running > most:
                most = running
                deadline = time.monotonic() + READY_TIMEOUT
            await asyncio.sleep(1.0)
        raise FixtureError(f"{count - running} of {count} initial pods not Running in time")

    async def clear_pods(self, namespaces: Sequence[str] = NAMESPACES) -> None:
        """Delete every pod of ``namespaces`` (the benchmark's, by default), and wait until
        gone.

        One deletion per pod, ``CREATE_CONCURRENCY`` at a time, with no grace: the API
        server deletes a collection one pod after another, so a collection of tens of
        thousands outlasts its request timeout and is cut off part way. The deadline runs
        from the last time fewer pods were left, as so many take longer than
        ``READY_TIMEOUT``; it is judged after each listing, so that one round of deletions
        longer than it (fifty thousand pods) is not taken for no progress.
        """
        deadline = time.monotonic() + READY_TIMEOUT
        fewest: int | None = None
        while True:
            left = [
                (namespace, name)
                for namespace in namespaces
                for name, _ in await self._pods(namespace)
            ]
            if not left:
                return
            if fewest is None or len(left) < fewest:
                fewest = len(left)
                deadline = time.monotonic() + READY_TIMEOUT
            elif time.monotonic() > deadline:
                raise FixtureError(
                    f"{fewest} pods still present {READY_TIMEOUT:.0f}s after fewer were last left"
                )
            await for_each(left, lambda pod: self.delete_pod(*pod), CREATE_CONCURRENCY)
            await asyncio.sleep(0.5)

    async def _pods(self, namespace: str) -> list[tuple[str, str]]:
        """The namespace's pods' names and phases."""
        return [
            (item["metadata"]["name"], (item.get("status") or {}).get("phase") or "")
            for item in await self._items(namespace)
        ]

    async def unbound(self, namespace: str, limit: int) -> list[str]:
        """Up to ``limit`` of the namespace's pods no node holds, with why they wait."""
        return unbound(namespace, await self._items(namespace), limit)

    async def _items(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's pods as stored, in pages, parsed without the client's models
        (tens of thousands of them would take a minute)."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            paging: dict[str, Any] = {"limit": LIST_PAGE, "_preload_content": False}
            if token:
                paging["_continue"] = token
            response = await checked(await self.core.list_namespaced_pod(namespace, **paging))
            body = orjson.loads(await response.read())
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Delete the pod with no grace: a kwok node plays no graceful end."""
        with contextlib.suppress(ApiException):  # gone already, or the next round asks again
            await succeeded(
                self.core.delete_namespaced_pod(
                    name, namespace, grace_period_seconds=0, _preload_content=False
                )
            )

    async def priority_class(self) -> None:
        """The PriorityClass pod-high-priority.yaml's pods name (kept, as a cluster's are)."""
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": HIGH_PRIORITY_CLASS},
            "value": HIGH_PRIORITY,
            "description": "scheduler_perf's high-priority pods (priority 10)",
        }
        with contextlib.suppress(Conflict):
            await self.writer.create(PRIORITY_CLASS, body)

    async def create_pods(self, pods: list[dict[str, Any]]) -> dict[str, float]:
        """Create the pods, ``CREATE_CONCURRENCY`` at a time: each pod's creation time."""
        created: dict[str, float] = {}

        async def create(pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            created[meta["name"]] = time.perf_counter()
            await self.writer.create(POD, pod, namespace=meta["namespace"])

        await for_each(pods, create, CREATE_CONCURRENCY)
        return created

    async def create_pod_groups(self, groups: list[dict[str, Any]]) -> None:
        """Create a gang workload's PodGroups, ``CREATE_CONCURRENCY`` at a time."""
        await for_each(
            groups,
            lambda group: self.writer.create(
                WORKLOAD_POD_GROUP, group, namespace=group["metadata"]["namespace"]
            ),
            CREATE_CONCURRENCY,
        )

    async def pod_groups(self) -> list[dict[str, Any]]:
        """The measured namespace's PodGroups as the API server has them."""
        kind = WORKLOAD_POD_GROUP
        response = await checked(
            await CustomObjectsApi(self.api).list_namespaced_custom_object(
                kind.group, kind.version, MEASURED_NAMESPACE, kind.plural, _preload_content=False
            )
        )
        items: list[dict[str, Any]] = orjson.loads(await response.read()).get("items") or []
        return items

    async def clear_pod_groups(self) -> None:
        """Delete the measured namespace's PodGroups (after their pods), and wait until gone."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            left = [g["metadata"]["name"] for g in await self.pod_groups()]
            if not left:
                return
            await for_each(left, self._delete_pod_group, CREATE_CONCURRENCY)
            await asyncio.sleep(0.5)
        raise FixtureError(f"PodGroups still present {READY_TIMEOUT:.0f}s after their deletion")

    async def _delete_pod_group(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.writer.delete(WORKLOAD_POD_GROUP, name, namespace=MEASURED_NAMESPACE)


def unbound(namespace: str, items: Iterable[dict[str, Any]], limit: int) -> list[str]:
    """Up to ``limit`` of the pods no node holds, each with its nomination and its
    PodScheduled message: what a trial that timed out leaves to read."""
    found = []
    for item in items:
        spec, status = item.get("spec") or {}, item.get("status") or {}
        if spec.get("nodeName"):
            continue
        condition: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        nominated = status.get("nominatedNodeName") or "none"
        said = condition.get("message") or condition.get("reason") or "no PodScheduled yet"
        found.append(f"{namespace}/{item['metadata']['name']} (nominated {nominated}): {said}")
        if len(found) >= limit:
            break
    return found
