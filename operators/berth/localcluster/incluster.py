"""Berth installed in the local cluster as users install it: its image loaded into the real
node, ``kubectl apply -k`` of the manifests (through the local overlay,
tools/localcluster/install), and the controller and the agent running there as pods.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from berth.image.build import ensure_image
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.errors import ClusterError
from berth.localcluster.kubectl import Kubectl, KubectlError
from berth.localcluster.paths import REPO_DIR, TOOLS_DIR

OVERLAY = TOOLS_DIR / "install"
MANIFESTS = REPO_DIR / "manifests"
NAMESPACE = "berth-system"
CONTROLLER = "berth-controller"
AGENT = "berth-agent"
LEASE = "berth-controller"
READY_TIMEOUT = 240.0
"""Two controller replicas and the agent started from the image, informers synced and a
leader elected, on a loaded two-core machine."""
POLL = 1.0


class InstallError(ClusterError):
    """Berth did not come up in the cluster; the message says what was seen last."""


@dataclass(frozen=True)
class Installed:
    """What is running: the real node and the leader's pod."""

    node: str
    leader: str


def install(
    cluster: LocalCluster, say: Callable[[str], None], kustomization: Path = OVERLAY
) -> Installed:
    """The image built (or reused) and loaded, the manifests applied, and everything Ready."""
    archive = ensure_image(say)
    node = cluster.start_real_node([archive], say)
    kubectl = Kubectl(str(cluster.kubeconfig))
    say(
        f"installing Berth: kubectl apply -k {kustomization.name} (the manifests, {node} tolerated)"
    )
    apply(kubectl, kustomization)
    leader = wait_ready(kubectl, say)
    return Installed(node, leader)


def apply(kubectl: Kubectl, kustomization: Path) -> None:
    """``kubectl apply -k``, once more when the first pass created the CRDs whose objects
    the same pass could not yet map (none today, but an overlay may add some)."""
    try:
        kubectl("apply", "-k", str(kustomization))
    except KubectlError as err:
        if "ensure CRDs are installed first" not in str(err):
            raise
        time.sleep(2.0)
        kubectl("apply", "-k", str(kustomization))


def report_often(kubectl: Kubectl, node: str, seconds: int) -> None:
    """A ``nodeConfigs`` entry in slo-controller-config: ``node``'s agent reports every
    ``seconds`` the mean of those seconds (the installed defaults are every 60 s, the mean
    of 300 s, which a few busy seconds hardly move)."""
    configmap = yaml.safe_load((MANIFESTS / "slo-controller-config.yaml").read_text())
    colocation = json.loads(configmap["data"]["colocation-config"])
    colocation["nodeConfigs"] = [
        {
            "name": "report-often",
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
            "metricReportIntervalSeconds": seconds,
            "metricAggregateDurationSeconds": seconds,
        }
    ]
    patch = json.dumps({"data": {"colocation-config": json.dumps(colocation, indent=2)}})
    kubectl("-n", NAMESPACE, "patch", "configmap", "slo-controller-config", "-p", patch)


def uninstall(cluster: LocalCluster, kustomization: Path = OVERLAY) -> None:
    """Everything the manifests made, waited for: the next install starts clean."""
    kubectl = Kubectl(str(cluster.kubeconfig))
    kubectl("delete", "-k", str(kustomization), "--ignore-not-found", "--wait=true", timeout=300)


def wait_ready(kubectl: Kubectl, say: Callable[[str], None]) -> str:
    """Until every controller replica and agent pod is Ready and a replica holds the
    lease; returns the leader's pod name."""
    deadline = time.monotonic() + READY_TIMEOUT
    last = ""
    while True:
        seen = status(kubectl)
        if seen.ready():
            say(f"Berth running: {seen}")
            return seen.leader
        if str(seen) != last:
            last = str(seen)
            say(f"  waiting for Berth: {seen}")
        if time.monotonic() > deadline:
            raise InstallError(
                f"Berth not ready after {READY_TIMEOUT:.0f}s: {seen}; "
                f"see kubectl -n {NAMESPACE} get pods,events"
            )
        time.sleep(POLL)


@dataclass(frozen=True)
class Status:
    """The controller's and the agent's readiness and the lease's holder."""

    controller_ready: int
    controller_wanted: int
    agent_ready: int
    agent_wanted: int
    leader: str

    def ready(self) -> bool:
        return (
            self.controller_wanted > 0
            and self.controller_ready == self.controller_wanted
            and self.agent_wanted > 0
            and self.agent_ready == self.agent_wanted
            and bool(self.leader)
        )

    def __str__(self) -> str:
        return (
            f"{CONTROLLER} {self.controller_ready}/{self.controller_wanted} ready, "
            f"{AGENT} {self.agent_ready}/{self.agent_wanted} ready, "
            f"leader {self.leader or '(none yet)'}"
        )


def status(kubectl: Kubectl) -> Status:
    def get(*args: str) -> Any:
        try:
            return json.loads(kubectl("-n", NAMESPACE, "get", *args, "-o", "json"))
        except KubectlError:
            return {}

    deployment = get("deployment", CONTROLLER)
    daemonset = get("daemonset", AGENT).get("status", {})
    holder = get("lease", LEASE).get("spec", {}).get("holderIdentity") or ""
    return Status(
        controller_ready=deployment.get("status", {}).get("readyReplicas", 0),
        controller_wanted=deployment.get("spec", {}).get("replicas", 0),
        agent_ready=daemonset.get("numberReady", 0),
        agent_wanted=daemonset.get("desiredNumberScheduled", 0),
        leader=holder.split("_", 1)[0],
    )
