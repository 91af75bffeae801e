"""Builders for the scheduler unit tests: pods and nodes shaped as the API returns them.

Objects are plain dicts (metadata, spec, status) fed to ``ClusterView`` the way the watches
feed it, and ``Env`` wires one profile (registry, handle, cycle) over that view, so a test
reads like a cluster description followed by one scheduling attempt.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from berth.scheduler.assembly import assemble
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.config import parse
from berth.scheduler.cycle import Cycle, Placement
from berth.scheduler.eventhandlers import EventHandlers
from berth.scheduler.framework.interface import CycleState, Diagnosis, Handle
from berth.scheduler.framework.messages import FitError
from berth.scheduler.framework.runtime import Framework

Json = dict[str, Any]

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
NOW = EPOCH + timedelta(hours=1)  # the scheduler's clock: objects made at ts(0) are an hour old
SCHEDULER = "berth-scheduler"


def ts(seconds: float) -> str:
    """An RFC 3339 timestamp ``seconds`` after a fixed epoch."""
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Json] = (),
    unschedulable: bool = False,
) -> Json:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    spec: Json = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = list(taints)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"node-{name}", "labels": dict(labels or {})},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> Json:
    out: Json = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


def container(
    cpu: str | None = None,
    memory: str | None = None,
    *,
    name: str = "app",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_policy: str | None = None,
    ports: Iterable[Json] = (),
) -> Json:
    wanted: dict[str, str] = dict(requests or {})
    if cpu is not None:
        wanted["cpu"] = cpu
    if memory is not None:
        wanted["memory"] = memory
    resources: Json = {}
    if wanted:
        resources["requests"] = wanted
    if limits:
        resources["limits"] = dict(limits)
    out: Json = {"name": name, "image": "registry.k8s.io/pause:3.9", "resources": resources}
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    if ports:
        out["ports"] = list(ports)
    return out


def host_port(port: int, *, host_ip: str | None = None, protocol: str | None = None) -> Json:
    out: Json = {"containerPort": port, "hostPort": port}
    if host_ip is not None:
        out["hostIP"] = host_ip
    if protocol is not None:
        out["protocol"] = protocol
    return out


def pod(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    namespace: str = "default",
    priority: int = 0,
    node_name: str | None = None,
    created: float = 0,
    started: float | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER,
    phase: str | None = None,
    requests: Mapping[str, str] | None = None,
    containers: Iterable[Json] | None = None,
    init_containers: Iterable[Json] = (),
    ports: Iterable[Json] = (),
    tolerations: Iterable[Json] = (),
    node_selector: Mapping[str, str] | None = None,
    affinity: Json | None = None,
    nominated: str | None = None,
    deleting: bool = False,
    preemption_policy: str | None = None,
    gates: Iterable[str] = (),
    conditions: Iterable[Json] = (),
) -> Json:
    """A pod; bound when ``node_name`` is given (Running unless ``phase`` says otherwise)."""
    if containers is None:
        containers = [container(cpu, memory, requests=requests, ports=ports)]
    spec: Json = {
        "schedulerName": scheduler,
        "priority": priority,
        "containers": list(containers),
    }
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "creationTimestamp": ts(created),
        "labels": dict(labels or {}),
    }
    if deleting:
        metadata["deletionTimestamp"] = ts(created + 3600)
    status: Json = {"phase": phase or ("Running" if node_name else "Pending")}
    if node_name:
        status["startTime"] = ts(created if started is None else started)
    if nominated:
        status["nominatedNodeName"] = nominated
    if conditions:
        status["conditions"] = list(conditions)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def required_affinity(*terms: Json) -> Json:
    """spec.affinity with required node selector terms (ORed)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def preferred_affinity(*weighted: tuple[int, Json]) -> Json:
    """spec.affinity with preferred terms, each (weight, term)."""
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": weight, "preference": term} for weight, term in weighted
            ]
        }
    }


def expr(key: str, operator: str, *values: str) -> Json:
    out: Json = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def pdb(
    name: str, selector: Json, allowed: int, *, namespace: str = "default", **status: Any
) -> Json:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "uid": f"pdb-{name}"},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, **status},
    }


# Volume kinds and the event table's handler of each.
VOLUME_KINDS = {
    "PersistentVolume": "on_pv",
    "PersistentVolumeClaim": "on_pvc",
    "StorageClass": "on_storage_class",
    "CSINode": "on_csi_node",
    "CSIDriver": "on_csi_driver",
    "CSIStorageCapacity": "on_storage_capacity",
}


def storage_class(
    name: str, *, mode: str | None = "WaitForFirstConsumer", provisioner: str = "p.example.com"
) -> Json:
    out: Json = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
    }
    if mode is not None:
        out["volumeBindingMode"] = mode
    return out


def pv(
    name: str,
    *,
    storage_class: str = "",
    size: str = "1Gi",
    modes: Iterable[str] = ("ReadWriteOnce",),
    labels: Mapping[str, str] | None = None,
    on_nodes: Iterable[str] = (),
    claim: tuple[str, str] | None = None,
    phase: str = "Available",
    csi: tuple[str, str] | None = None,
) -> Json:
    """A PersistentVolume; ``on_nodes`` pins it by hostname, ``claim`` binds it."""
    spec: Json = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": storage_class,
    }
    nodes = list(on_nodes)
    if nodes:
        term = {"matchExpressions": [expr("kubernetes.io/hostname", "In", *nodes)]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    if claim is not None:
        namespace, claim_name = claim
        spec["claimRef"] = {"namespace": namespace, "name": claim_name}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase},
    }


def pvc(
    name: str,
    *,
    namespace: str = "default",
    storage_class: str | None = "",
    size: str = "1Gi",
    modes: Iterable[str] = ("ReadWriteOnce",),
    volume: str | None = None,
    annotations: Mapping[str, str] | None = None,
    owner_uid: str | None = None,
) -> Json:
    """A claim; bound (as the PV controller leaves it) when ``volume`` is given."""
    meta: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"pvc-{namespace}-{name}",
        "resourceVersion": "1",
        "annotations": dict(annotations or {}),
    }
    spec: Json = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    status: Json = {"phase": "Pending"}
    if volume is not None:
        spec["volumeName"] = volume
        meta["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        status["phase"] = "Bound"
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def csi_node(name: str, limits: Mapping[str, int], migrated: Iterable[str] = ()) -> Json:
    meta: Json = {"name": name}
    if migrated:
        meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": ",".join(migrated)}
    drivers = [
        {"name": driver, "nodeID": name, "allocatable": {"count": count}}
        for driver, count in limits.items()
    ]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": meta,
        "spec": {"drivers": drivers},
    }


def with_volumes(raw: Json, *volumes: Json | str) -> Json:
    """The pod with these spec.volumes; a plain string is a claim's name."""
    raw["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": v}} if isinstance(v, str) else v
        for i, v in enumerate(volumes)
    ]
    return raw


def info(raw: Json) -> PodInfo:
    return PodInfo.from_pod(raw)


@dataclass
class Env:
    """One profile over one cluster view, as the scheduler service wires them."""

    view: ClusterView
    handle: Handle
    plugins: Framework
    cycle: Cycle
    events: EventHandlers
    book: ReservationBook

    def add(self, *objects: Json) -> Env:
        """Objects arrive as the watches deliver them: through the event table."""
        for obj in objects:
            if obj["kind"] == "Node":
                self.events.on_node("ADDED", obj)
            elif obj["kind"] == "Pod":
                self.events.on_pod("ADDED", obj)
            elif obj["kind"] == "PodDisruptionBudget":
                self.events.on_pdb("ADDED", obj)
            elif obj["kind"] in VOLUME_KINDS:
                getattr(self.events, VOLUME_KINDS[obj["kind"]])("ADDED", obj)
            else:  # Berth's own kinds
                self.events.on_custom(obj["kind"])("ADDED", obj)
        return self

    def plugin(self, name: str) -> Any:
        return self.plugins.instances[name]

    def schedule(self, raw: Json) -> Placement:
        return self.cycle.schedule(CycleState(), info(raw))

    def node_for(self, raw: Json) -> str:
        return self.schedule(raw).node

    def failure(self, raw: Json) -> FitError:
        with pytest.raises(FitError) as caught:
            self.cycle.schedule(CycleState(), info(raw))
        return caught.value

    def message(self, raw: Json) -> str:
        return str(self.failure(raw))

    def diagnose(self, raw: Json) -> tuple[CycleState, PodInfo, Diagnosis]:
        """The failed Filter phase of an attempt, as PostFilter receives it."""
        state = CycleState()
        pod_info = info(raw)
        rows, diagnosis = self.cycle.feasible(state, pod_info)
        assert len(rows) == 0, "expected the pod to fit nowhere"
        return state, pod_info, diagnosis

    def feasible(self, raw: Json) -> list[str]:
        rows, _ = self.cycle.feasible(CycleState(), info(raw))
        return sorted(self.view.nodes.names[int(r)] for r in rows)


def make_env(
    *objects: Json,
    profile: Json | None = None,
    percentage: int | None = None,
    seed: int = 0,
) -> Env:
    config = parse({"profiles": [profile or {}]}).profiles[0]
    parts = assemble([config], percentage_of_nodes_to_score=percentage, rng=random.Random(seed))
    built = parts.profile()
    fwk = built.framework
    fwk.handle.clock = lambda: NOW
    return Env(parts.view, fwk.handle, fwk, built.cycle, parts.events, parts.book).add(*objects)


def scores(env: Env, plugin: str, raw: Json, *names: str) -> list[int]:
    """One score plugin's normalised scores for the named nodes, in that order."""
    nodes = env.view.nodes
    rows = np.array([nodes.index[n] for n in names], dtype=np.int64)
    result = env.plugin(plugin).score(CycleState(), info(raw), nodes, rows)
    return [int(s) for s in result]
