"""Why is my pod pending? (docs/troubleshooting.md): `kubectl berth why` prints the decision
the scheduler actually made, with its numbers, for a pod refused by its quota's max and for
one refused by its node's reported load."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

from berth.demo.console import Console, check, eventually
from berth.demo.objects import (
    apply_made,
    elastic_quota,
    events,
    namespace,
    pod,
    reported_cpu_percent,
)
from berth.demo.story import Context, Story
from berth.loadaware.args import THRESHOLDS_ANNOTATION
from berth.localcluster.nodeconfig import NODE_LABEL as REAL_NODE_TAINT

NAMESPACE = "demo-why"


def play(ctx: Context) -> None:
    console = ctx.console
    node = ctx.agent_node
    try:
        apply_made(console, namespace(NAMESPACE), f"Namespace {NAMESPACE}")
        apply_made(
            console,
            elastic_quota("quota", NAMESPACE, "1", "2"),
            "ElasticQuota: min 1 cpu, max 2 cpu",
        )
        ctx.say("a pod asking 3 cpu in a namespace whose quota allows at most 2")
        apply_made(console, pod("over-quota", NAMESPACE, "3"), "Pod over-quota: 3 cpu")
        report = _why(console, "over-quota")
        check("is more than Max (cpu: 0 used + 3 requested > 2)" in report, report)
        check("verdict: OverMax on cpu" in report, report)
        ctx.say(
            f"{node}'s reported cpu usage against a threshold of 1% set on the node; its agent "
            "reports this machine's real usage, so the story keeps one core busy meanwhile "
            "(an idle machine may use less than 1% of the node)"
        )
        with _busy_core():
            thresholds = json.dumps({"usageThresholds": {"cpu": 1}})
            console.run(
                "annotate", "node", node, f"{THRESHOLDS_ANNOTATION}={thresholds}", "--overwrite"
            )

            def over_threshold() -> str | None:
                # The plugin refuses when the rounded percent exceeds the threshold.
                percent = reported_cpu_percent(console, node)
                return None if round(percent) > 1 else f"{percent:.2f}% reported"

            eventually(f"{node} reported over 1% while the core is busy", over_threshold)
            hot = pod("hot", NAMESPACE, "100m")
            hot["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            # The real node is tainted so that only what is meant to run there does.
            hot["spec"]["tolerations"] = [{"key": REAL_NODE_TAINT, "operator": "Exists"}]
            apply_made(console, hot, f"Pod hot: 100m cpu, only on {node}")
            report = _why(console, "hot")
        check("LoadAwareScheduling" in report, report)
        check("wait for the load to drop" in report, report)
    finally:
        console.run("annotate", "node", node, f"{THRESHOLDS_ANNOTATION}-")
        console.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


@contextlib.contextmanager
def _busy_core() -> Iterator[None]:
    """One process spinning on a core for the duration, stopped however the block ends."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _why(console: Console, name: str) -> str:
    def refused() -> str | None:
        return None if events(console, NAMESPACE, name, "FailedScheduling") else "not yet"

    eventually(f"{name} refused", refused)
    # Through the API server's service proxy to the berth-scheduler Service, as a user would.
    return console.show_plugin("berth", "why", name, "-n", NAMESPACE)


STORY = Story("g", "why is my pod pending? (kubectl berth why)", play)
