"""Installing Berth on the local cluster as users install it, from its image, through the
local overlay, plus the settings the demo changes: the agent's node reports every few
seconds instead of every minute, a second scheduler profile serves Story 1, and the
descheduler balances the migration story's nodes every few seconds."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from berth.demo.console import Console
from berth.localcluster import incluster
from berth.localcluster.incluster import MANIFESTS, OVERLAY

NAMESPACE = "berth-system"
AGENT_REPORT_SECONDS = 5


def report_often(console: Console, node: str, say: Callable[[str], None]) -> None:
    """``node`` reports every few seconds the mean of those seconds, so that a change of
    load shows in its next report."""
    say(
        f"slo-controller-config: {node} reports every {AGENT_REPORT_SECONDS}s the mean "
        f"of the last {AGENT_REPORT_SECONDS}s (a nodeConfigs entry; the installed defaults "
        "are every 60s, the mean of 300s)"
    )
    incluster.report_often(console.kubectl, node, AGENT_REPORT_SECONDS)


# The demo's profile with Story 1 on (docs/reservation.md, preemption with a reservation).
RESERVING_SCHEDULER = "berth-scheduler-reserving"


def demo_scheduler_config() -> dict[str, Any]:
    """The installed scheduler configuration and a second profile: the installed one with
    Story 1 switched on (the Reservation plugin's ``reservePreemptedCapacity``), for the
    preemption-with-a-reservation story."""
    config = _installed("scheduler-config")
    reserving = copy.deepcopy(config["profiles"][0])
    reserving["schedulerName"] = RESERVING_SCHEDULER
    reserving.setdefault("pluginConfig", []).append(
        {"name": "Reservation", "args": {"reservePreemptedCapacity": True}}
    )
    config["profiles"].append(reserving)
    return config


BALANCED_LABEL = "berth.dev/demo-balanced"
"""Nodes the demo's descheduler balances: the migration story's, and no other story's."""
DESCHEDULING_SECONDS = 2


def demo_descheduler_config() -> dict[str, Any]:
    """The installed descheduler configuration, every few seconds instead of every minute,
    acting on the first hot report rather than the fifth, on ``BALANCED_LABEL`` nodes."""
    config = _installed("descheduler-config")
    config["deschedulingInterval"] = f"{DESCHEDULING_SECONDS}s"
    for plugin in config["profiles"][0]["pluginConfig"]:
        if plugin["name"] == "LowNodeLoad":
            plugin["args"]["nodeSelector"] = {"matchLabels": {BALANCED_LABEL: "true"}}
            plugin["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 1}
    return config


def _installed(name: str) -> dict[str, Any]:
    """The configuration file inside ``manifests/NAME.yaml``'s ConfigMap."""
    configmap = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
    loaded: dict[str, Any] = yaml.safe_load(configmap["data"][f"{name}.yaml"])
    return loaded


def write_overlay(directory: Path) -> Path:
    """The demo's kustomization: the local overlay with the two configurations above in
    place of the installed ones (a JSON patch of each ConfigMap's data)."""
    directory.mkdir(parents=True, exist_ok=True)
    patches = []
    for name, config in (
        ("scheduler-config", demo_scheduler_config()),
        ("descheduler-config", demo_descheduler_config()),
    ):
        operation = {
            "op": "replace",
            "path": f"/data/{name}.yaml",
            "value": yaml.safe_dump(config, sort_keys=False),
        }
        patches.append(
            {
                "target": {"kind": "ConfigMap", "name": f"berth-{name}"},
                "patch": yaml.safe_dump([operation], sort_keys=False),
            }
        )
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, directory)],
        "patches": patches,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


def high_thresholds() -> dict[str, float]:
    """LowNodeLoad's highThresholds as installed (percent of allocatable)."""
    config = _installed("descheduler-config")
    plugin = next(p for p in config["profiles"][0]["pluginConfig"] if p["name"] == "LowNodeLoad")
    return {k: float(v) for k, v in plugin["args"]["highThresholds"].items()}
