"""NodePorts: host ports in use on a node, with kube-scheduler's conflict rules."""

from __future__ import annotations

import pytest

from tests.unit.scheduler_fixtures import (
    Json,
    container,
    host_port,
    make_env,
    node,
    pod,
)

Mi = 1024**2
Gi = 1024**3


# -- NodePorts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "wanted", "conflict"),
    [
        (host_port(8080), host_port(8080), True),
        (host_port(8080), host_port(8080, protocol="UDP"), False),
        (host_port(8080), host_port(8081), False),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="10.0.0.2"), False),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="10.0.0.1"), True),
        (host_port(8080, host_ip="10.0.0.1"), host_port(8080, host_ip="0.0.0.0"), True),
        (host_port(8080, host_ip="0.0.0.0"), host_port(8080, host_ip="10.0.0.1"), True),
        (host_port(8080, host_ip=""), host_port(8080, host_ip="10.0.0.3"), True),
        (
            host_port(8080, host_ip="10.0.0.1", protocol="UDP"),
            host_port(8080, host_ip="10.0.0.1", protocol="TCP"),
            False,
        ),
        (host_port(53, protocol="SCTP"), host_port(53, protocol="SCTP"), True),
    ],
    ids=[
        "same",
        "other-protocol",
        "other-port",
        "other-ip",
        "same-ip",
        "wanted-any-ip",
        "used-any-ip",
        "empty-ip-is-any",
        "same-ip-other-protocol",
        "sctp",
    ],
)
def test_host_ports(used: Json, wanted: Json, conflict: bool) -> None:
    env = make_env(node("n1"), pod("holder", "1", ports=[used], node_name="n1"))
    if conflict:
        assert env.message(pod("p", "1", ports=[wanted])) == (
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        )
    else:
        assert env.node_for(pod("p", "1", ports=[wanted])) == "n1"


def test_container_ports_without_host_port_never_conflict() -> None:
    plain = {"containerPort": 8080}
    env = make_env(node("n1"), pod("holder", "1", ports=[plain], node_name="n1"))
    assert env.node_for(pod("p", "1", ports=[plain])) == "n1"


def test_host_port_is_free_again_after_the_pod_is_deleted() -> None:
    holder = pod("holder", "1", ports=[host_port(80)], node_name="n1")
    env = make_env(node("n1"), holder)
    env.events.on_pod("DELETED", holder)
    assert env.node_for(pod("p", "1", ports=[host_port(80)])) == "n1"


def test_sidecar_host_ports_count() -> None:
    holder = pod(
        "holder",
        node_name="n1",
        containers=[container("100m")],
        init_containers=[
            container(name="proxy", restart_policy="Always", ports=[host_port(15000)])
        ],
    )
    env = make_env(node("n1"), holder)
    assert env.feasible(pod("p", "1", ports=[host_port(15000)])) == []


def test_one_shot_init_container_host_ports_do_not_count() -> None:
    # kube-scheduler takes host ports from containers and restartable init containers
    # only (nodeports plugin, kubernetes#132040): a finished init container holds none.
    holder = pod(
        "holder",
        node_name="n1",
        containers=[container("100m")],
        init_containers=[container(name="setup", ports=[host_port(9000)])],
    )
    env = make_env(node("n1"), holder)
    assert env.feasible(pod("p", "1", ports=[host_port(9000)])) == ["n1"]
