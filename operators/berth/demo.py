"""``berth demo``: the main job on the local cluster, shown step by step with kubectl."""

from __future__ import annotations

import sys
from collections.abc import Callable

from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.paths import REPO_DIR

MANIFESTS = REPO_DIR / "manifests"
EXAMPLES = REPO_DIR / "docs" / "examples"
KINDS = ("reservations", "elasticquotas", "nodemetrics", "noderesourcetopologies")


def _show(kubectl: Kubectl, *args: str) -> None:
    sys.stdout.write(f"\n$ kubectl {' '.join(args)}\n{kubectl(*args)}")
    sys.stdout.flush()


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
    finally:
        if keep:
            say(f"cluster left running (--keep); KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.down()
            say("local cluster stopped")
    return 0
