"""Migration (docs/migration.md): NodeMetric reports a node hot; the LowNodeLoad balancer
makes PodMigrationJobs for just enough of its pods, each job reserves room on an idle node
first and only then evicts, and every replacement lands in its reservation, on an idle
node, never back on the hot one, which ends under its threshold."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from datetime import UTC, datetime

from berth.demo.console import Console, StoryFailed, check, eventually
from berth.demo.install import BALANCED_LABEL, DESCHEDULING_SECONDS, high_thresholds
from berth.demo.objects import (
    Json,
    allocated_to,
    apply_made,
    live_pods,
    node_of,
    reported_cpu_percent,
    scale_away,
)
from berth.demo.story import Context, Story
from berth.localcluster.kubectl import KubectlError
from berth.localcluster.nodes import kwok_node

NAMESPACE = "demo-migration"
HOT, IDLE = "demo-hot", ("demo-idle-1", "demo-idle-2")
HOT_CPU, IDLE_CPU = 8, 4
REPLICAS = 8
POD_USAGE_M, SYSTEM_USAGE_M = 850, 200
"""What each pod and each node's system use, in millicores, as the nodes' agents would
report: eight pods make the hot node 87.5% busy, over the 75% high threshold."""
REPORT_SECONDS = 1.0
JOBS_SELECTOR = "berth.dev/descheduler=LowNodeLoad"
JOB_EVENTS = ("ReservationCreated", "ReservationScheduled", "Evicting", "EvictComplete", "Complete")


class Reporter:
    """Plays the three nodes' agents in the background: every second, each NodeMetric says
    what the node's running pods use (``podsMetric``) on top of its system's share."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.stop_flag = threading.Event()
        self.first: dict[str, tuple[int, int]] = {}
        """The first round's report: each node's cpu usage (millicores) and pod count."""
        self.thread = threading.Thread(target=self._run, name="demo-node-agents", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_flag.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def _run(self) -> None:
        while not self.stop_flag.is_set():
            # A round that fails (an API hiccup) is simply the next round's to do.
            with contextlib.suppress(KubectlError, subprocess.TimeoutExpired):
                self.report_once()
            self.stop_flag.wait(REPORT_SECONDS)

    def report_once(self) -> None:
        pods = [p for p in live_pods(self.console, NAMESPACE) if _running(p)]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        written: dict[str, tuple[int, int]] = {}
        for node in (HOT, *IDLE):
            mine = [p for p in pods if node_of(p) == node]
            cpu = SYSTEM_USAGE_M + POD_USAGE_M * len(mine)
            written[node] = (cpu, len(mine))
            status = {
                "updateTime": now,
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": f"{cpu}m", "memory": "2Gi"}}},
                "podsMetric": [
                    {
                        "namespace": NAMESPACE,
                        "name": p["metadata"]["name"],
                        "podUsage": {"resources": {"cpu": f"{POD_USAGE_M}m", "memory": "200Mi"}},
                    }
                    for p in mine
                ],
            }
            patch = json.dumps({"status": status})
            self.console.run(
                "patch", "nodemetric", node, "--subresource=status", "--type=merge", "-p", patch
            )
        self.first = self.first or written


def play(ctx: Context) -> None:
    console = ctx.console
    reporter = Reporter(console)
    high = high_thresholds()["cpu"]
    try:
        ctx.say(
            f"{HOT} ({HOT_CPU} cpu) runs web, {REPLICAS} pods of 1 cpu; "
            f"{IDLE[0]} and {IDLE[1]} ({IDLE_CPU} cpu) come after, empty"
        )
        _add_node(console, HOT, HOT_CPU)
        apply_made(console, _namespace(), f"Namespace {NAMESPACE}")
        apply_made(console, _deployment(), f"Deployment web: {REPLICAS} x 1 cpu")

        def all_on_hot() -> str | None:
            where = [node_of(p) for p in live_pods(console, NAMESPACE) if _running(p)]
            return None if where == [HOT] * REPLICAS else f"running on {where}"

        eventually(f"web's {REPLICAS} pods running on {HOT}", all_on_hot, timeout=90)
        for node in IDLE:
            _add_node(console, node, IDLE_CPU)
        _wait_nodes(console)
        ctx.say(
            "kwok runs no agent: the nodes' NodeMetric reports are written as their agents "
            f"would, every {REPORT_SECONDS:.0f}s, {POD_USAGE_M}m per running pod "
            f"(podsMetric) and {SYSTEM_USAGE_M}m for the system"
        )
        reporter.start()
        eventually("the first reports", lambda: None if reporter.first else "none yet")
        console.write(f"\nthe first reports (high threshold cpu {high:g}%):")
        for node, (cpu, count) in reporter.first.items():
            percent = 100.0 * cpu / (1000 * (HOT_CPU if node == HOT else IDLE_CPU))
            mark = "  <- hot" if percent > high else ""
            console.write(f"  {node:<12} {percent:5.1f}% cpu  {count} web pods{mark}")
        ctx.say(
            f"{HOT} is over LowNodeLoad's highThresholds cpu {high:g}%; the descheduler "
            f"(every {DESCHEDULING_SECONDS}s here) moves just enough pods to the idle nodes"
        )
        first_pods = {p["metadata"]["name"] for p in live_pods(console, NAMESPACE)}
        jobs: list[Json] = []

        def relieved() -> str | None:
            jobs[:] = _jobs(console)
            phases = {j["metadata"]["name"]: _status(j).get("phase") for j in jobs}
            failed = [j for j in jobs if _status(j).get("phase") in ("Failed", "Aborted")]
            if failed:
                raise StoryFailed(f"a migration failed: {_status(failed[0])}")
            if not jobs or any(phase != "Succeeded" for phase in phases.values()):
                return f"jobs {phases or 'none yet'}"
            percent = reported_cpu_percent(console, HOT)
            return None if percent < high else f"{HOT} at {percent:.1f}% cpu"

        eventually(f"{HOT} relieved by migrations", relieved, timeout=120, interval=1.0)
        names = sorted(j["metadata"]["name"] for j in jobs)
        ctx.say(
            f"{len(names)} migrations and {HOT} is under its threshold; "
            "three more descheduler rounds, in which nothing more should move"
        )
        time.sleep(3 * DESCHEDULING_SECONDS)
        more = sorted({j["metadata"]["name"] for j in _jobs(console)} - set(names))
        check(not more, f"the descheduler moved more pods than needed: {more}")
        console.show("get", "pmj", *names)
        console.show("get", "reservations", *names, note="made by the jobs, used by the pods")
        console.show("describe", "pmj", names[0], sections=("Status:", "Events:"))
        _check_reserved_first(console, names)
        console.show(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-o",
            "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,RESERVATION:"
            ".metadata.annotations.scheduling\\.koordinator\\.sh/reservation-allocated",
        )
        _check_replacements(console, jobs, first_pods)
        _show_usage(console, high)
        percent = reported_cpu_percent(console, HOT)
        check(percent < high, f"{HOT} still at {percent:.1f}% cpu, over {high:g}%")
    finally:
        reporter.stop()
        _clean_up(console)


def _running(pod: Json) -> bool:
    return bool(node_of(pod)) and (pod.get("status") or {}).get("phase") == "Running"


def _status(obj: Json) -> Json:
    return dict(obj.get("status") or {})


def _add_node(console: Console, name: str, cpu: int) -> None:
    node = kwok_node(
        name,
        labels={BALANCED_LABEL: "true", "berth.dev/demo": "migration"},
        allocatable={"cpu": str(cpu), "memory": "16Gi", "pods": "110"},
    )
    console.run("create", "-f", "-", stdin=json.dumps(node))


def _wait_nodes(console: Console) -> None:
    """Ready, untainted, and each with the NodeMetric the operator makes for it."""
    nodes = (HOT, *IDLE)
    console.run("wait", "--for=condition=Ready", *(f"node/{n}" for n in nodes), "--timeout=60s")

    def usable() -> str | None:
        listed = console.get_json("nodes", "-l", "berth.dev/demo=migration")["items"]
        tainted = [n["metadata"]["name"] for n in listed if (n.get("spec") or {}).get("taints")]
        metrics = console.get_json("nodemetrics")["items"]
        missing = set(nodes) - {m["metadata"]["name"] for m in metrics}
        if tainted or missing:
            return f"tainted {tainted}, no NodeMetric {sorted(missing)}"
        return None

    eventually("the nodes usable and reported on", usable)


def _jobs(console: Console) -> list[Json]:
    """The balancer's jobs for this story's pods."""
    items = console.get_json("pmj", "-l", JOBS_SELECTOR)["items"]
    return [j for j in items if j["spec"]["podRef"].get("namespace") == NAMESPACE]


def _show_usage(console: Console, high: float) -> None:
    pods = live_pods(console, NAMESPACE)
    console.write(f"\nreported now (kubectl get nodemetric; high threshold cpu {high:g}%):")
    for node in (HOT, *IDLE):
        count = sum(1 for p in pods if node_of(p) == node)
        percent = reported_cpu_percent(console, node)
        mark = "  <- hot" if percent > high else ""
        console.write(f"  {node:<12} {percent:5.1f}% cpu  {count} web pods{mark}")


def _check_reserved_first(console: Console, names: list[str]) -> None:
    """Each job's events: its reservation was made and placed before the eviction began."""
    for name in names:
        items = console.get_json(
            "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
        )["items"]
        ordered = [
            e["reason"]
            for e in sorted(
                items, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"])
            )
        ]
        seen = [r for r in ordered if r in JOB_EVENTS]
        console.write(f"{name}: {' -> '.join(seen)}")
        steps = ("ReservationCreated", "ReservationScheduled", "Evicting")
        check(
            all(step in seen for step in steps)
            and [seen.index(step) for step in steps] == sorted(seen.index(s) for s in steps),
            f"{name} did not place its reservation before evicting: {ordered}",
        )


def _check_replacements(console: Console, jobs: list[Json], first_pods: set[str]) -> None:
    """Every replacement is in its job's reservation on an idle node; only pods that were
    there before any migration are on the hot node."""
    pods = {p["metadata"]["name"]: p for p in live_pods(console, NAMESPACE)}
    for job in jobs:
        status = _status(job)
        new = (status.get("podRef") or {}).get("name")
        moved = pods.get(new or "")
        if moved is None:
            raise StoryFailed(f"{job['metadata']['name']}: replacement {new} not found")
        where = node_of(moved)
        check(where in IDLE, f"replacement {new} landed on {where}, not an idle node")
        check(
            allocated_to(moved) == job["metadata"]["name"],
            f"replacement {new} is not in its job's reservation",
        )
        check(job["spec"]["podRef"]["name"] not in pods, f"{job['spec']['podRef']} still runs")
    on_hot = {name for name, p in pods.items() if node_of(p) == HOT}
    newcomers = on_hot - first_pods
    check(not newcomers, f"pods placed back on the hot node {HOT}: {sorted(newcomers)}")
    check(len(pods) == REPLICAS, f"{len(pods)} web pods, not {REPLICAS}")


def _clean_up(console: Console) -> None:
    """The jobs (their reservations go with them), web, the namespace, the nodes."""
    jobs = _jobs_or_none(console)
    if jobs:
        console.run("delete", "pmj", *jobs, "--ignore-not-found")
    scale_away(console, NAMESPACE, "web", "app=web")
    console.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    console.run("delete", "node", HOT, *IDLE, "--ignore-not-found")
    console.run("delete", "nodemetric", HOT, *IDLE, "--ignore-not-found")


def _jobs_or_none(console: Console) -> list[str]:
    with contextlib.suppress(KubectlError):
        return [j["metadata"]["name"] for j in _jobs(console)]
    return []


def _namespace() -> Json:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def _deployment() -> Json:
    container = {
        "name": "web",
        "image": "registry.example/web:1.0",
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "schedulerName": "berth-scheduler",
                    "nodeSelector": {"berth.dev/demo": "migration"},
                    "containers": [container],
                },
            },
        },
    }


STORY = Story("h", "a hot node relieved by migrations, reservations first", play)
