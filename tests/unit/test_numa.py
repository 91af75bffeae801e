"""NUMA fit and the pending ledger without a cluster: the fingerprint format, pod vs
container scope, Guaranteed vs not, pessimistic pending, and what clears it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from berth.numa.fingerprint import sign
from berth.numa.fit import is_guaranteed, misalignment, node_score
from berth.numa.topology import NodeTopology
from berth.scheduler.framework import CycleState
from berth.scheduler.plugins.noderesourcetopology import NodeResourceTopologyMatch
from tests.unit.scheduler_fixtures import EPOCH, Env, Json, container, info, make_env, node, pod, ts


def test_fingerprint_matches_the_podfingerprint_format() -> None:
    # podfingerprint's own compatibility vector (testdata/compat-tiny-3pods-1ns).
    pods = [
        ("production", "jaeger-dpgjk"),
        ("production", "nginx-rt684"),
        ("production", "envoy-g9m22"),
    ]
    assert sign(pods) == "pfp0v001607b76a0e9d3aeb4"
    assert sign(reversed(pods)) == sign(pods)
    assert sign(pods[:2]) != sign(pods)


def nrt(
    name: str,
    zones: list[str],
    *,
    scope: str = "container",
    policy: str = "single-numa-node",
    fingerprint: str | None = None,
    written: float = 0,
) -> Json:
    attributes = [
        {"name": "topologyManagerPolicy", "value": policy},
        {"name": "topologyManagerScope", "value": scope},
    ]
    if fingerprint is not None:
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name, "managedFields": [{"manager": "updater", "time": ts(written)}]},
        "attributes": attributes,
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "4", "allocatable": "4", "available": cpu},
                    {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"},
                ],
            }
            for i, cpu in enumerate(zones)
        ],
    }


def guaranteed(*cpus: str) -> list[Json]:
    return [
        container(c, "1Gi", name=f"c{i}", limits={"cpu": c, "memory": "1Gi"})
        for i, c in enumerate(cpus)
    ]


def spec(containers: list[Json]) -> Json:
    return {"containers": containers}


def test_legacy_policy_names_are_understood() -> None:
    obj = nrt("n1", ["4"])
    obj["attributes"] = []
    obj["topologyPolicies"] = ["SingleNUMANodePodLevel"]
    topology = NodeTopology.from_object(obj)
    assert (topology.policy, topology.scope) == ("single-numa-node", "pod")


def test_guaranteed_qos() -> None:
    assert is_guaranteed(spec(guaranteed("2")))
    assert not is_guaranteed(spec([container("2", "1Gi")]))  # no limits: Burstable


def test_pod_and_container_scope_differ() -> None:
    two = spec(guaranteed("3", "3"))  # 6 cpu in all, 3 per container; zones of 4
    pod_scope = NodeTopology.from_object(nrt("n1", ["4", "4"], scope="pod"))
    container_scope = NodeTopology.from_object(nrt("n1", ["4", "4"], scope="container"))
    assert misalignment(pod_scope, two, "p", {}) == "cannot align pod: p"
    assert misalignment(container_scope, two, "p", {}) is None
    # Container scope: containers take their share as they are placed.
    three = spec(guaranteed("3", "3", "3"))
    assert misalignment(container_scope, three, "p", {}) == "cannot align container: c2"


def test_only_single_numa_node_is_checked() -> None:
    topology = NodeTopology.from_object(nrt("n1", ["1"], policy="best-effort"))
    assert misalignment(topology, spec(guaranteed("3")), "p", {}) is None


def test_non_guaranteed_pods_align_only_devices() -> None:
    topology = NodeTopology.from_object(nrt("n1", ["1", "1"]))
    burstable = spec([container("3", "1Gi")])
    assert misalignment(topology, burstable, "p", {}) is None


def test_pending_is_subtracted_from_every_zone() -> None:
    topology = NodeTopology.from_object(nrt("n1", ["4", "4"], scope="pod"))
    three = spec(guaranteed("3"))
    assert misalignment(topology, three, "p", {}) is None
    # 3 cpu pending could be in either zone: both look like 1 cpu left.
    assert misalignment(topology, three, "p", {"cpu": 3000}) == "cannot align pod: p"


@pytest.mark.parametrize(("strategy", "best"), [("LeastAllocated", "n2"), ("MostAllocated", "n1")])
def test_score_strategies(strategy: str, best: str) -> None:
    busy = NodeTopology.from_object(nrt("n1", ["2", "2"], scope="pod"))
    idle = NodeTopology.from_object(nrt("n2", ["4", "4"], scope="pod"))
    weights = [("cpu", 1)]
    one = spec(guaranteed("1"))
    scores = {
        "n1": node_score(busy, one, {}, strategy, weights),
        "n2": node_score(idle, one, {}, strategy, weights),
    }
    assert max(scores, key=lambda k: scores[k]) == best


# -- the plugin with the ledger ------------------------------------------------------------

NOW = 3600.0


def env(*objects: Json, pending: bool) -> Env:
    args: dict[str, Any] = {"cacheResyncPeriodSeconds": 5} if pending else {}
    profile = {
        "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
        "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
    }
    return make_env(*objects, profile=profile)


def numa_pod(name: str, cpu: str = "3") -> Json:
    return pod(name, containers=guaranteed(cpu), created=NOW)


def place(made: Env, raw: Json) -> str:
    pending = info(raw)
    target = made.cycle.schedule(CycleState(), pending).node
    made.view.assume(pending, target)
    return target


def test_a_burst_never_overfills_a_zone_with_pending_on() -> None:
    # One node, 3 zones of 4 cpu, 12 cpu in all: the node fits 4 pods of 3 cpu, the zones 3.
    objects = (node("n1", cpu="12", memory="64Gi"), nrt("n1", ["4", "4", "4"], written=NOW - 60))
    off = env(*objects, pending=False)
    assert [place(off, numa_pod(f"p{i}")) for i in range(4)] == ["n1"] * 4  # one too many
    on = env(*objects, pending=True)
    assert place(on, numa_pod("p0")) == "n1"
    # Pessimistic: p0 might be in any zone, so no zone shows 3 cpu until a report.
    assert on.message(numa_pod("p1")) == "0/1 nodes are available: 1 cannot align container: c0."


def test_a_matching_fingerprint_clears_pending_and_a_stale_report_does_not() -> None:
    # Reports written after the placement (which is stamped with the wall clock).
    later = time.time() - EPOCH.timestamp() + 60
    made = env(
        node("n1", cpu="12", memory="64Gi"),
        nrt("n1", ["4", "4", "4"], fingerprint=sign([]), written=NOW - 60),
        pending=True,
    )
    plugin: NodeResourceTopologyMatch = made.plugin("NodeResourceTopologyMatch")
    place(made, numa_pod("p0"))
    assert made.feasible(numa_pod("p1")) == []
    # A newer report that still accounts for no pods: p0 stays pending.
    made.add(nrt("n1", ["4", "4", "4"], fingerprint=sign([]), written=later))
    assert made.feasible(numa_pod("p1")) == []
    # The report that includes p0 (its zone now shows 1 cpu): nothing pending any more.
    made.add(nrt("n1", ["1", "4", "4"], fingerprint=sign([("default", "p0")]), written=later + 1))
    assert made.feasible(numa_pod("p1")) == ["n1"]
    assert plugin.pending(0, "n1", plugin._topologies["n1"]) == {}


def test_without_fingerprint_a_report_newer_than_the_binding_clears_pending() -> None:
    made = env(
        node("n1", cpu="12", memory="64Gi"),
        nrt("n1", ["4", "4", "4"], written=NOW - 60),
        pending=True,
    )
    bound = numa_pod("p0")
    bound["spec"]["nodeName"] = "n1"
    bound["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(NOW)}],
    }
    made.add(bound)  # seen bound by the watch (e.g. after a restart): placed at its binding
    assert made.feasible(numa_pod("p1")) == []
    made.add(nrt("n1", ["1", "4", "4"], written=NOW + 1))
    assert made.feasible(numa_pod("p1")) == ["n1"]
