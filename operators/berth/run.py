"""``berth run``: the operators and the scheduler in one process, one event loop.

Only the elected leader (a Lease, from the configuration's ``leaderElection``) runs the
components; a standby serves health and waits. A component that fails stops the others;
a leader that loses its lease stops them and exits non-zero, so the Deployment restarts it
as a fresh candidate, as kube-scheduler does. Health, readiness and metrics are served
throughout on ``--health-address`` (default 0.0.0.0:10251).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.duration import parse_duration
from berth.descheduler import config as descheduler_config
from berth.descheduler.config import DeschedulerSettings
from berth.health import HealthServer, Progress
from berth.kube import collector
from berth.kube.client import api_client, fence_writes, load_configuration, wait_for_api
from berth.kube.leaderelection import LeaderElector, LeaseConfig, default_identity
from berth.migration.metrics import MigrationMetrics
from berth.scheduler import config as scheduler_config
from berth.scheduler.metrics import SchedulerMetrics

if TYPE_CHECKING:
    from berth.operators.admission import AdmissionServer

logger = log.get(__name__)

EXIT_LOST_LEADERSHIP = 3


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None = None
    operators: bool = True
    scheduler: bool = True
    scheduler_config: str | None = None
    descheduler_config: str | None = None
    log_level: str = "info"
    health_address: str = "0.0.0.0:10251"
    # Liveness fails when the scheduling loop has not gone round for this long while pods
    # wait in its active queue.
    stall_seconds: float = 120.0
    # The ElasticQuota admission webhook: served on this host:port when set, dialled by the
    # API server at webhook_url (default: the berth-webhook Service).
    webhook_address: str | None = None
    webhook_url: str | None = None


def run_command(
    kubeconfig: str,
    config: str | None = None,
    *,
    operators: bool = False,
    scheduler: bool = True,
    log_level: str = "warning",
    descheduler_config: str | None = None,
) -> list[str]:
    """The command line of ``berth run`` in a process of its own (health on any free port)."""
    argv = [sys.executable, "-m", "berth.entry", "run"]
    argv += [] if operators else ["--no-operators"]
    argv += [] if scheduler else ["--no-scheduler"]
    argv += [f"--kubeconfig={kubeconfig}", "--health-address=127.0.0.1:0"]
    argv.append(f"--log-level={log_level}")
    if config is not None:
        argv.append(f"--config={config}")
    if descheduler_config is not None:
        argv.append(f"--descheduler-config={descheduler_config}")
    return argv


def run(options: RunOptions) -> int:
    log.configure(options.log_level)
    if not (options.operators or options.scheduler):
        logger.error("nothing to run: both the operators and the scheduler are switched off")
        return 2
    try:
        settings = scheduler_config.load(options.scheduler_config)
    except scheduler_config.ConfigError as err:
        logger.error("invalid scheduler configuration", error=str(err))
        return 2
    descheduling = DeschedulerSettings()
    if options.descheduler_config is not None:
        try:
            descheduling = descheduler_config.load(options.descheduler_config)
            descheduler_config.check_against_scheduler(descheduling, settings)
        except descheduler_config.DeschedulerConfigError as err:
            logger.error("invalid descheduler configuration", error=str(err))
            return 2
    # This process lives as long as its view of the cluster: what it holds once synced is
    # frozen.
    collector.freeze_when_synced()
    return asyncio.run(serve(options, settings, descheduling=descheduling))


def _lease(settings: scheduler_config.SchedulerConfiguration) -> LeaseConfig:
    election = settings.leader_election
    return LeaseConfig(
        namespace=election.resource_namespace,
        name=election.resource_name,
        identity=default_identity(),
        lease_duration=parse_duration(election.lease_duration).total_seconds(),
        renew_deadline=parse_duration(election.renew_deadline).total_seconds(),
        retry_period=parse_duration(election.retry_period).total_seconds(),
    )


async def serve(
    options: RunOptions,
    settings: scheduler_config.SchedulerConfiguration,
    stop: asyncio.Event | None = None,
    *,
    descheduling: DeschedulerSettings | None = None,
) -> int:
    stop = stop or asyncio.Event()
    descheduling = descheduling or DeschedulerSettings()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    configuration = await load_configuration(options.kubeconfig)
    host, _, port = options.health_address.rpartition(":")
    health = HealthServer(host or "0.0.0.0", int(port))
    collections = collector.CollectionMetrics()
    health.add_registry(collections.registry)
    collections.start()
    async with api_client(configuration) as api:
        lead, ready = _components(options, settings, descheduling, api, configuration, health)
        await health.start()
        logger.info("serving health and metrics", address=f"{host}:{health.port}")
        webhook = None
        reached = asyncio.Event()
        health.add_readiness("API server reached", reached.is_set)
        try:
            # Health is served meanwhile: the liveness probe must not restart a process
            # that is waiting for its API server, before it can say why it gives up.
            await wait_for_api(api)
            reached.set()
            webhook = await _start_webhook(options, api)
            if not settings.leader_election.leader_elect:
                health.add_readiness("components ready", ready)
                return await lead(stop)
            lease = _lease(settings)
            if not await _namespace_exists(api, lease.namespace):
                logger.error(
                    "the leader-election namespace does not exist: install Berth "
                    "(kubectl apply -k manifests), or set leaderElection.resourceNamespace, "
                    "or leaderElection.leaderElect: false for a single process",
                    namespace=lease.namespace,
                )
                return 2
            elector = LeaderElector(api, lease)
            health.add_readiness("components ready", lambda: not elector.is_leader or ready())
            result: list[int] = [0]

            async def work() -> None:
                fence_writes(lambda: elector.is_leader)
                result[0] = await lead(stop)

            if await elector.run(work, stop):
                return result[0]
            logger.error("lost leadership; exiting so a fresh candidate takes over")
            return EXIT_LOST_LEADERSHIP
        finally:
            if webhook is not None:
                await webhook.stop()
            await health.stop()
            collections.stop()


async def _start_webhook(options: RunOptions, api: ApiClient) -> AdmissionServer | None:
    """Every replica serves the admission webhook, leader or not: it reads the API per
    review and so needs no informer."""
    if options.webhook_address is None:
        return None
    from berth.operators.admission import AdmissionServer
    from berth.operators.nodemetric import DEFAULT_NAMESPACE, NAMESPACE_ENV

    host, _, port = options.webhook_address.rpartition(":")
    namespace = os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    server = AdmissionServer(api, host or "0.0.0.0", int(port), namespace, options.webhook_url)
    await server.start()
    return server


async def _namespace_exists(api: ApiClient, namespace: str) -> bool:
    try:
        await CoreV1Api(api).read_namespace(namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _components(
    options: RunOptions,
    settings: scheduler_config.SchedulerConfiguration,
    descheduling: DeschedulerSettings,
    api: ApiClient,
    configuration: Configuration,
    health: HealthServer,
) -> tuple[Callable[[asyncio.Event], Coroutine[Any, Any, int]], Callable[[], bool]]:
    """What the leader runs, and whether it is ready (informers synced)."""
    migration_metrics = MigrationMetrics()
    if options.operators:
        from berth.operators.worker import liveness

        health.add_registry(migration_metrics.registry)
        health.add_liveness("operator workers", liveness(options.stall_seconds))
    scheduler = None
    if options.scheduler:
        from berth.scheduler.decisions.http import (
            NODE_PATH,
            PATH,
            node_view_handler,
            pod_decision_handler,
        )
        from berth.scheduler.plugins.noderesourcetopology import NodeResourceTopologyMatch
        from berth.scheduler.service import Scheduler

        metrics = SchedulerMetrics(settings.scheduler_names())
        health.add_registry(metrics.registry)
        scheduler = Scheduler(api, settings, metrics)
        numa = [
            plugin
            for profile in scheduler.profiles.values()
            for plugin in profile.framework.instances.values()
            if isinstance(plugin, NodeResourceTopologyMatch)
        ]
        decisions = scheduler.schedule_one.decisions
        metrics.watch(scheduler.view, decisions, lambda: [n.pending_ledger() for n in numa])
        health.add_get(
            PATH, pod_decision_handler(decisions, lambda: scheduler.synced, scheduler.queue.where)
        )
        health.add_get(NODE_PATH, node_view_handler(scheduler.view, lambda: scheduler.synced))
        health.add_liveness(
            "scheduling loop",
            Progress(
                scheduler.heartbeat,
                lambda: scheduler.synced and scheduler.queue.counts()["active"] > 0,
                options.stall_seconds,
            ),
        )

    async def lead(stop: asyncio.Event) -> int:
        inner = asyncio.Event()
        components: dict[str, Coroutine[Any, Any, None]] = {}
        if options.operators:
            from berth.operators.runner import run_operators

            components["operators"] = run_operators(
                configuration,
                inner,
                migration_metrics=migration_metrics,
                migration_args=descheduling.migration,
            )
            if descheduling.low_node_load is not None:
                from berth.descheduler.service import Balancer

                balancer = Balancer(api, descheduling.low_node_load, descheduling)
                components["descheduler"] = balancer.run(inner)
        if scheduler is not None:
            components["scheduler"] = scheduler.run(inner)
        tasks = {asyncio.create_task(c, name=name): name for name, c in components.items()}
        stopping = asyncio.create_task(stop.wait())
        logger.info("berth running", components=list(components))
        try:
            done, _ = await asyncio.wait({*tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            inner.set()
            stopping.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        failed = 0
        for task, name in tasks.items():
            if task in done and not task.cancelled() and task.exception() is not None:
                failed = 1
                logger.error("component failed", component=name, error=repr(task.exception()))
        logger.info("berth stopped")
        return failed

    def ready() -> bool:
        return scheduler is None or scheduler.synced

    return lead, ready
