"""`berth cluster up` gives Ready nodes; `berth cluster down` leaves no process behind.

A second local cluster in a directory of its own (free ports, its own PKI), next to the
cluster the session tests against.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from berth.localcluster import netns
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.nodeconfig import NETNS


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_up_then_down_leaves_no_process(tmp_path: Path) -> None:
    session_node_network = netns.exists(NETNS)
    cluster = LocalCluster(tmp_path / "cluster")
    started = time.monotonic()
    cluster.up(nodes=2)
    try:
        assert time.monotonic() - started < 60
        assert cluster.is_up()
        out = Kubectl(str(cluster.kubeconfig))("get", "nodes", "--no-headers")
        rows = [line.split() for line in out.splitlines()]
        assert [(r[0], r[1]) for r in rows] == [("kwok-node-0", "Ready"), ("kwok-node-1", "Ready")]
        pids = [p["pid"] for p in json.loads((tmp_path / "cluster" / "processes.json").read_text())]
        assert len(pids) == 3
        assert all(_alive(pid) for pid in pids)
    finally:
        cluster.down()
    assert not any(_alive(pid) for pid in pids)
    assert not cluster.is_up()
    assert not (tmp_path / "cluster" / "data" / "etcd").exists()
    # The session cluster's real-node network (machine-wide names) is not this one's to remove.
    assert netns.exists(NETNS) == session_node_network
