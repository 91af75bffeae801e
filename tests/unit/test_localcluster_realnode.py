"""The real node's configuration and the local cluster's readiness wait, without a cluster."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest

from berth.localcluster import nodeconfig
from berth.localcluster.cluster import count_ready, wait_nodes_ready
from berth.localcluster.errors import ClusterError
from berth.localcluster.nodebridge import Bridge
from berth.localcluster.nodeconfig import NodeLayout


def test_containerd_runs_runc_with_cgroupfs_and_no_negative_oom_score(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path)
    config = tomllib.loads(nodeconfig.containerd_toml(layout, "/usr/lib/cni"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == nodeconfig.PAUSE_IMAGE
    assert cri["netns_mounts_under_state_dir"] is True
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": str(layout.cni_conf_dir)}


def test_the_kubelet_registers_tainted_and_asks_for_no_negative_oom_score(tmp_path: Path) -> None:
    config = nodeconfig.kubelet_configuration(NodeLayout(tmp_path), tmp_path / "ca.crt")
    assert config["registerWithTaints"] == [
        {"key": nodeconfig.NODE_LABEL, "value": "true", "effect": "NoSchedule"}
    ]
    assert config["oomScoreAdj"] == 0
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failCgroupV1"] is False
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["address"] == nodeconfig.NODE_ADDRESS
    argv = nodeconfig.kubelet_argv(Path("/bin/kubelet"), NodeLayout(tmp_path))
    assert f"--node-labels={nodeconfig.NODE_LABEL}=true" in argv
    assert f"--hostname-override={nodeconfig.NODE_NAME}" in argv


def test_the_pods_network_stays_inside_the_node_namespace() -> None:
    bridge, loopback = nodeconfig.cni_conflist()["plugins"]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": nodeconfig.POD_SUBNET}]]
    assert loopback == {"type": "loopback"}


def test_the_api_server_reaches_the_cluster_through_the_bridge_alone(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path)
    selections = {
        s["name"]: s["connection"] for s in nodeconfig.egress_selector(layout)["egressSelections"]
    }
    assert selections["cluster"] == {
        "proxyProtocol": "HTTPConnect",
        "transport": {"uds": {"udsName": str(layout.egress_socket)}},
    }
    assert selections["controlplane"] == {"proxyProtocol": "Direct"}
    assert selections["etcd"] == {"proxyProtocol": "Direct"}


LISTED = """kwok-node-0 True
kwok-node-1 True node.kubernetes.io/not-ready
kwok-node-2 False
other True
"""


def test_a_node_counts_ready_once_ready_and_rid_of_the_not_ready_taint() -> None:
    names = {"kwok-node-0", "kwok-node-1", "kwok-node-2"}
    assert count_ready(LISTED, names) == 1
    assert count_ready(LISTED.replace(" node.kubernetes.io/not-ready", ""), names) == 2
    assert count_ready("", names) == 0


def test_the_wait_lists_once_a_poll_reports_progress_and_gives_up_in_one_line() -> None:
    calls: list[int] = []
    said: list[str] = []

    def listing() -> str:
        calls.append(1)
        return "a True\n" if len(calls) < 3 else "a True\nb True\n"

    wait_nodes_ready(listing, {"a", "b"}, said.append, timeout=30)
    assert len(calls) == 3
    with pytest.raises(ClusterError, match=r"^only 1 of 2 node\(s\) Ready after 0s; see"):
        wait_nodes_ready(lambda: "a True\n", {"a", "b"}, said.append, timeout=0.01)
    with pytest.raises(ClusterError, match="exited before it was Ready"):
        wait_nodes_ready(lambda: "", {"a"}, said.append, timeout=30, alive=lambda: False)


async def test_the_bridge_answers_connect_with_the_target_s_bytes(tmp_path: Path) -> None:
    """The CONNECT proxy end to end on loopback (the namespace step is the same call made
    in a thread that entered it)."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    target = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = target.sockets[0].getsockname()[1]
    bridge = Bridge.__new__(Bridge)  # no namespace: sockets made where the test runs
    bridge._inside = None  # type: ignore[assignment]
    egress = tmp_path / "egress.sock"
    server = await bridge.serve_egress(egress)
    try:
        reader, writer = await asyncio.open_unix_connection(str(egress))
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == (
            b"HTTP/1.1 200 Connection established\r\n\r\n"
        )
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
        writer.close()
        reader, writer = await asyncio.open_unix_connection(str(egress))
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        assert (await reader.readline()).startswith(b"HTTP/1.1 405")
        writer.close()
    finally:
        server.close()
        target.close()
