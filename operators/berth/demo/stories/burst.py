"""Load-aware scheduling (docs/loadaware.md, docs/nodemetric.md): the node agent, a pod of
the installed DaemonSet, reports this machine's real usage for the real node; a burst of
pods spreads over the cool kwok nodes, counting itself as it lands, and none goes to the
node over its usage threshold."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from berth.agent.memory import node_memory, parse_meminfo
from berth.api.nodemetric import NodeMetric, NodeMetricStatus
from berth.demo.console import Console, check, eventually
from berth.demo.objects import Json, apply_made, live_pods, node_of
from berth.demo.story import Context, Story

NAMESPACE = "demo-burst"
REPLICAS = 24
FRESH_SECONDS = 30
MIB = 2**20
# What the kwok nodes' agents would report: busy cores and memory of 32 cpu / 128Gi.
REPORTED = (("2", "16Gi"), ("8", "24Gi"), ("21", "40Gi"))


def play(ctx: Context) -> None:
    console = ctx.console
    agent = ctx.agent_node
    cool, warm, hot = ctx.nodes[:3]
    try:
        ctx.say(
            f"the berth-agent pod on {agent} reports this machine's usage (every 5 s, see install)"
        )
        eventually(f"a fresh report for {agent}", lambda: _fresh(console, agent))
        console.show("get", "nodemetric", agent, "-o", "yaml", sections=("spec:", "status:"))
        _check_real(console, agent)
        ctx.say(
            f"{cool}, {warm} and {hot} run no agent (kwok plays them): their reports are "
            "written as their agents would, "
            f"{', '.join(cpu for cpu, _ in REPORTED)} busy cores of 32"
        )
        for node, (cpu, memory) in zip((cool, warm, hot), REPORTED, strict=True):
            _report(console, node, cpu, memory)
        console.show("get", "nodemetrics", agent, cool, warm, hot)
        ctx.say(f"a burst: {REPLICAS} pods of 1 cpu at once")
        apply_made(console, _namespace(), f"Namespace {NAMESPACE}")
        apply_made(console, _deployment(), f"Deployment burst: {REPLICAS} x 1 cpu")

        def all_bound() -> str | None:
            placed = sum(1 for p in live_pods(console, NAMESPACE) if node_of(p))
            return None if placed == REPLICAS else f"{placed} of {REPLICAS} bound"

        eventually("the burst bound", all_bound, timeout=90)
        per_node = Counter(node_of(p) for p in live_pods(console, NAMESPACE))
        notes = {
            cool: f"{REPORTED[0][0]} of 32 cpu busy",
            warm: f"{REPORTED[1][0]} of 32 cpu busy",
            hot: f"{REPORTED[2][0]} of 32 cpu busy: over the 65% threshold with any pod",
        }
        console.write(f"\npods of the burst per node (kubectl get pods -n {NAMESPACE} -o wide):")
        for node in sorted(per_node.keys() | notes.keys()):
            console.write(f"  {node:<14} {per_node[node]:>3}   {notes.get(node, '')}")
        check(per_node[hot] == 0, f"{per_node[hot]} pods went to {hot}, over its threshold")
        check(
            per_node[cool] >= per_node[warm] >= 1,
            f"not spread from the coolest node: {dict(per_node)}",
        )
    finally:
        console.run("delete", "namespace", NAMESPACE, "--ignore-not-found")
        # The operator makes fresh NodeMetrics, without the written reports.
        console.run("delete", "nodemetric", cool, warm, hot, "--ignore-not-found")


def _metric(console: Console, node: str) -> NodeMetric:
    return NodeMetric.from_dict(console.get_json("nodemetric", node))


def _fresh(console: Console, node: str) -> str | None:
    updated = (_metric(console, node).status or NodeMetricStatus()).update_time
    if updated is None:
        return "no report yet"
    age = (datetime.now(UTC) - updated).total_seconds()
    return None if age <= FRESH_SECONDS else f"last report {age:.0f}s ago"


def _check_real(console: Console, node: str) -> None:
    """The report is this machine's: its memory read as the NodeMetric's policy says, and
    no more cores than it has."""
    metric = _metric(console, node)
    policy = metric.spec.metric_collect_policy.node_memory_collect_policy
    info = (metric.status or NodeMetricStatus()).node_metric
    usage = (info.node_usage.resources if info and info.node_usage else None) or {}
    check({"cpu", "memory"} <= usage.keys(), f"the report has no cpu or memory: {usage}")
    here = node_memory(parse_meminfo(Path("/proc/meminfo").read_text()), policy)
    reported = usage["memory"].value
    # The report is a mean over its interval; a busy machine's memory moves meanwhile.
    check(
        abs(reported - here) <= max(here // 4, 256 * MIB),
        f"reported memory {usage['memory']} is not this machine's {here // MIB}Mi",
    )
    cores = usage["cpu"].value
    check(0 <= cores <= (os.cpu_count() or 1), f"reported cpu {cores} is not this machine's")


def _report(console: Console, node: str, cpu: str, memory: str) -> None:
    report = {
        "status": {
            "updateTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
        }
    }
    patch = json.dumps(report)
    console.run("patch", "nodemetric", node, "--subresource=status", "--type=merge", "-p", patch)


def _namespace() -> Json:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def _deployment() -> Json:
    container = {
        "name": "worker",
        "image": "registry.example/worker:1.0",
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burst", "namespace": NAMESPACE},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "burst"}},
            "template": {
                "metadata": {"labels": {"app": "burst"}},
                "spec": {"schedulerName": "berth-scheduler", "containers": [container]},
            },
        },
    }


STORY = Story("d", "a load-aware burst spread across nodes", play)
