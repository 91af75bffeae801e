"""What the scheduler's memory and cycle time grow with, in process, without a cluster.

Nodes and bound pods go through the same path the watches feed in ``berth run`` (the
informer's cache, the event table, the view and the plugins' caches, the decision ledger),
shaped as the API server sends them (kwok nodes, ReplicaSet pods with their managed fields,
service-account volume, default tolerations and status), each parsed from its own JSON as
off the wire. Each point runs in a fresh process so that its RSS is its own.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from berth.bench.cycle import place
from berth.bench.stats import percentile

CREATED = "2026-01-01T00:00:00Z"
DEPLOYMENTS = 100  # the bound pods belong to this many ReplicaSets, round robin
PODS_PER_NODE = 10  # bound pods a node when not told
MEASURED = 200  # pending pods scheduled (one cycle each) once the view is full
TOP = 12  # allocation sites shown


def _managed(manager: str, fields: dict[str, Any], subresource: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": CREATED,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _address(index: int) -> str:
    return f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"


def wire_node(index: int) -> dict[str, Any]:
    """A kwok node as the API server lists it: the local cluster's node, with the status
    kwok writes and the managed fields of everyone who wrote it."""
    from berth.localcluster.nodes import node_manifest

    node = node_manifest(index)
    meta, status = node["metadata"], node["status"]
    name = meta["name"]
    meta.update(uid=f"node-uid-{index:08d}", resourceVersion=str(1000 + index))
    meta["creationTimestamp"] = CREATED
    condition_types = (
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    )
    status["conditions"] = [
        {
            "type": kind,
            "status": "True" if kind == "Ready" else "False",
            "lastHeartbeatTime": CREATED,
            "lastTransitionTime": CREATED,
            "reason": "KubeletReady" if kind == "Ready" else f"Kubelet{kind}",
            "message": "kubelet is posting ready status" if kind == "Ready" else "",
        }
        for kind in condition_types
    ]
    status["addresses"] = [
        {"type": "InternalIP", "address": _address(index)},
        {"type": "Hostname", "address": name},
    ]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    status["nodeInfo"] = {
        "architecture": "amd64",
        "kubeletVersion": "fake",
        "kubeProxyVersion": "fake",
        "operatingSystem": "linux",
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kernelVersion": "",
        "osImage": "",
        "containerRuntimeVersion": "",
    }
    status["phase"] = "Running"
    meta["managedFields"] = [
        _managed(
            "berth",
            {"f:metadata": {"f:labels": {f"f:{k}": {} for k in meta["labels"]}}, "f:spec": {}},
        ),
        _managed(
            "kwok",
            {
                "f:status": {
                    "f:addresses": {".": {}},
                    "f:allocatable": {f"f:{k}": {} for k in status["allocatable"]},
                    "f:capacity": {f"f:{k}": {} for k in status["capacity"]},
                    "f:conditions": {
                        f'k:{{"type":"{c}"}}': {
                            ".": {},
                            "f:lastHeartbeatTime": {},
                            "f:lastTransitionTime": {},
                            "f:message": {},
                            "f:reason": {},
                            "f:status": {},
                            "f:type": {},
                        }
                        for c in condition_types
                    },
                    "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}},
                    "f:nodeInfo": {f"f:{k}": {} for k in status["nodeInfo"]},
                    "f:phase": {},
                }
            },
            "status",
        ),
    ]
    wired: dict[str, Any] = orjson.loads(orjson.dumps(node))
    return wired


def wire_pod(index: int, node: str, *, scheduler: str = "default-scheduler") -> dict[str, Any]:
    """A ReplicaSet's pod as the API server lists it: bound to ``node`` and running (kwok
    plays its kubelet) when ``node`` is given, pending otherwise."""
    deployment = f"web-{index % DEPLOYMENTS}"
    template_hash = hashlib.sha1(deployment.encode()).hexdigest()[:10]
    name = f"{deployment}-{template_hash}-{index:06x}"
    token = f"kube-api-access-{index % 100000:05d}"
    meta: dict[str, Any] = {
        "name": name,
        "generateName": f"{deployment}-{template_hash}-",
        "namespace": f"ns-{index % 10}",
        "uid": f"00000000-0000-0000-0000-{index:012d}",
        "resourceVersion": str(100000 + index),
        "creationTimestamp": CREATED,
        "labels": {"app": deployment, "pod-template-hash": template_hash},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{deployment}-{template_hash}",
                "uid": f"rs-uid-{index % DEPLOYMENTS:08d}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            _managed(
                "kube-controller-manager",
                {
                    "f:metadata": {
                        "f:generateName": {},
                        "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                        "f:ownerReferences": {".": {}, 'k:{"uid":"rs"}': {}},
                    },
                    "f:spec": {
                        "f:containers": {
                            'k:{"name":"app"}': {
                                ".": {},
                                "f:image": {},
                                "f:imagePullPolicy": {},
                                "f:name": {},
                                "f:resources": {
                                    ".": {},
                                    "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}},
                                },
                                "f:terminationMessagePath": {},
                                "f:terminationMessagePolicy": {},
                            }
                        },
                        "f:dnsPolicy": {},
                        "f:enableServiceLinks": {},
                        "f:restartPolicy": {},
                        "f:schedulerName": {},
                        "f:securityContext": {},
                        "f:terminationGracePeriodSeconds": {},
                    },
                },
            ),
            _managed(
                "kwok",
                {
                    "f:status": {
                        "f:conditions": {
                            f'k:{{"type":"{c}"}}': {
                                ".": {},
                                "f:lastProbeTime": {},
                                "f:lastTransitionTime": {},
                                "f:status": {},
                                "f:type": {},
                            }
                            for c in ("ContainersReady", "Initialized", "Ready")
                        },
                        "f:containerStatuses": {},
                        "f:hostIP": {},
                        "f:phase": {},
                        "f:podIP": {},
                        "f:podIPs": {".": {}, 'k:{"ip":"10.0.0.1"}': {".": {}, "f:ip": {}}},
                        "f:startTime": {},
                    }
                },
                "status",
            ),
        ],
    }
    spec: dict[str, Any] = {
        "volumes": [
            {
                "name": token,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [
                    {
                        "name": token,
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": scheduler,
        "tolerations": [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node:
        spec["nodeName"] = node
        ip = _address(index)
        status.update(
            phase="Running",
            conditions=[
                {
                    "type": kind,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": CREATED,
                }
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            hostIP="10.0.0.1",
            hostIPs=[{"ip": "10.0.0.1"}],
            podIP=ip,
            podIPs=[{"ip": ip}],
            startTime=CREATED,
            containerStatuses=[
                {
                    "name": "app",
                    "state": {"running": {"startedAt": CREATED}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "",
                    "containerID": f"kwok://{index:064x}",
                    "started": True,
                }
            ],
        )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
    wired: dict[str, Any] = orjson.loads(orjson.dumps(pod))
    return wired


class _Response:
    status = 200

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self) -> bytes:
        return self._body


class Pages:
    """A list call answered as the API server does: ``limit`` objects a page, made as they
    are asked for; without ``limit`` all of them in one body."""

    def __init__(self, count: int, make: Callable[[int], dict[str, Any]]) -> None:
        self.count = count
        self.make = make

    async def __call__(self, **kwargs: Any) -> _Response:
        start = int(kwargs.get("_continue") or 0)
        end = min(self.count, start + int(kwargs.get("limit") or self.count))
        meta = {"resourceVersion": "1", **({"continue": str(end)} if end < self.count else {})}
        # One object at a time: the body, not the server's objects, is what the client holds.
        items = b",".join(orjson.dumps(self.make(i)) for i in range(start, end))
        return _Response(b'{"metadata":%b,"items":[%b]}' % (orjson.dumps(meta), items))


def _site(filename: str) -> str:
    return filename.split("site-packages/")[-1].split("operators/")[-1]


def _rss_kib() -> int:
    """Resident set size now (not the peak), from /proc."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() // 1024


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(nodes: int, pods: int, *, trace: bool) -> dict[str, Any]:
    """One point, in this process: RSS before and after the nodes and the bound pods, the
    cycle time of ``MEASURED`` pending pods, and (with ``trace``) the top allocation sites
    of the pods."""
    from berth.kube.watch import Informer
    from berth.scheduler.assembly import assemble
    from berth.scheduler.cache.podinfo import PodInfo
    from berth.scheduler.config import Profile
    from berth.scheduler.decisions.ledger import DecisionLedger
    from berth.scheduler.queue.scheduling_queue import SchedulingQueue

    queue = SchedulingQueue()
    parts = assemble([Profile()], queue=queue, rng=random.Random(0))
    view, events = parts.view, parts.events
    ledger = DecisionLedger()

    def on_pod(event: str, raw: dict[str, Any]) -> None:
        # What the running scheduler's pod handler does (the writer aside: no API here).
        events.on_pod(event, raw)
        ledger.on_pod(event, raw)

    # As the scheduler service builds them.
    node_informer = Informer(
        "nodes", Pages(nodes, wire_node), events.on_node, drop_managed_fields=True
    )
    names = [f"kwok-node-{i}" for i in range(nodes)]
    pod_informer = Informer(
        "pods",
        Pages(pods, lambda i: wire_pod(i, names[i % nodes])),
        on_pod,
        drop_managed_fields=True,
    )

    gc.collect()
    base = _rss_kib()
    asyncio.run(node_informer._list())
    gc.collect()
    after_nodes = _rss_kib()
    if trace:
        tracemalloc.start(1)
        before_pods = tracemalloc.take_snapshot()
    feed = time.perf_counter()
    asyncio.run(pod_informer._list())
    feed = time.perf_counter() - feed
    gc.collect()
    after_pods = _rss_kib()
    top: list[str] = []
    if trace:
        diff = tracemalloc.take_snapshot().compare_to(before_pods, "lineno")
        tracemalloc.stop()
        top = [
            f"{s.size_diff / max(pods, 1):8.0f} B/pod  {s.count_diff / max(pods, 1):6.2f} "
            f"blocks/pod  {_site(s.traceback[0].filename)}:{s.traceback[0].lineno}"
            for s in diff[:TOP]
        ]

    durations = []
    placements = hashlib.sha256()
    for i in range(MEASURED):
        raw = wire_pod(pods + i, "")
        pod = PodInfo.from_pod(raw)
        t0 = time.perf_counter()
        node = place(parts.profile(), view, pod)
        durations.append(time.perf_counter() - t0)
        placements.update(f"{pod.key}={node}\n".encode())
    return {
        "nodes": nodes,
        "pods": pods,
        "base_mib": base / 1024,
        "per_node_kib": (after_nodes - base) / max(nodes, 1),
        "per_pod_kib": (after_pods - after_nodes) / max(pods, 1),
        "rss_mib": after_pods / 1024,
        "peak_mib": _peak_kib() / 1024,
        "feed_pods_per_s": pods / feed if feed else 0.0,
        "cycle_p50_ms": percentile(durations, 0.5) * 1e3,
        "cycle_p99_ms": percentile(durations, 0.99) * 1e3,
        "digest": placements.hexdigest()[:16],
        "top": top,
    }


def _child(nodes: int, pods: int, trace: bool) -> dict[str, Any]:
    """``measure`` in a fresh interpreter, so that one point's memory is not another's."""
    done = subprocess.run(
        [sys.executable, "-m", "berth.bench.memory", str(nodes), str(pods), str(int(trace))],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def points(node_counts: list[int], pods: int | None) -> list[tuple[int, int]]:
    """(nodes, bound pods) of each point: ``pods``, or ``PODS_PER_NODE`` a node."""
    return [(nodes, pods if pods is not None else nodes * PODS_PER_NODE) for nodes in node_counts]


def memory_bench(points: list[tuple[int, int]], repeats: int) -> str:
    """Each point ``repeats`` times (medians printed), then the smallest once more under
    tracemalloc for the allocation sites of the pods (tracing slows the run and costs
    memory itself, so the figures above it are from untraced runs)."""
    lines = [
        f"{'nodes':>6} {'pods':>7} {'KiB/node':>9} {'KiB/pod':>8} {'RSS MiB':>8} "
        f"{'peak MiB':>9} {'list pods/s':>12} {'cycle p50':>10} {'p99 ms':>7}  digest"
    ]
    traced: list[str] = []
    for nodes, pods in points:
        runs = [_child(nodes, pods, False) for _ in range(repeats)]

        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return percentile(sorted(float(r[key]) for r in runs), 0.5)

        digests = sorted({r["digest"] for r in runs})
        lines.append(
            f"{nodes:>6} {pods:>7} {median('per_node_kib'):>9.2f} {median('per_pod_kib'):>8.2f} "
            f"{median('rss_mib'):>8.1f} {median('peak_mib'):>9.1f} "
            f"{median('feed_pods_per_s'):>12.0f} {median('cycle_p50_ms'):>7.2f} ms "
            f"{median('cycle_p99_ms'):>7.2f}  {','.join(digests)}"
        )
        if not traced:
            top = _child(nodes, pods, True)["top"]
            traced += [f"allocation sites of the pods at {nodes} nodes, {pods} pods:", *top]
    return "\n".join([*lines, *traced])


if __name__ == "__main__":
    result = measure(int(sys.argv[1]), int(sys.argv[2]), trace=sys.argv[3] == "1")
    sys.stdout.write(json.dumps(result) + "\n")
