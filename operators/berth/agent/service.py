"""The agent process: sample the node every second or so, report every
``reportIntervalSeconds``, and follow the NodeMetric's spec as it changes.

The NodeMetric is watched (list and watch on its name only); a new policy applies from the
next sample and the next report, without a restart. The agent never creates its NodeMetric:
the operator does, and until it exists the agent samples and waits. SIGTERM or SIGINT stop
it cleanly.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.agent.pods import PodRef, list_node_pods
from berth.agent.report import build_status, history_seconds
from berth.agent.sampler import Sampler
from berth.agent.window import Window
from berth.api.nodemetric import GROUP, VERSION, NodeMetricCollectPolicy, NodeMetricSpec
from berth.kube.client import api_client, load_configuration, wait_for_api
from berth.kube.watch import Informer
from berth.kube.write import NODE_METRIC, ApiWriter

__all__ = ["Agent", "AgentOptions", "run", "serve"]

PLURAL = "nodemetrics"
API_ERRORS = (ApiException, aiohttp.ClientError, TimeoutError, OSError)

logger = log.get(__name__)


@dataclass(frozen=True)
class AgentOptions:
    node_name: str
    kubeconfig: str | None = None
    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    sample_interval: float = 1.0
    log_level: str = "info"


class Agent:
    """Samples into a window; reports the window into the node's NodeMetric status."""

    def __init__(self, options: AgentOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.node = options.node_name
        self.clock = clock  # monotonic seconds: when each sample is taken
        self.sample_interval = options.sample_interval
        self.sampler = Sampler(options.proc_root, options.cgroup_root)
        self.policy = NodeMetricCollectPolicy()
        self.window = Window(history_seconds(self.policy))
        self.exists = False
        self.changed = asyncio.Event()
        self.pods: dict[str, PodRef] = {}
        self.reports = 0
        self.log = logger.bind(name=self.node)

    def sample(self) -> None:
        """One reading into the window; raises OSError or ValueError when ``/proc`` fails."""
        sample = self.sampler.sample(self.clock(), self.policy.node_memory_collect_policy)
        if sample is not None:
            self.window.add(sample)

    async def run(self, api: ApiClient, stop: asyncio.Event) -> int:
        """Until ``stop`` is set (0), or one of the loops fails (1)."""
        custom: Any = CustomObjectsApi(api)
        call = functools.partial(
            custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            field_selector=f"metadata.name={self.node}",
        )
        informer = Informer(PLURAL, call, self._metric_event)
        tasks = [
            asyncio.create_task(informer.run(stop), name="watch"),
            asyncio.create_task(self._sample_loop(), name="sample"),
            asyncio.create_task(self._report_loop(CoreV1Api(api), ApiWriter(api)), name="report"),
        ]
        stopping = asyncio.create_task(stop.wait())
        tree = self.sampler.hierarchy
        self.log.info(
            "agent started",
            cgroup=None if tree is None else ("v2" if tree.v2 else "v1"),
            cgroup_cpu=None if tree is None else str(tree.cpu),
        )
        try:
            done, _ = await asyncio.wait({*tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, stopping]:
                task.cancel()
            await asyncio.gather(*tasks, stopping, return_exceptions=True)
        failed = [t for t in tasks if t in done and not t.cancelled() and t.exception()]
        for task in failed:
            self.log.error("agent loop failed", loop=task.get_name(), error=repr(task.exception()))
        self.log.info("agent stopped")
        return 1 if failed else 0

    def _metric_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.exists = False
            self.log.warning("NodeMetric deleted; reporting resumes when it is back")
            return
        policy = NodeMetricSpec.from_dict(obj.get("spec") or {}).metric_collect_policy
        if self.exists and policy == self.policy:
            return  # e.g. our own status write
        self.log.info("following collect policy", policy=policy.to_dict())
        self.exists = True
        self.policy = policy
        self.window.set_history(history_seconds(policy))
        self.changed.set()

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sample_interval)
            try:
                self.sample()
            except (OSError, ValueError) as err:
                self.log.warning("sample failed", error=str(err))

    async def _report_loop(self, core: CoreV1Api, writer: ApiWriter) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            due = last + self.policy.report_interval_seconds
            try:
                # A new policy may move the due time: wake up and recompute it.
                await asyncio.wait_for(self.changed.wait(), max(due - loop.time(), 0))
                self.changed.clear()
                continue
            except TimeoutError:
                pass
            if self.exists:
                await self._report(core, writer)
            last = loop.time()

    async def _report(self, core: CoreV1Api, writer: ApiWriter) -> None:
        if self.window.pod_usages(self.policy.aggregate_duration_seconds):
            try:
                self.pods = await list_node_pods(core, self.node)
            except API_ERRORS as err:
                self.log.warning("pods not listed; reporting the last names known", error=str(err))
        status = build_status(datetime.now(UTC), self.window, self.policy, self.pods)
        if status is None:
            return
        try:
            await writer.patch_status(NODE_METRIC, self.node, status.to_dict())
        except API_ERRORS as err:
            self.log.warning("report not written", error=str(err))
            return
        self.reports += 1
        report_log = self.log.info if self.reports == 1 else self.log.debug
        report_log("usage reported", pods=len(status.pods_metric or ()))


async def serve(options: AgentOptions, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = Agent(options)
    try:
        agent.sample()  # the baseline; fails fast on a wrong --proc-root
    except (OSError, ValueError) as err:
        agent.log.error("cannot read the node's usage", proc=str(options.proc_root), error=str(err))
        return 1
    configuration = await load_configuration(options.kubeconfig)
    async with api_client(configuration) as api:
        await wait_for_api(api)
        return await agent.run(api, stop)


def run(options: AgentOptions) -> int:
    log.configure(options.log_level)
    return asyncio.run(serve(options))
