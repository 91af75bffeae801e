"""Installing Berth on the local cluster as the README says, plus the settings the demo
changes: the agent's node reports every few seconds instead of every minute, the
controller, running here as one process, does without leader election, and the
descheduler balances the migration story's nodes every few seconds."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from berth.api import KINDS
from berth.demo.console import Console
from berth.localcluster.kubectl import KubectlError
from berth.localcluster.paths import REPO_DIR

MANIFESTS = REPO_DIR / "manifests"
NAMESPACE = "berth-system"
AGENT_REPORT_SECONDS = 5
LISTABLE_TIMEOUT = 60.0


def install(console: Console, say: Callable[[str], None]) -> None:
    """``kubectl apply -k manifests``; returns when every Berth kind can be listed."""
    say("installing Berth: kubectl apply -k manifests")
    console.show("apply", "-k", str(MANIFESTS))
    # Listing succeeds once the CRDs are Established and their storage serves lists
    # (`kubectl wait --for=condition=Established` fails on a CRD without a status yet).
    plurals = ",".join(f"{kind.plural}.{kind.group}" for kind in KINDS)
    deadline = time.monotonic() + LISTABLE_TIMEOUT
    while True:
        try:
            console.run("get", plurals, "--all-namespaces")
            return
        except KubectlError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def report_often(console: Console, node: str, say: Callable[[str], None]) -> None:
    """A ``nodeConfigs`` entry in slo-controller-config: ``node`` reports every few seconds
    the mean of those seconds, so a change of load shows in its next report (the default
    mean is over 300 s, which a few busy seconds hardly move)."""
    configmap = yaml.safe_load((MANIFESTS / "slo-controller-config.yaml").read_text())
    colocation = json.loads(configmap["data"]["colocation-config"])
    colocation["nodeConfigs"] = [
        {
            "name": "demo-agent",
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
            "metricReportIntervalSeconds": AGENT_REPORT_SECONDS,
            "metricAggregateDurationSeconds": AGENT_REPORT_SECONDS,
        }
    ]
    say(
        f"slo-controller-config: {node} reports every {AGENT_REPORT_SECONDS}s the mean "
        f"of the last {AGENT_REPORT_SECONDS}s (a nodeConfigs entry; the installed defaults "
        "are every 60s, the mean of 300s)"
    )
    patch = json.dumps({"data": {"colocation-config": json.dumps(colocation, indent=2)}})
    console.run("-n", NAMESPACE, "patch", "configmap", "slo-controller-config", "-p", patch)


# The demo's profile with Story 1 on (docs/reservation.md, preemption with a reservation).
RESERVING_SCHEDULER = "berth-scheduler-reserving"


def local_scheduler_config(directory: Path) -> Path:
    """The installed scheduler configuration, leader election off: one process runs here.

    A second profile, the installed one with Story 1 switched on (the Reservation plugin's
    ``reservePreemptedCapacity``), serves the preemption-with-a-reservation story.
    """
    configmap = yaml.safe_load((MANIFESTS / "scheduler-config.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    config["leaderElection"] = {"leaderElect": False}
    reserving = copy.deepcopy(config["profiles"][0])
    reserving["schedulerName"] = RESERVING_SCHEDULER
    reserving.setdefault("pluginConfig", []).append(
        {"name": "Reservation", "args": {"reservePreemptedCapacity": True}}
    )
    config["profiles"].append(reserving)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


BALANCED_LABEL = "berth.dev/demo-balanced"
"""Nodes the demo's descheduler balances: the migration story's, and no other story's."""
DESCHEDULING_SECONDS = 2


def local_descheduler_config(directory: Path) -> Path:
    """The installed descheduler configuration, every few seconds instead of every minute,
    acting on the first hot report rather than the fifth, on ``BALANCED_LABEL`` nodes."""
    configmap = yaml.safe_load((MANIFESTS / "descheduler-config.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["descheduler-config.yaml"])
    config["deschedulingInterval"] = f"{DESCHEDULING_SECONDS}s"
    for plugin in config["profiles"][0]["pluginConfig"]:
        if plugin["name"] == "LowNodeLoad":
            plugin["args"]["nodeSelector"] = {"matchLabels": {BALANCED_LABEL: "true"}}
            plugin["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 1}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "descheduler-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def high_thresholds() -> dict[str, float]:
    """LowNodeLoad's highThresholds as installed (percent of allocatable)."""
    configmap = yaml.safe_load((MANIFESTS / "descheduler-config.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["descheduler-config.yaml"])
    plugin = next(p for p in config["profiles"][0]["pluginConfig"] if p["name"] == "LowNodeLoad")
    return {k: float(v) for k, v in plugin["args"]["highThresholds"].items()}
