"""NUMA fit and the pending ledger without a cluster: the fingerprint format, pod vs
container scope, Guaranteed vs not, pessimistic pending, and what clears it."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from berth.api.noderesourcetopology import FINGERPRINT_ANNOTATION as FINGERPRINT
from berth.bench.numa import OFF, ON, ON_WITHOUT_FINGERPRINT, Scenario, simulate
from berth.numa.exclusive import has_exclusive_resources
from berth.numa.fingerprint import sign
from berth.numa.fit import is_guaranteed, misalignment, node_score
from berth.numa.report import follow, updater_write_time
from berth.numa.topology import NodeTopology
from berth.scheduler.framework.interface import CycleState
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
    method: str | None = None,
    written: float = 0,
) -> Json:
    """As an updater writes it; its managedFields entry owns the zones and attributes."""
    attributes = [
        {"name": "topologyManagerPolicy", "value": policy},
        {"name": "topologyManagerScope", "value": scope},
    ]
    if fingerprint is not None:
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
    if method is not None:
        attributes.append({"name": "nodeTopologyPodsFingerprintMethod", "value": method})
    updater = {
        "manager": "updater",
        "operation": "Update",
        "time": ts(written),
        "fieldsV1": {"f:attributes": {}, "f:zones": {}},
    }
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name, "managedFields": [updater]},
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


# -- what counts as a report --------------------------------------------------------------


def touched(obj: Json, manager: str, at: float, **meta: dict[str, str]) -> Json:
    """``obj`` after someone else (``kubectl label``, a controller) writes its metadata."""
    changed = copy.deepcopy(obj)
    fields: Json = {}
    for key, values in meta.items():
        changed["metadata"].setdefault(key, {}).update(values)
        fields[f"f:{key}"] = {f"f:{k}": {} for k in values}
    entry = {
        "manager": manager,
        "operation": "Update",
        "time": ts(at),
        "fieldsV1": {"f:metadata": fields},
    }
    changed["metadata"]["managedFields"].append(entry)
    return changed


def test_only_the_updaters_fields_make_a_report() -> None:
    first = nrt("n1", ["4", "4"], written=100)
    report = follow(None, first, seen_at=EPOCH.timestamp() + 500)
    assert report.at == EPOCH.timestamp() + 100  # the updater's write, not when seen
    labelled = touched(first, "kubectl-label", 200, labels={"rack": "r1"})
    assert updater_write_time(labelled) == EPOCH.timestamp() + 100
    assert follow(report, labelled, seen_at=EPOCH.timestamp() + 600) is report
    annotated = touched(labelled, "other-controller", 300, annotations={"note": "x"})
    assert follow(report, annotated, seen_at=EPOCH.timestamp() + 700) is report
    # The updater writes new zones: a report, at its write time.
    rewritten = nrt("n1", ["1", "4"], written=400)
    rewritten["metadata"]["managedFields"] += annotated["metadata"]["managedFields"][1:]
    assert follow(report, rewritten, seen_at=EPOCH.timestamp() + 800).at == EPOCH.timestamp() + 400
    # A new fingerprint alone is a report too, as is the legacy annotation's.
    with_fingerprint = nrt("n1", ["4", "4"], fingerprint=sign([]), written=500)
    assert follow(report, with_fingerprint, seen_at=0).at == EPOCH.timestamp() + 500
    legacy = touched(first, "old-updater", 600, annotations={FINGERPRINT: sign([])})
    assert follow(report, legacy, seen_at=0).at == EPOCH.timestamp() + 600


def test_without_managed_fields_a_change_is_dated_when_seen() -> None:
    obj = nrt("n1", ["4"])
    del obj["metadata"]["managedFields"]
    assert follow(None, obj, seen_at=42.0).at == 42.0


def later() -> float:
    """Seconds after EPOCH a minute from now: after any placement (stamped with the wall
    clock) made in the test."""
    return time.time() - EPOCH.timestamp() + 60


def bound_at(name: str, at: float, *, cpu: str = "3", containers: list[Json] | None = None) -> Json:
    """A pod seen bound to n1 by the watch, placed at ``at``."""
    raw = pod(name, containers=containers or guaranteed(cpu), created=NOW)
    raw["spec"]["nodeName"] = "n1"
    raw["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(at)}],
    }
    return raw


@pytest.mark.parametrize(
    "fingerprinted", [False, True], ids=["no-fingerprint", "stale-fingerprint"]
)
def test_a_label_on_a_stale_report_does_not_clear_pending(fingerprinted: bool) -> None:
    """The reproduction: ``kubectl label`` on a stale NodeResourceTopology used to count as a
    report (the newest managedFields time of any writer) and drop every pending pod."""
    fingerprint = sign([]) if fingerprinted else None
    stale = nrt("n1", ["4", "4", "4"], fingerprint=fingerprint, written=NOW - 60)
    made = env(node("n1", cpu="12", memory="64Gi"), stale, pending=True)
    assert place(made, numa_pod("p0")) == "n1"
    # Decided: p1 is refused because p0 is pending in every zone.
    assert made.message(numa_pod("p1")) == "0/1 nodes are available: 1 cannot align container: c0."
    made.add(touched(stale, "kubectl-label", later(), labels={"rack": "r1"}))
    assert made.message(numa_pod("p1")) == "0/1 nodes are available: 1 cannot align container: c0."
    made.add(touched(stale, "kubectl-annotate", later() + 1, annotations={"owner": "ops"}))
    assert made.feasible(numa_pod("p1")) == []
    # The updater's own report that includes p0 clears it.
    reported = ["p0"] if fingerprinted else None
    fresh = nrt(
        "n1",
        ["1", "4", "4"],
        fingerprint=None if reported is None else sign([("default", "p0")]),
        written=later() + 2,
    )
    made.add(fresh)
    assert made.feasible(numa_pod("p1")) == ["n1"]


def test_legacy_annotation_fingerprint_is_read() -> None:
    stale = nrt("n1", ["4", "4", "4"], written=NOW - 60)
    legacy = touched(stale, "old-updater", NOW - 60, annotations={FINGERPRINT: sign([])})
    made = env(node("n1", cpu="12", memory="64Gi"), legacy, pending=True)
    plugin: NodeResourceTopologyMatch = made.plugin("NodeResourceTopologyMatch")
    assert plugin._topologies["n1"].fingerprint == sign([])
    assert not plugin._topologies["n1"].exclusive_only
    place(made, numa_pod("p0"))
    assert made.feasible(numa_pod("p1")) == []
    # A newer legacy report that still accounts for no pods: p0 stays pending.
    newer = copy.deepcopy(legacy)
    newer["zones"][2]["resources"][1]["available"] = "7Gi"
    newer["metadata"]["managedFields"][1]["time"] = ts(later())
    made.add(newer)
    assert made.feasible(numa_pod("p1")) == []
    # The legacy fingerprint of all pods, p0 included: matched, nothing pending.
    fresh = nrt("n1", ["1", "4", "4"], written=later() + 1)
    made.add(
        touched(
            fresh, "old-updater", later() + 1, annotations={FINGERPRINT: sign([("default", "p0")])}
        )
    )
    assert made.feasible(numa_pod("p1")) == ["n1"]


@pytest.mark.parametrize(
    ("method", "clears"), [(None, False), ("all", False), ("with-exclusive-resources", True)]
)
def test_the_exclusive_resources_fingerprint_covers_only_those_pods(
    method: str | None, clears: bool
) -> None:
    """n1 runs a Burstable pod (nothing exclusive) and p0 (3 whole cpus, Guaranteed); the
    updater's fingerprint lists p0 only. It matches only when its method says so."""
    shared = bound_at("shared", NOW - 30, containers=[container("500m", "1Gi", name="c0")])
    made = env(
        node("n1", cpu="12", memory="64Gi"),
        nrt("n1", ["4", "4", "4"], written=NOW - 60),
        shared,
        pending=True,
    )
    plugin: NodeResourceTopologyMatch = made.plugin("NodeResourceTopologyMatch")
    place(made, numa_pod("p0"))
    assert made.feasible(numa_pod("p1")) == []
    report = nrt(
        "n1",
        ["1", "4", "4"],
        fingerprint=sign([("default", "p0")]),
        method=method,
        written=NOW - 10,
    )
    made.add(report)  # written before p0 was placed: only the fingerprint can clear it
    assert plugin._topologies["n1"].exclusive_only is clears
    assert made.feasible(numa_pod("p1")) == (["n1"] if clears else [])


def test_which_pods_hold_exclusive_resources() -> None:
    listed = frozenset({"cpu", "memory", "example.com/nic"})
    assert has_exclusive_resources(spec(guaranteed("2")), listed)
    # Guaranteed memory is exclusive even with a fraction of a cpu.
    assert has_exclusive_resources(spec(guaranteed("1500m")), listed)
    burstable = container("2", "1Gi")
    assert not has_exclusive_resources(spec([burstable]), listed)
    nic = container("100m", "1Gi", requests={"example.com/nic": "1"})
    assert has_exclusive_resources(spec([nic]), listed)
    assert not has_exclusive_resources(spec([nic]), frozenset({"cpu"}))  # not in the zones
    # Only restartable init containers count; one-shot ones finish.
    one_shot = {"initContainers": [nic], "containers": [burstable]}
    assert not has_exclusive_resources(one_shot, listed)
    sidecar_nic = container(
        "100m", "1Gi", requests={"example.com/nic": "1"}, restart_policy="Always"
    )
    sidecar = {"initContainers": [sidecar_nic], "containers": [burstable]}
    assert has_exclusive_resources(sidecar, listed)


# -- the benchmark's simulation ----------------------------------------------------------


def test_the_simulation_shows_the_ledgers_effect() -> None:
    """5 nodes (20 zones), 30 pods, reports every 10 s: without the ledger some pods land on
    full zones and fail; with it none do, and the 10 that do not fit wait."""
    small = {"nodes": 5, "pods": 30, "interval": 10.0}
    off = simulate(Scenario(ledger=OFF, **small), seed=3)
    assert off.refused_on_node > 0
    assert off.placed == 20
    for ledger in (ON, ON_WITHOUT_FINGERPRINT):
        on = simulate(Scenario(ledger=ledger, **small), seed=3)
        assert (on.placed, on.refused_on_node, on.waiting) == (20, 0, 10)
        assert on.last_placed > off.last_placed  # the price: placements wait for reports
    assert simulate(Scenario(ledger=OFF, **small), seed=3) == off  # seeded: repeatable


def test_without_fingerprint_pods_without_exclusive_resources_are_never_pending() -> None:
    """A Burstable pod takes nothing from a zone the updater reports, so no report ever
    follows it: counted as pending, it would stay so for good."""
    made = env(
        node("n1", cpu="12", memory="64Gi"),
        nrt("n1", ["4", "4", "4"], written=NOW - 60),
        pending=True,
    )
    plugin: NodeResourceTopologyMatch = made.plugin("NodeResourceTopologyMatch")
    place(made, pod("burst", containers=[container("2", "1Gi")], created=NOW))
    assert plugin.pending(0, "n1", plugin._topologies["n1"]) == {}
    place(made, numa_pod("p0"))
    assert plugin.pending(0, "n1", plugin._topologies["n1"])["cpu"] == 3000
