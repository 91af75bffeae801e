"""``berth demo``: the main job on the local cluster, shown step by step with kubectl."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.paths import REPO_DIR
from berth.run import run_command

MANIFESTS = REPO_DIR / "manifests"
EXAMPLES = REPO_DIR / "docs" / "examples"
KINDS = ("reservations", "elasticquotas", "nodemetrics", "noderesourcetopologies")


def _show(kubectl: Kubectl, *args: str) -> None:
    sys.stdout.write(f"\n$ kubectl {' '.join(args)}\n{kubectl(*args)}")
    sys.stdout.flush()


def _pod(name: str, cpu: str) -> str:
    """A pod for Berth's scheduler asking for ``cpu``, as JSON for kubectl."""
    container = {"name": name, "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "berth-scheduler", "containers": [container]},
        }
    )


def _scheduler_story(kubectl: Kubectl, kubeconfig: str, say: Callable[[str], None]) -> None:
    """Berth's scheduler binds a pod and explains, kube-scheduler style, one it cannot."""
    say("running Berth's scheduler on this machine (kwok nodes run no containers)")
    process = subprocess.Popen(
        run_command(kubeconfig),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kubectl("apply", "-f", "-", stdin=_pod("web", "2"))
        kubectl("apply", "-f", "-", stdin=_pod("too-big", "64"))
        kubectl("wait", "--for=condition=PodScheduled", "--timeout=60s", "pod/web")
        kubectl(
            "wait",
            "--for=jsonpath={.status.conditions[0].reason}=Unschedulable",
            "--timeout=60s",
            "pod/too-big",
        )
        _show(kubectl, "get", "pods", "-o", "wide")
        _show(kubectl, "get", "events", "--field-selector", "involvedObject.name=too-big")
    finally:
        process.terminate()
        process.wait(timeout=30)


def demo(nodes: int, keep: bool, say: Callable[[str], None]) -> int:
    """Bring the local cluster up, install Berth, apply the examples, show each kind."""
    cluster = LocalCluster.default()
    cluster.up(nodes=nodes, say=say)
    try:
        kubectl = Kubectl(str(cluster.kubeconfig))
        say("installing Berth: kubectl apply -k manifests")
        kubectl("apply", "-k", str(MANIFESTS))
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        _show(kubectl, "get", "crds")
        _show(kubectl, "-n", "berth-system", "get", "deployments,daemonsets,configmaps")
        say("applying the examples in docs/examples")
        kubectl("apply", "-f", str(EXAMPLES))
        _show(kubectl, "get", "nodes")
        for kind in KINDS:
            _show(kubectl, "get", kind, "-A")
        _scheduler_story(kubectl, str(cluster.kubeconfig), say)
    finally:
        if keep:
            say(f"cluster left running (--keep); KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.down()
            say("local cluster stopped")
    return 0
