"""The sides a benchmark compares: kube-scheduler, Berth (its default profile, and the
profile its manifests install) and the no-op binder, each a process of its own with the same
client QPS and burst, and the plugins each one runs.

kube-scheduler is configured with exactly the plugins Berth's default profile has: its
default profile without the plugins Berth does not implement (read from the registry when
the benchmark runs), so that both sides decide with the same plugins. The installed profile
adds quotas, reservations, load-aware and NUMA plugins: a second row against the same
kube-scheduler figure, run with those kinds' objects present (see :mod:`berth.bench.installed`).

A gang workload names feature gates: kube-scheduler runs with them, and its default profile
then adds its GangScheduling plugin; Berth's default profile adds Coscheduling, which reads
the same PodGroups. The installed profile has Coscheduling already.
"""

from __future__ import annotations

import compileall
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import berth
from berth.run import run_command
from berth.scheduler.config import installed_text, parse
from berth.scheduler.plugins.registry import DEFAULTS, NOT_IMPLEMENTED, QUEUE_SORT, profile_plugins

KUBE_SCHEDULER = "kube-scheduler"
BERTH = "berth"
INSTALLED = "berth-installed"
NOOP = "noop-binder"
SIDES = (KUBE_SCHEDULER, BERTH, INSTALLED, NOOP)
SCHEDULER_NAMES = {
    KUBE_SCHEDULER: "default-scheduler",
    BERTH: "berth-scheduler",
    INSTALLED: "berth-installed",
    NOOP: "bench-noop-binder",
}

KUBE_CYCLE_HISTOGRAM = "scheduler_scheduling_algorithm_duration_seconds"
BERTH_CYCLE_HISTOGRAM = "scheduler_scheduling_attempt_duration_seconds"
GROUP_ATTEMPT_HISTOGRAM = "scheduler_podgroup_scheduling_attempt_duration_seconds"
"""A pod group's attempt, by the same name on both schedulers (kube-scheduler's behind its
gates), read for its ``result="scheduled"`` series."""
KUBE_GANG_PLUGIN = "GangScheduling"
"""What kube-scheduler's default profile adds with the gates on."""
BERTH_GANG_PLUGIN = "Coscheduling"

# kube-scheduler v1.36's default profile (pkg/scheduler/apis/config/v1/default_plugins.go),
# in its order, DynamicResources included (the DRA gate is on by default).
KUBE_DEFAULT_PLUGINS = (
    "SchedulingGates",
    "PrioritySort",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "DefaultPreemption",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "DefaultBinder",
)


def compile_like_the_image() -> None:
    """Berth's modules compiled to bytecode before any trial, as the image's build compiles
    them: a checkout run with ``PYTHONDONTWRITEBYTECODE`` set would compile each one from
    source again at every side's start, a cost an installed Berth never pays."""
    for directory in berth.__path__:
        compileall.compile_dir(directory, quiet=1)


@dataclass(frozen=True)
class Side:
    """How to start one side and what it runs."""

    label: str
    scheduler_name: str
    argv: list[str]
    plugins: tuple[str, ...]
    metrics_url: str | None
    """Where its Prometheus metrics are served (``None``: it has none)."""
    cycle_histogram: tuple[str, dict[str, str]] | None = None
    """The histogram timing its scheduling cycle (filters, scores; no binding), and the
    labels of the series to read."""
    gangs: bool = False
    """It places gangs whole (its gang plugin is on): its group attempts are read."""


def kube_disabled() -> tuple[str, ...]:
    """kube-scheduler's default plugins Berth lacks: disabled on kube-scheduler's side."""
    return tuple(p for p in KUBE_DEFAULT_PLUGINS if p in NOT_IMPLEMENTED)


def kube_plugins() -> tuple[str, ...]:
    return tuple(p for p in KUBE_DEFAULT_PLUGINS if p not in NOT_IMPLEMENTED)


def berth_plugins() -> tuple[str, ...]:
    return (QUEUE_SORT, *(ref.name for ref in DEFAULTS))


def side_plugins(label: str, gates: Sequence[str] = ()) -> tuple[str, ...]:
    """The plugins ``label`` runs; with a gang workload's ``gates``, its gang plugin too."""
    if label == KUBE_SCHEDULER:
        return (*kube_plugins(), KUBE_GANG_PLUGIN) if gates else kube_plugins()
    if label == BERTH:
        return (*berth_plugins(), BERTH_GANG_PLUGIN) if gates else berth_plugins()
    if label == INSTALLED:
        return installed_plugins()
    return ()


def installed_profile() -> dict[str, Any]:
    """The first profile of the configuration Berth's manifests install, as written there."""
    profile: dict[str, Any] = yaml.safe_load(installed_text())["profiles"][0]
    return profile


def installed_plugins() -> tuple[str, ...]:
    return profile_plugins(parse({"profiles": [installed_profile()]}).profiles[0])


def scheduler_configuration(
    side: str, kubeconfig: str, qps: float, burst: int, gangs: bool = False
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration each scheduler is given: the same client QPS and
    burst, no leader election, one profile under the side's scheduler name; with
    ``gangs``, Coscheduling on in Berth's default profile (kube-scheduler's gang plugin
    comes with its feature gates)."""
    profile: dict[str, Any] = {"schedulerName": SCHEDULER_NAMES[side]}
    if side == KUBE_SCHEDULER:
        profile["plugins"] = {
            "multiPoint": {"disabled": [{"name": name} for name in kube_disabled()]}
        }
    elif side == BERTH and gangs:
        profile["plugins"] = {"multiPoint": {"enabled": [{"name": BERTH_GANG_PLUGIN}]}}
    elif side == INSTALLED:
        profile = {**installed_profile(), "schedulerName": SCHEDULER_NAMES[side]}
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": burst},
        "profiles": [profile],
    }


def make_side(
    label: str,
    *,
    kubeconfig: str,
    qps: float,
    burst: int,
    workdir: Path,
    kube_scheduler: Path,
    metrics_port: int,
    gates: Sequence[str] = (),
) -> Side:
    """The command line of ``label``'s process, its configuration written to ``workdir``;
    with a gang workload's feature ``gates``, set up to place its gangs."""
    name = SCHEDULER_NAMES[label]
    gangs = bool(gates)
    if label == NOOP:
        argv = [
            sys.executable,
            "-m",
            "berth.bench.ceiling",
            f"--kubeconfig={kubeconfig}",
            f"--scheduler-name={name}",
            f"--qps={qps}",
            f"--burst={burst}",
        ]
        return Side(label, name, argv, (), None)
    config = workdir / f"{name}{'-gangs' if gangs else ''}.yaml"
    config.write_text(yaml.safe_dump(scheduler_configuration(label, kubeconfig, qps, burst, gangs)))
    if label == KUBE_SCHEDULER:
        argv = [
            str(kube_scheduler),
            f"--config={config}",
            f"--secure-port={metrics_port}",
            "--bind-address=127.0.0.1",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--v=0",
        ]
        if gates:
            argv.append(f"--feature-gates={','.join(f'{gate}=true' for gate in gates)}")
        return Side(
            label,
            name,
            argv,
            side_plugins(label, gates),
            f"https://127.0.0.1:{metrics_port}/metrics",
            # SchedulePod: filters and scores (its attempt histogram includes the binding).
            (KUBE_CYCLE_HISTOGRAM, {}),
            gangs,
        )
    argv = [*run_command(kubeconfig, str(config)), f"--health-address=127.0.0.1:{metrics_port}"]
    return Side(
        label,
        name,
        argv,
        side_plugins(label, gates),
        f"http://127.0.0.1:{metrics_port}/metrics",
        # Berth's attempt: filters, scores, assume and reserve; the binding runs after it.
        (BERTH_CYCLE_HISTOGRAM, {"result": "scheduled"}),
        gangs,
    )
