"""Running a churn against a real `berth run` with the checker judging every second."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster import only_these_quotas
from tests.integration.processes import BerthRun
from tests.reliability.checker import TRANSITION_WITHIN, Checker, Snapshot, snapshot
from tests.reliability.churn import JOB_TTL_SECONDS, MIGRATING, STEADY_LABEL, Churn
from tests.reliability.gang_invariants import GangJudge
from tests.reliability.load_invariants import LoadJudge
from tests.reliability.migration_invariants import MigrationHistory, Sample, overdue, unfinished
from tests.reliability.node_load import NodeLoad
from tests.reliability.numa_invariants import NumaJudge
from tests.reliability.watches import Departures, NodeChanges, PreemptorReservations
from tests.support import REPO, eventually

# How long the load may take to settle afterwards: the longest liveness bound, twice.
SETTLE_WITHIN = 90.0
SYNCED = "scheduler view synced"  # what `berth run` logs once it schedules


async def _logged(berth: BerthRun, text: str, before: int) -> bool:
    return berth.log.read_text().count(text) > before


@dataclass(frozen=True)
class Scale:
    nodes: int
    seconds: float
    per_second: float
    kills: int
    pods_per_node: int | None = None  # the churn's bound on pods at once, per node


@dataclass
class Outcome:
    churn: Churn
    checker: Checker
    gangs: GangJudge
    numa: NumaJudge
    load: LoadJudge
    node_load: NodeLoad
    found: list[str] = field(default_factory=list)
    kills: int = 0
    # Berth's own decision record for pods reported Pending: why it refused them, for the
    # reader of a report (the checker never reads it).
    berth_said: list[str] = field(default_factory=list)
    departures: Departures | None = None  # of the churn's namespaces, while it runs
    node_changes: NodeChanges | None = None  # every node's, while the churn runs
    preemptor_reservations: PreemptorReservations | None = None  # while the churn runs
    # Berth's own figures at the end of the load (its metrics), for the reader of a report.
    berth_figures: str = ""
    migrations: MigrationHistory = field(default_factory=MigrationHistory)
    # Since when the scheduler has been left running (0: it is being killed), and the jobs
    # reported as not ended by their ttl (each once).
    live_since: float = 0.0
    overdue: set[str] = field(default_factory=set)

    async def look(self, api: ApiClient, namespaces: list[str]) -> Snapshot:
        """A snapshot, with the pods deleted since the look before."""
        snap = await snapshot(api, namespaces)
        if self.departures is not None:
            snap.departed = self.departures.take()
            snap.disrupted = self.departures.take_disrupted()
        if self.preemptor_reservations is not None:
            snap.preemptor_reservations = self.preemptor_reservations.take()
        if self.node_changes is not None:
            snap.node_changes = self.node_changes.take()
        return snap

    def judge(self, snap: Snapshot) -> list[str]:
        """Every invariant judged on one look."""
        found = (
            self.checker.check(snap)
            + self.gangs.check(snap)
            + self.numa.check(snap.topologies, snap.nodes, snap.pods)
            + self.load.check(snap.taken_at, snap.metrics, snap.nodes, snap.pods, snap.jobs)
            + self.judge_migrations(snap)
        )
        self.found.extend(found)
        return found

    def judge_migrations(self, snap: Snapshot) -> list[str]:
        """Reserve first and maxUnavailable on every look; a job not ended
        ``TRANSITION_WITHIN`` past its ttl, while the scheduler is left running."""
        sample = Sample(
            snap.listed_at or snap.taken_at,
            snap.jobs,
            snap.reservations,
            snap.pods,
            controllers=snap.controllers,
            budgets=snap.budgets,
        )
        found = self.migrations.observe(sample)
        if not self.checker.liveness:
            self.live_since = 0.0
            return found
        self.live_since = self.live_since or snap.taken_at
        late = overdue(snap.jobs, snap.taken_at, self.live_since, TRANSITION_WITHIN)
        found += [line for name, line in late.items() if name not in self.overdue]
        self.overdue |= set(late)
        return found

    @property
    def judging(self) -> bool:
        return self.checker.judging or self.gangs.judging or self.load.judging

    def report(self, name: str) -> str:
        counts = {
            **self.checker.counts,
            **self.gangs.counts,
            **self.numa.counts,
            **self.load.counts,
            **self.node_load.counts,
            **self.migrations.counts(),
            **self.churn.counts,
        }
        text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        bound = ", ".join(f"{k} {v}" for k, v in sorted(self.checker.bound_per_namespace.items()))
        waits = (
            "; ".join(
                f"{what}: {waited:.1f} s (bound {limit:.0f} s)"
                for what, (waited, limit) in sorted(self.checker.longest_wait.items())
            )
            or "none was placeable"
        )
        lines = [f"{name}: {text}, kills {self.kills}, violations {len(self.found)}",
                 f"  bound per namespace: {bound}",
                 f"  longest wait of a pod Pending while {waits}",
                 f"  most pods unavailable during migrations: "
                 f"{self.migrations.worst_unavailable or 'none was migrating'}"]  # fmt: skip
        kinds = Counter(KIND_OF.sub("…", line) for line in self.found)
        first: dict[str, str] = {}  # an example of each kind, the earliest found
        for line in self.found:
            first.setdefault(KIND_OF.sub("…", line), line)
        if len(kinds) > 1 or len(self.found) > 30:
            for kind, count in kinds.most_common(12):
                lines += [f"  {count} of: {kind}", f"    first: {first[kind]}"]
        lines += [f"  {line}" for line in sorted(set(self.found))[:30]]
        said = self.berth_said if len(self.berth_said) <= 10 else [
            *self.berth_said[:7], *self.berth_said[-3:]]  # fmt: skip
        lines += [f"  berth's record: {line}" for line in said]
        if self.berth_figures:
            lines.append(f"  berth's figures at the end of the load: {self.berth_figures}")
        sys.stderr.write("\n" + "\n".join(lines) + "\n")
        return "\n".join(lines)


# What varies between reports of one kind (objects' names, quantities), for the tally.
KIND_OF = re.compile(r"\S+/\S+|\S*-(?:n|r|p)\d+\S*|\d+(?:\.\d+)?\S*")
PENDING_POD = re.compile(r"^pod ([^/ ]+)/(\S+) Pending")
AT_REST = re.compile(r"^at rest, Pending though placeable: pod ([^/ ]+)/([^\s(]+)")
# A reservation is placed as its template's pod, recorded under the template's namespace:
# "default" for every reservation these runs make (their templates name none).
RESERVATION = re.compile(r"^(?:at rest, Pending though placeable: )?reservation ([^\s(]+)")
RECORDS_DURING_LOAD = 20  # reports during the load given Berth's record and node view
TAKER = re.compile(r"\((\S+) has ")  # the node a report says would take the pod


async def berth_record(berth: BerthRun, line: str) -> str:
    """For a report of a pod (or a reservation) left Pending, what Berth's decision record
    says of it (its debug endpoint on the health port): the message, the nodes' verdicts
    and the quota arithmetic; and, when the report names a node that would take the pod,
    what Berth's view counts on that node. Empty when the line is about something else
    or Berth cannot answer."""
    match = PENDING_POD.match(line) or AT_REST.match(line)
    reservation = RESERVATION.match(line)
    health = _health(berth)
    if match is not None:
        namespace, name = match.groups()
    elif reservation is not None:
        namespace, name = "default", reservation.group(1)
    else:
        return ""
    if health is None:
        return ""
    base = f"{health}/debug"
    record = await _debug(f"{base}/pods/{namespace}/{name}")
    if record is None:
        return ""
    quota = (record.get("details") or {}).get("CapacityScheduling")
    said = f"{namespace}/{name} at {record.get('time')}: {record.get('message') or record}" + (
        f"; quota {json.dumps(quota, sort_keys=True)}" if quota else ""
    )
    said = f"reported {datetime.now(UTC):%H:%M:%S}: {said}"
    taker = TAKER.search(line)
    if taker:
        said += "".join(
            f"; {taker.group(1)} among its {r.get('plugin')} examples ({r.get('reason')})"
            for r in record.get("rejections") or ()
            if taker.group(1) in (r.get("examples") or ())
        )
    node = await _debug(f"{base}/nodes/{taker.group(1)}") if taker else None
    if node is not None and "error" not in node:
        pods = ", ".join(
            p["pod"].split("/")[-1]
            + f" {p['requests'].get('cpu', 0)}m"
            + "".join(f" {k}" for k in ("assumed", "deleting", "reservation") if p.get(k))
            for p in node.get("pods", ())
        )
        nominated = ", ".join(
            f"{p['pod'].split('/')[-1]} {p['requests'].get('cpu', 0)}m"
            for p in node.get("nominated", ())
        )
        said += (
            f"; berth's view of {node['name']}: cpu {node['requested'].get('cpu')}m of "
            f"{node['allocatable'].get('cpu')}m, unschedulable {node['unschedulable']}, "
            f"pods [{pods}], nominated [{nominated}]"
        )
    return said


async def berth_figures(berth: BerthRun) -> str:
    """Berth's attempts by result, what sent pods back to be tried (the most frequent
    events), and how late each of its watches ran (per kind, the share of events handled
    within each bound), from its metrics; empty if it cannot answer."""
    health = _health(berth)
    text = await _get(f"{health}/metrics", lambda answer: answer.text()) if health else None
    if text is None:
        return ""
    attempts: Counter[str] = Counter()
    retried: Counter[str] = Counter()
    buckets: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "scheduler_schedule_attempts_total":
                attempts[sample.labels["result"]] += int(sample.value)
            elif sample.name == "scheduler_queue_incoming_pods_total":
                if sample.labels["queue"] != "unschedulable":
                    retried[sample.labels["event"]] += int(sample.value)
            elif sample.name == "berth_scheduler_watch_delay_seconds_bucket":
                buckets[sample.labels["kind"]].append((sample.labels["le"], sample.value))
    watches = []
    for kind, counts in sorted(buckets.items()):
        total = counts[-1][1] if counts else 0.0
        if total:
            within = ", ".join(f"{b} s {v / total:.1%}" for b, v in counts if b != "+Inf")
            watches.append(f"{kind} events {total:.0f}, handled within {within}")
    sent = ", ".join(f"{event} {count}" for event, count in retried.most_common(8))
    return "; ".join([f"attempts {dict(attempts)}", f"queued by {sent}", *watches])


def _health(berth: BerthRun) -> str | None:
    """The address of Berth's health port, from the line its log gives it on."""
    ports = re.findall(r'"port": (\d+), "event": "health server listening"', berth.log.read_text())
    return f"http://127.0.0.1:{ports[-1]}" if ports else None


async def _get(url: str, read: Callable[[aiohttp.ClientResponse], Awaitable[Any]]) -> Any:
    """One GET of Berth's health port, read by ``read``; None if it cannot answer."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as answer,
        ):
            return await read(answer)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _debug(url: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = await _get(url, lambda answer: answer.json())
    return found


def short(namespace: str) -> str:
    return "rl-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


def installed_config(scheduler: str) -> dict[str, Any]:
    """The installed scheduler configuration, under this test's scheduler name, with no
    leader election. Its backoffs are kube-scheduler's (1 s doubling to 10 s), as
    installed: with 2 s at most, hundreds of pods no node could take were each tried
    every two seconds (every node added moves them), five times the attempts a deployed
    scheduler makes, ahead of the pods that could be placed."""
    configmap = yaml.safe_load((REPO / "manifests" / "scheduler-config.yaml").read_text())
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"][0]["schedulerName"] = scheduler
    return copy.deepcopy(config)


def churn_config(scheduler: str) -> dict[str, Any]:
    """The installed configuration with the Reservation plugin's reservePreemptedCapacity
    (a reclaim holds what it frees in a Reservation of its preemptor before it evicts, the
    quota tree's reclaim as docs/elasticquota.md runs it) and NodeResourceTopologyMatch's
    pending ledger (the churn's NUMA reports are never refreshed: only the ledger keeps
    the zones from being overcommitted), both of which the checker judges."""
    config = installed_config(scheduler)
    plugin_config = config["profiles"][0].setdefault("pluginConfig", [])
    plugin_config[:] = [e for e in plugin_config if e["name"] != "NodeResourceTopologyMatch"]
    plugin_config += [
        {"name": "Reservation", "args": {"reservePreemptedCapacity": True}},
        {"name": "NodeResourceTopologyMatch", "args": {"cacheResyncPeriodSeconds": 5}},
    ]
    return config


# The per-workload migration limiter's window (5m by default, which would let a workload
# move two pods in a run): the limits on how many migrate at once stay Koordinator's.
LIMITER_WINDOW = "10s"
DESCHEDULING_SECONDS = 2


def descheduler_config(directory: Path) -> Path:
    """The installed descheduler configuration with the limiter's window
    ``LIMITER_WINDOW`` and jobs of ``JOB_TTL_SECONDS``; its LowNodeLoad balancer runs every
    ``DESCHEDULING_SECONDS`` on the churn's steady nodes (those node_load.py reports) and
    acts on the first hot report, as the demo's does (a minute's wait would outlast a
    spike)."""
    configmap = yaml.safe_load((REPO / "manifests" / "descheduler-config.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["descheduler-config.yaml"])
    config["deschedulingInterval"] = f"{DESCHEDULING_SECONDS}s"
    for plugin in config["profiles"][0]["pluginConfig"]:
        if plugin["name"] == "MigrationController":
            plugin["args"]["objectLimiters"] = {"workload": {"duration": LIMITER_WINDOW}}
            plugin["args"]["defaultJobTTL"] = f"{JOB_TTL_SECONDS}s"
        if plugin["name"] == "LowNodeLoad":
            plugin["args"]["nodeSelector"] = {"matchLabels": {STEADY_LABEL: "yes"}}
            plugin["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 1}
    path = directory / "descheduler-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def berth_run(
    kubeconfig: str,
    config: dict[str, Any],
    directory: Path,
    module: str | None = None,
    **kwargs: Any,
) -> BerthRun:
    """Logging each binding too (debug), for the reader of a report; with the migration
    limits of ``descheduler_config``. ``module`` runs in place of Berth's CLI (with its
    arguments): a Berth with one rule broken on purpose."""
    process = BerthRun.configured(kubeconfig, config, directory, log_level="debug", **kwargs)
    process.command.append(f"--descheduler-config={descheduler_config(directory)}")
    if module is not None:
        process.command[1:3] = ["-m", module]
        process.env = {"PYTHONPATH": str(REPO)}
    return process


@asynccontextmanager
async def churn_namespaces(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """The test's namespace (no quota: the tree's parent quota lives there, which holds
    no pods), two more the churn gives a flat ElasticQuota each (``-q``) and two for the
    tree's children (``-t``), once no other test's quota is left: the scheduler sums every
    flat quota's min and hands the cluster to every tree, the checker knows only this
    test's, so a quota of an earlier test still being deleted would let the scheduler
    admit more than the checker allows."""
    core = CoreV1Api(api)
    extra = [f"{namespace[:50]}-q{i}" for i in (1, 2)] + [f"{namespace[:50]}-t{i}" for i in (1, 2)]
    for name in extra:
        await core.create_namespace({"metadata": {"name": name}})
    try:
        await only_these_quotas(api, set(extra), within=180.0)
        yield [namespace, *extra]
    finally:
        for name in extra:
            await core.delete_namespace(name)


async def churned(
    api: ApiClient,
    namespaces: list[str],
    berth: BerthRun,
    scale: Scale,
    *,
    crash: bool = False,
    until: Callable[[list[str]], bool] | None = None,
    node_deletions: bool = True,
    quiet: float = 0.0,
    reclaim_finale: bool = False,
) -> Outcome:
    """The churn for ``scale.seconds`` (or until ``until(found)``), the checker every
    second throughout, then up to ``SETTLE_WITHIN`` for the at-rest checks to pass.
    With ``until``, the checker goes on for ``quiet`` seconds after the load instead: no
    deletion then frees anything, so what only the scheduler's own action (a reclaim)
    would place stays where it is; ``reclaim_finale`` first makes that so for the flat
    quotas (:meth:`Churn.lend_and_reclaim`), when the load did not already catch it."""
    scheduler = short(namespaces[0])
    flat = [n for n in namespaces[1:] if n.rsplit("-", 1)[1].startswith("q")]
    churn = Churn(api, scheduler, scheduler, flat, namespaces[0], random.Random(scheduler))
    churn.tree_namespaces = [n for n in namespaces[1:] if n.rsplit("-", 1)[1].startswith("t")]
    churn.node_deletions = node_deletions
    if scale.pods_per_node is not None:
        churn.max_pods = scale.pods_per_node * scale.nodes
    churn.max_gangs = max(churn.max_gangs, scale.nodes // 10)
    departures = Departures(api, namespaces)
    node_changes = NodeChanges(api)
    made = PreemptorReservations(api)
    outcome = Outcome(
        churn,
        Checker(scheduler),
        GangJudge(scheduler),
        NumaJudge(scheduler),
        LoadJudge(scheduler),
        NodeLoad(api, namespaces, churn.steady, MIGRATING, random.Random(scheduler + "-load")),
        departures=departures,
        node_changes=node_changes,
        preemptor_reservations=made,
    )
    node_changes.start()
    made.start()
    await churn.setup(scale.nodes)
    departures.start()
    berth.start()
    stop = asyncio.Event()

    async def judge() -> None:
        while not stop.is_set():
            snap = await outcome.look(api, namespaces)
            outcome.node_load.seen(snap.pods, snap.jobs)
            found = outcome.judge(snap)
            # The first few explain a run; each asks Berth twice and reads its log, which
            # hundreds of reports a second would turn into load of their own.
            for line in found[: max(0, RECORDS_DURING_LOAD - len(outcome.berth_said))]:
                if said := await berth_record(berth, line):
                    outcome.berth_said.append(said)
            if until is not None and until(outcome.found):
                stop.set()
            await asyncio.sleep(1)

    async def killer() -> None:
        """Kill -9 at a random moment once it works (its view synced), and restart it: a
        kill during start-up only would prove little."""
        rng = random.Random(scheduler + "-kills")
        synced = berth.log.read_text().count(SYNCED)
        while not stop.is_set() and outcome.kills < scale.kills:
            await eventually(functools.partial(_logged, berth, SYNCED, synced), within=120)
            await asyncio.sleep(rng.uniform(0.0, 3.0))
            synced = berth.log.read_text().count(SYNCED)
            berth.kill()
            outcome.gangs.kills.append(time.time())  # no binding of it lands after this
            outcome.kills += 1
            berth.start()
        # The liveness bounds are a working scheduler's: they start once the last restart
        # has synced its view (start-up alone takes seconds on a loaded machine).
        await eventually(functools.partial(_logged, berth, SYNCED, synced), within=120)

    checking = asyncio.create_task(judge())
    reporting = asyncio.create_task(outcome.node_load.run(stop))
    killing = asyncio.create_task(killer()) if crash else None
    # While it is killed every few seconds nothing is bound on time; the liveness bounds
    # hold from the last restart on (the load goes on meanwhile).
    outcome.checker.liveness = not crash
    try:
        await churn.run(scale.seconds, scale.per_second, stop)
        outcome.node_load.calm()
        outcome.berth_figures = await berth_figures(berth)
        if killing is not None:
            await killing
            outcome.checker.liveness = True
        if until is None:
            await settle(api, namespaces, outcome)
            left = outcome.checker.placeable
            for line in outcome.found[-len(left) :][:3] if left else []:
                if said := await berth_record(berth, line):
                    outcome.berth_said.append(said)
        else:
            if reclaim_finale and not stop.is_set():
                await churn.lend_and_reclaim()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), quiet)
        stop.set()
        await checking
        await reporting
    finally:
        stop.set()
        for task in (checking, killing, reporting):
            if task is not None and not task.done():
                task.cancel()
        await churn.close()
        await departures.stop()
        await node_changes.stop()
        await made.stop()
    return outcome


async def settle(api: ApiClient, namespaces: list[str], outcome: Outcome) -> None:
    """At rest: statuses agree with the pods, expected transitions happened, and no pod
    some node could take is left Pending; the per-second checks go on meanwhile, at
    least until the last bindings have been judged."""
    checker = outcome.checker
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_WITHIN
    last: list[str] = []
    while True:
        snap = await outcome.look(api, namespaces)
        outcome.judge(snap)
        last = (
            checker.at_rest(snap)
            + [f"at rest, Pending though placeable: {p}" for p in checker.placeable]
            + unfinished(snap.jobs)
        )
        if (not last and not outcome.judging) or loop.time() > deadline:
            break
        await asyncio.sleep(1)
    outcome.found.extend(last)
