"""How far the operators trail the cluster: with ``berth run --no-scheduler`` running on the
benchmark's nodes, three delays are timed on the harness' wall clock (the API server's
timestamps are wall-clock seconds too):

- a Reservation's ttl: from its creation timestamp plus ttl to the watch event showing it
  Failed (the timestamp has whole seconds, so the delay is counted from the second the
  API server wrote, which is at most a second before the true creation);
- an ElasticQuota's ``status.used``: from a bound pod's creation request to the watch
  event showing it counted;
- the colocation ConfigMap: from the update request to the watch event showing each
  node's NodeMetric with the new policy (every node one sample);
- the API server's floor for that change: once the operators have stopped, the harness
  itself writes the same merge patch to every NodeMetric, as many at once as the operator
  does, with the operators' credentials, timed the same way. What the operator adds is the
  difference between the two.

The operators run as installed: with the controller's ServiceAccount token and the roles of
``manifests/`` (:mod:`berth.bench.serviceaccount`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from berth.bench.fixture import Fixture
from berth.bench.process import SideProcess
from berth.bench.serviceaccount import operators_kubeconfig
from berth.bench.sides import Side
from berth.bench.stats import percentile
from berth.kube.client import client_from_kubeconfig
from berth.kube.watch import Informer
from berth.kube.write import ELASTIC_QUOTA, NODE_METRIC, POD, RESERVATION, ApiWriter, Conflict, Kind
from berth.operators.nodemetric import NODEMETRIC_CONCURRENCY
from berth.podresources import to_units
from berth.run import run_command
from berth.slo.colocation import CONFIGMAP as COLOCATION_CONFIGMAP
from berth.slo.colocation import KEY as COLOCATION_KEY

CONFIGMAP: Final = Kind("", "v1", "configmaps", namespaced=True)
NAMESPACE: Final = Kind("", "v1", "namespaces", namespaced=False)
OPERATORS_NAMESPACE = "berth-system"
QUOTA_NAMESPACE = "sched-1"
SAMPLES = 30
SPACING_SECONDS = 0.2
TTL_SECONDS = 5
DEADLINE_SECONDS = 180.0
BEFORE_SECONDS = 60
AFTER_SECONDS = 30
FLOOR_SECONDS = 45
"""The report interval the harness writes alone: neither value the ConfigMap set."""


class LagError(RuntimeError):
    """The operators exited or did not catch up in time."""


@dataclass(frozen=True)
class Lag:
    what: str
    nodes: int
    samples: tuple[float, ...]

    @property
    def p50(self) -> float:
        return percentile(self.samples, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 0.99)


def lag_table(lags: Sequence[Lag]) -> str:
    lines = [f"\noperator lag\n{'what':<44}{'nodes':>6}{'samples':>9}{'p50 s':>8}{'p99 s':>8}"]
    for lag in lags:
        lines.append(
            f"{lag.what:<44}{lag.nodes:>6}{len(lag.samples):>9}{lag.p50:>8.3f}{lag.p99:>8.3f}"
        )
    return "\n".join(lines)


def wall_seconds(timestamp: str) -> float:
    """An API server timestamp (whole seconds, UTC) as seconds since the epoch."""
    return datetime.strptime(timestamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()


def _colocation(report_seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": COLOCATION_CONFIGMAP, "namespace": OPERATORS_NAMESPACE},
        "data": {
            COLOCATION_KEY: orjson.dumps({"metricReportIntervalSeconds": report_seconds}).decode()
        },
    }


async def _until(ready: Callable[[], bool], process: SideProcess | None, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not ready():
        if process is not None and process.exited():
            raise LagError(f"the operators exited; see {process.log_path}")
        if time.monotonic() > deadline:
            raise LagError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


class FirstSeen:
    """``seen[name]``: wall time the harness first saw the object meet ``condition``;
    ``also`` is told every event besides."""

    def __init__(
        self,
        call: Callable[..., Any],
        condition: Callable[[dict[str, Any]], bool],
        also: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.condition = condition
        self.also = also
        self.seen: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self._informer = Informer("objects", call, self._handle)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _handle(self, kind: str, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            return
        self.objects[name] = obj
        if self.also is not None:
            self.also(obj)
        if name not in self.seen and self.condition(obj):
            self.seen[name] = time.time()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._informer.run(self._stop))
        await self._informer.synced.wait()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def _create(writer: ApiWriter, kind: Kind, body: dict[str, Any]) -> None:
    with contextlib.suppress(Conflict):
        await writer.create(kind, body, namespace=body["metadata"].get("namespace"))


def _report_interval(obj: dict[str, Any]) -> int | None:
    policy = (obj.get("spec") or {}).get("metricCollectPolicy") or {}
    value = policy.get("reportIntervalSeconds")
    return int(value) if value is not None else None


def _metric_seen(custom: CustomObjectsApi, report_seconds: int) -> FirstSeen:
    """Every NodeMetric, and when each was first seen reporting every ``report_seconds``."""
    return FirstSeen(
        functools.partial(
            custom.list_cluster_custom_object,
            NODE_METRIC.group,
            NODE_METRIC.version,
            NODE_METRIC.plural,
        ),
        lambda obj: _report_interval(obj) == report_seconds,
    )


async def measure(
    api: ApiClient, fixture: Fixture, kubeconfig: str, nodes: int, say: Callable[[str], None]
) -> list[Lag]:
    """The three delays at ``nodes`` nodes (the fixture's nodes already in place)."""
    writer = ApiWriter(api)
    custom = CustomObjectsApi(api)
    await fixture.clear_pods()
    await _create(
        writer,
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATORS_NAMESPACE}},
    )
    await _create(writer, CONFIGMAP, _colocation(BEFORE_SECONDS))
    await writer.patch(
        CONFIGMAP, COLOCATION_CONFIGMAP, _colocation(BEFORE_SECONDS), namespace=OPERATORS_NAMESPACE
    )
    async with operators_kubeconfig(api, kubeconfig) as installed:
        argv = run_command(installed, operators=True, scheduler=False)
        process = SideProcess(Side("operators", "operators", argv, (), None))
        metrics = _metric_seen(custom, AFTER_SECONDS)
        await process.start()
        await metrics.start()
        try:
            say(f"operator lag: waiting for {nodes} NodeMetrics")
            await _until(
                lambda: (
                    sum(_report_interval(o) == BEFORE_SECONDS for o in metrics.objects.values())
                    >= nodes
                ),
                process,
                "a NodeMetric per node",
            )
            changed = time.time()
            await writer.patch(
                CONFIGMAP,
                COLOCATION_CONFIGMAP,
                _colocation(AFTER_SECONDS),
                namespace=OPERATORS_NAMESPACE,
            )
            await _until(
                lambda: len(metrics.seen) >= nodes, process, "every NodeMetric's new policy"
            )
            configmap = Lag(
                "ConfigMap change -> every NodeMetric spec",
                nodes,
                tuple(t - changed for t in metrics.seen.values()),
            )
            say(f"  {configmap.what}: p99 {configmap.p99:.3f}s")
            quota = await _quota_lag(custom, writer, process, nodes)
            say(f"  {quota.what}: p99 {quota.p99:.3f}s")
            ttl = await _ttl_lag(custom, writer, process, nodes)
            say(f"  {ttl.what}: p99 {ttl.p99:.3f}s")
        finally:
            await metrics.stop()
            await process.stop()
        async with await client_from_kubeconfig(installed) as as_operators:
            floor = await _floor_lag(custom, ApiWriter(as_operators), nodes)
        say(f"  {floor.what}: p99 {floor.p99:.3f}s")
    return [configmap, floor, quota, ttl]


async def _floor_lag(custom: CustomObjectsApi, writer: ApiWriter, nodes: int) -> Lag:
    """The operators stopped, the harness writes the policy change to every NodeMetric
    itself, ``NODEMETRIC_CONCURRENCY`` patches at a time: what the API server allows."""
    metrics = _metric_seen(custom, FLOOR_SECONDS)
    await metrics.start()
    try:
        names = deque(sorted(metrics.objects))
        body = {"spec": {"metricCollectPolicy": {"reportIntervalSeconds": FLOOR_SECONDS}}}

        async def patch_some() -> None:
            while names:
                await writer.patch(NODE_METRIC, names.popleft(), body)

        started = time.time()
        await asyncio.gather(*(patch_some() for _ in range(NODEMETRIC_CONCURRENCY)))
        await _until(lambda: len(metrics.seen) >= nodes, None, "the harness' own patches")
    finally:
        await metrics.stop()
    return Lag(
        "the same, patched by the harness alone",
        nodes,
        tuple(t - started for t in metrics.seen.values()),
    )


async def _quota_lag(
    custom: CustomObjectsApi, writer: ApiWriter, process: SideProcess, nodes: int
) -> Lag:
    name = "bench-quota"
    await _create(
        writer,
        ELASTIC_QUOTA,
        {
            "apiVersion": f"{ELASTIC_QUOTA.group}/{ELASTIC_QUOTA.version}",
            "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": QUOTA_NAMESPACE},
            "spec": {"min": {"cpu": "1000"}, "max": {"cpu": "1000"}},
        },
    )

    def used_cpu(obj: dict[str, Any]) -> int:
        used = (obj.get("status") or {}).get("used") or {}
        return to_units("cpu", used.get("cpu", "0"))

    reached: dict[int, float] = {}

    def record(obj: dict[str, Any]) -> None:
        """When status.used first counted 1, 2, ... of the pods (100m each)."""
        if obj["metadata"]["name"] == name:
            cpu = used_cpu(obj)
            for count in range(1, cpu // 100 + 1):
                reached.setdefault(count, time.time())

    quotas = FirstSeen(
        functools.partial(
            custom.list_namespaced_custom_object,
            ELASTIC_QUOTA.group,
            ELASTIC_QUOTA.version,
            QUOTA_NAMESPACE,
            ELASTIC_QUOTA.plural,
        ),
        lambda obj: False,
        record,
    )

    await quotas.start()
    created: list[float] = []
    try:
        for i in range(SAMPLES):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"quota-{i}", "namespace": QUOTA_NAMESPACE},
                "spec": {
                    "nodeName": f"perf-node-{i % nodes}",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10.1",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            }
            created.append(time.time())
            await writer.create(POD, pod, namespace=QUOTA_NAMESPACE)
            await asyncio.sleep(SPACING_SECONDS)
        await _until(lambda: len(reached) >= SAMPLES, process, "the quota's status.used")
    finally:
        await quotas.stop()
        with contextlib.suppress(Exception):
            await writer.delete(ELASTIC_QUOTA, name, namespace=QUOTA_NAMESPACE)
    return Lag(
        "pod bound -> ElasticQuota status.used",
        nodes,
        tuple(reached[i + 1] - created[i] for i in range(SAMPLES)),
    )


async def _ttl_lag(
    custom: CustomObjectsApi, writer: ApiWriter, process: SideProcess, nodes: int
) -> Lag:
    failed = FirstSeen(
        functools.partial(
            custom.list_cluster_custom_object,
            RESERVATION.group,
            RESERVATION.version,
            RESERVATION.plural,
        ),
        lambda obj: (obj.get("status") or {}).get("phase") == "Failed",
    )
    await failed.start()
    names = [f"bench-ttl-{i}" for i in range(SAMPLES)]
    try:
        for name in names:
            await writer.create(
                RESERVATION,
                {
                    "apiVersion": f"{RESERVATION.group}/{RESERVATION.version}",
                    "kind": "Reservation",
                    "metadata": {"name": name},
                    "spec": {
                        "ttl": f"{TTL_SECONDS}s",
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "c", "resources": {"requests": {"cpu": "1"}}}
                                ]
                            }
                        },
                        "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
                    },
                },
            )
            await asyncio.sleep(SPACING_SECONDS)
        await _until(lambda: all(n in failed.seen for n in names), process, "ttl expiry")
    finally:
        await failed.stop()
        for name in names:
            with contextlib.suppress(Exception):
                await writer.delete(RESERVATION, name)
    return Lag(
        "Reservation ttl -> Failed",
        nodes,
        tuple(
            failed.seen[n]
            - wall_seconds(failed.objects[n]["metadata"]["creationTimestamp"])
            - TTL_SECONDS
            for n in names
        ),
    )
