"""`kubectl berth why` with the real kubectl, against one `berth run` for the whole file.

The scheduler's HTTP port is reached the way users reach it: through the API server's
service proxy, here a selectorless Service whose Endpoints point at the `berth run`
process, run in the local cluster's node network namespace on the node's address (the API
server refuses loopback endpoints, proxies only to an address a Pod of the Service's
namespace reports as its own, and reaches that namespace through the node bridge). Each
test blocks a pod for one cause, waits until the scheduler has said so on the pod, then
checks that the report names the cause with its numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import (
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from berth.localcluster import netns, nodeconfig
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from tests.integration.cluster import Nodes, Pods, pod_body
from tests.integration.processes import BerthRun
from tests.integration.test_loadaware import Cluster as LoadCluster
from tests.integration.test_numa import Numa
from tests.support import REPO, eventually

SCHEDULER = f"why-{uuid.uuid4().hex[:8]}"
AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
RBAC = "rbac.authorization.k8s.io"
QUOTAS = ("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas")
RESERVATIONS = ("scheduling.koordinator.sh", "v1alpha1", "reservations")
CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": False},
    "podInitialBackoffSeconds": 0.5,
    "podMaxBackoffSeconds": 2,
    "profiles": [
        {
            "schedulerName": SCHEDULER,
            "plugins": {
                "multiPoint": {
                    "enabled": [
                        {"name": "CapacityScheduling"},
                        {"name": "Reservation"},
                        {"name": "LoadAwareScheduling"},
                        {"name": "NodeResourceTopologyMatch"},
                    ],
                    "disabled": [{"name": "DefaultPreemption"}],
                }
            },
            "pluginConfig": [
                {"name": "NodeResourceTopologyMatch", "args": {"cacheResyncPeriodSeconds": 5}}
            ],
        }
    ],
}


def short(namespace: str) -> str:
    return "wp-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


@pytest.fixture(scope="module")
def scheduler_address(
    kubeconfig_path: str, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """One `berth run` (scheduler only) serving HTTP on the node's address, inside the
    node's network namespace, talking to the API server through the node bridge."""
    if not netns.exists(nodeconfig.NETNS):
        pytest.skip("needs the local cluster's node network (the cluster started as root)")
    host, port = nodeconfig.NODE_ADDRESS, random.randint(20000, 30000)
    directory = tmp_path_factory.mktemp("why")
    inside = directory / "kubeconfig"
    config = yaml.safe_load(Path(kubeconfig_path).read_text())
    server = f"https://{nodeconfig.SERVICE_ADDRESS}:{nodeconfig.SERVICE_PORT}"
    config["clusters"][0]["cluster"]["server"] = server
    inside.write_text(yaml.safe_dump(config))
    run = BerthRun.configured(str(inside), CONFIG, directory, operators=False)
    run.command = netns.command(
        nodeconfig.NETNS,
        [
            f"--health-address={host}:{port}" if arg.startswith("--health-address=") else arg
            for arg in run.command
        ],
    )
    run.start()
    egress = LocalCluster.default().node.egress_socket
    try:
        deadline = time.monotonic() + 120
        while get_inside(egress, host, port, "/readyz") != 200:
            if time.monotonic() > deadline:
                raise AssertionError(f"berth run not ready in 120 s: {run.log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield host, port
    finally:
        run.stop()


def get_inside(egress: Path, host: str, port: int, path: str) -> int:
    """The status of a GET to ``host:port`` in the node's namespace, through the node
    bridge's CONNECT proxy (0 when it cannot be reached)."""
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(egress))
            sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            if not sock.recv(1024).startswith(b"HTTP/1.1 200"):
                return 0
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            return int(sock.recv(1024).split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@pytest.fixture(scope="module")
async def scheduler_service(
    api: ApiClient, scheduler_address: tuple[str, int]
) -> AsyncIterator[str]:
    """A Service (and its Endpoints) in front of the scheduler's port: NAMESPACE/NAME:PORT."""
    host, port = scheduler_address
    core = CoreV1Api(api)
    namespace = f"berth-why-{uuid.uuid4().hex[:8]}"
    await core.create_namespace({"metadata": {"name": namespace}})
    service: Any = {
        "metadata": {"name": "berth-scheduler"},
        "spec": {"ports": [{"name": "http", "port": 10251, "targetPort": port}]},
    }
    # The API server proxies only to an endpoint whose target Pod has the endpoint's IP:
    # a stand-in Pod that no scheduler serves, whose status says it has this machine's.
    stand_in: Any = pod_body("berth-scheduler", "no-scheduler-serves-this")
    await core.create_namespaced_pod(namespace, stand_in)
    status = {"status": {"podIP": host, "podIPs": [{"ip": host}]}}
    await core.patch_namespaced_pod_status("berth-scheduler", namespace, status)
    target = {"kind": "Pod", "namespace": namespace, "name": "berth-scheduler"}
    endpoints: Any = {
        "metadata": {"name": "berth-scheduler"},
        "subsets": [
            {
                "addresses": [{"ip": host, "targetRef": target}],
                "ports": [{"name": "http", "port": port}],
            }
        ],
    }
    await core.create_namespaced_service(namespace, service)
    await core.create_namespaced_endpoints(namespace, endpoints)
    try:
        yield f"{namespace}/berth-scheduler:http"
    finally:
        await core.delete_namespace(namespace)


class KubectlBerth:
    """The real kubectl, with the plugin on PATH, and KUBECONFIG set as a user would."""

    def __init__(self, kubeconfig: str, service: str) -> None:
        self.binary = str(Kubectl(kubeconfig).binary)
        self.service = service
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": kubeconfig,
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "berth", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    async def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``kubectl berth ARGS`` through this test's scheduler Service."""
        service = f"--scheduler-service={self.service}"
        return await asyncio.to_thread(self.run, *args, service)

    async def why(self, namespace: str, pod: str) -> str:
        result = await self("why", pod, "-n", namespace)
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture
def kubectl_berth(kubeconfig_path: str, scheduler_service: str) -> KubectlBerth:
    return KubectlBerth(kubeconfig_path, scheduler_service)


async def refused(pods: Pods, name: str, words: str, within: float = 90) -> str:
    """Until the pod's PodScheduled condition carries ``words``; returns the message."""
    seen = [""]

    async def says() -> bool:
        pod = await pods.get(name)
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled":
                seen[0] = condition.message or ""
        return words in seen[0]

    try:
        await eventually(says, within)
    except AssertionError as err:
        raise AssertionError(f"{name}: PodScheduled says {seen[0]!r}, not {words!r}") from err
    return seen[0]


@pytest.fixture
async def nodes(api: ApiClient, namespace: str) -> AsyncIterator[Nodes]:
    made = Nodes(api, short(namespace))
    try:
        yield made
    finally:
        await made.delete_all()


def grouped(nodes: Nodes) -> dict[str, str]:
    return {"berth.test/group": nodes.prefix}


async def test_node_fit(
    api: ApiClient, namespace: str, nodes: Nodes, kubectl_berth: KubectlBerth
) -> None:
    node = await nodes.add("small", labels=grouped(nodes), allocatable={"cpu": "1", "pods": "110"})
    pods = Pods(api, namespace)
    await pods.create(pod_body("big", SCHEDULER, cpu="2", nodeSelector=grouped(nodes)))
    await refused(pods, "big", "Insufficient cpu")
    report = await kubectl_berth.why(namespace, "big")
    assert f"Pod {namespace}/big is pending" in report
    assert re.search(
        rf"\b1 node\(s\)  NodeResourcesFit +Insufficient cpu  \(e\.g\. {node}\)", report
    )
    assert re.search(r"NodeAffinity +node\(s\) didn't match Pod's node affinity/selector", report)
    assert "free capacity or more nodes (Insufficient cpu on 1 node(s))" in report


async def quota(api: ApiClient, namespace: str, minimum: str, maximum: str) -> None:
    body = {
        "apiVersion": f"{QUOTAS[0]}/{QUOTAS[1]}",
        "kind": "ElasticQuota",
        "metadata": {"name": "quota"},
        "spec": {"min": {"cpu": minimum}, "max": {"cpu": maximum}},
    }
    await CustomObjectsApi(api).create_namespaced_custom_object(
        *QUOTAS[:2], namespace, QUOTAS[2], body
    )


async def test_quota_max(api: ApiClient, namespace: str, kubectl_berth: KubectlBerth) -> None:
    await quota(api, namespace, "1", "2")
    pods = Pods(api, namespace)
    await pods.create(pod_body("over", SCHEDULER, cpu="3"))
    await refused(pods, "over", "more than Max")
    report = await kubectl_berth.why(namespace, "over")
    assert "Refused before any node was looked at, by CapacityScheduling:" in report
    assert f"ElasticQuota {namespace} is more than Max (cpu: 0 used + 3 requested > 2)" in report
    assert f"Quota {namespace}/quota (ElasticQuota):" in report
    assert "cpu: used 0 + nominated 0 + requested 3  (min 1, max 2)" in report
    assert "verdict: OverMax on cpu" in report
    assert f"quota {namespace}/quota: cpu max is 2" in report
    # The same, for scripts.
    result = await kubectl_berth("why", "over", "-n", namespace, "--output", "json")
    decision = json.loads(result.stdout)["decision"]
    assert decision["details"]["CapacityScheduling"]["resources"]["cpu"]["max"] == "2"
    quotas = await kubectl_berth("quota", "-n", namespace)
    assert quotas.returncode == 0, quotas.stderr
    assert quotas.stdout.splitlines()[1].split() == [namespace, "quota", "cpu", "0", "1", "2"]


async def test_sum_of_mins(api: ApiClient, namespace: str, kubectl_berth: KubectlBerth) -> None:
    await quota(api, namespace, "1", "1000")
    pods = Pods(api, namespace)
    await pods.create(pod_body("borrower", SCHEDULER, cpu="500"))
    await refused(pods, "borrower", "total ElasticQuota used is more than Min")
    report = await kubectl_berth.why(namespace, "borrower")
    # Σmin counts every quota in the cluster (another test's may still be going away):
    # the report's own figures must agree with the refusal it quotes.
    refusal = re.search(
        r"total ElasticQuota used is more than Min \(cpu: (\S+) used \+ 500 requested > (\S+)\)",
        report,
    )
    assert refusal is not None, report
    used, total_min = refusal.groups()
    assert float(total_min) < 500
    assert f"all quotas, cpu: Σused {used} + Σnominated 0  (Σmin {total_min})" in report
    assert "verdict: OverMinTotal on cpu" in report
    assert f"(Σused {used}, Σmin {total_min})" in report


async def reserve(
    custom: CustomObjectsApi, nodes: Nodes, name: str, cpu: str, app: str, labels: dict[str, str]
) -> None:
    """A Reservation on the test's nodes for the pods labelled ``app``, once Available."""
    body = {
        "apiVersion": f"{RESERVATIONS[0]}/{RESERVATIONS[1]}",
        "kind": "Reservation",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "nodeSelector": grouped(nodes),
                    "containers": [
                        {"name": "c", "image": "registry.local/app",
                         "resources": {"requests": {"cpu": cpu}}}
                    ],
                }
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": app}}}],
        },
    }  # fmt: skip
    await custom.create_cluster_custom_object(*RESERVATIONS, body)

    async def available() -> bool:
        obj = await custom.get_cluster_custom_object(*RESERVATIONS, name)
        return bool((obj.get("status") or {}).get("phase") == "Available")

    await eventually(available, 90)


async def test_reservation_affinity(
    api: ApiClient, namespace: str, nodes: Nodes, kubectl_berth: KubectlBerth
) -> None:
    await nodes.add("r", labels=grouped(nodes), allocatable={"cpu": "4", "pods": "110"})
    custom = CustomObjectsApi(api)
    gold = f"{nodes.prefix}-gold"
    await reserve(custom, nodes, gold, "1", nodes.prefix, {"tier": "gold"})
    try:
        pods = Pods(api, namespace)
        owner = pod_body(
            "owner", SCHEDULER, cpu="1", labels={"app": nodes.prefix}, nodeSelector=grouped(nodes)
        )
        owner["metadata"]["annotations"] = {
            AFFINITY: json.dumps({"reservationSelector": {"tier": "silver"}})
        }
        await pods.create(owner)
        await refused(pods, "owner", "no Reservation matches the pod's reservation-affinity")
        report = await kubectl_berth.why(namespace, "owner")
        assert "Refused before any node was looked at, by Reservation:" in report
        assert "Reservations considered (reservation-affinity: tier=silver):" in report
        assert re.search(
            rf"{gold} on {nodes.prefix}-r: does not match the pod's reservation-affinity  "
            r"\[left: cpu=1",
            report,
        ), report
        held = (await kubectl_berth("reservations", f"{nodes.prefix}-r")).stdout.splitlines()
        assert held[1].split()[:4] == [gold, f"{nodes.prefix}-r", "Available", "cpu=1"]
    finally:
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(*RESERVATIONS, gold)


async def test_reservations_holding_what_the_pod_lacks(
    api: ApiClient, namespace: str, nodes: Nodes, kubectl_berth: KubectlBerth
) -> None:
    """An otherwise empty 2-cpu node where a Reservation holds 1500m for other owners: a
    1-cpu pod there is told which reservation holds the room, for whom, and what is free."""
    node = await nodes.add("h", labels=grouped(nodes), allocatable={"cpu": "2", "pods": "110"})
    custom = CustomObjectsApi(api)
    held = f"{nodes.prefix}-held"
    await reserve(custom, nodes, held, "1500m", f"{nodes.prefix}-other", {})
    try:
        pods = Pods(api, namespace)
        await pods.create(pod_body("lacking", SCHEDULER, cpu="1", nodeSelector=grouped(nodes)))
        await refused(pods, "lacking", "Insufficient cpu")
        report = await kubectl_berth.why(namespace, "lacking")
        assert "Reservations holding what the pod lacks (for their owners only):" in report
        assert (
            f"  {node} (free after them: cpu=500m): {held} holds cpu=1500m for pods labelled "
            f"app={nodes.prefix}-other"
        ) in report, report
        assert f"reserved for others: Reservation {held} on {node}" in report
    finally:
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(*RESERVATIONS, held)


async def test_load_threshold(api: ApiClient, namespace: str, kubectl_berth: KubectlBerth) -> None:
    load = LoadCluster(api, short(namespace))
    try:
        hot = await load.node("hot")  # 4 cpu, 3 reported: 75% > 65%
        await load.report(hot, "3")
        pods = Pods(api, namespace)
        await pods.create(load.pod("busy", SCHEDULER, cpu="1"))
        await refused(pods, "busy", "cpu usage exceed threshold")
        report = await kubectl_berth.why(namespace, "busy")
        assert re.search(
            r"1 node\(s\)  LoadAwareScheduling +node\(s\) cpu usage exceed threshold", report
        )
        figures = (
            rf"{hot}: usage cpu 75% > 65% \(3 of 4\), memory \d+% <= 95% \([^)]*\); "
            r"report [\d.]+s old: node\(s\) cpu usage exceed threshold"
        )
        assert re.search(figures, report), report
        assert "wait for the load to drop" in report
        top = json.loads((await kubectl_berth("top", "nodes", "-o", "json")).stdout)
        (row,) = [r for r in top["nodes"] if r["node"] == hot]
        assert (row["cpu%"], row["cpu_threshold"], row["state"]) == ("75%", "65%", "over threshold")
    finally:
        await load.close()


async def test_numa(api: ApiClient, namespace: str, kubectl_berth: KubectlBerth) -> None:
    numa = Numa(api, short(namespace))
    await numa.add()
    try:
        await numa.report(["2", "2", "2"])
        numa.reported = True
        pods = Pods(api, namespace)
        await pods.create(numa.pod("aligned", SCHEDULER, cpus=("3",)))
        await refused(pods, "aligned", "cannot align container: c0")
        report = await kubectl_berth.why(namespace, "aligned")
        assert re.search(r"NodeResourceTopologyMatch +cannot align container: c0", report)
        assert (
            f"{numa.node} (container scope): cannot align container: c0; "
            "zones: node-0 cpu=2; node-1 cpu=2; node-2 cpu=2"
        ) in report
    finally:
        await numa.close()


async def test_errors_are_one_clear_line(
    api: ApiClient, namespace: str, kubectl_berth: KubectlBerth, kubeconfig_path: str
) -> None:
    missing = await kubectl_berth("why", "nobody", "-n", namespace)
    assert missing.returncode == 1
    assert missing.stderr == f"error: pod {namespace}/nobody not found\n"
    pods = Pods(api, namespace)
    await pods.create(pod_body("p", SCHEDULER, cpu="1", nodeSelector={"none": "such"}))
    await refused(pods, "p", "didn't match Pod's node affinity/selector")
    nowhere = await asyncio.to_thread(
        kubectl_berth.run, "why", "p", "-n", namespace, f"--kubeconfig={kubeconfig_path}",
        "--scheduler-service=berth-nowhere/none:http",
    )  # fmt: skip
    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith("error: scheduler unreachable")
    assert nowhere.stderr.count("\n") == 1


def reader_role(namespace: str) -> Any:
    """The manifests' berth-decisions-reader Role, in the test's scheduler namespace."""
    path = REPO / "manifests" / "rbac-decisions-reader.yaml"
    role = yaml.safe_load(path.read_text())
    role["metadata"]["namespace"] = namespace
    return role


def token_kubeconfig(admin: str, token: str, path: Path) -> str:
    """The admin kubeconfig's cluster, with a ServiceAccount's token as the user."""
    config = yaml.safe_load(Path(admin).read_text())
    cluster = config["clusters"][0]
    config["users"] = [{"name": "reader", "user": {"token": token}}]
    config["contexts"] = [
        {"name": "reader", "context": {"cluster": cluster["name"], "user": "reader"}}
    ]
    config["current-context"] = "reader"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_rbac_on_services_proxy_decides_who_may_read_records(
    api: ApiClient,
    namespace: str,
    kubectl_berth: KubectlBerth,
    kubeconfig_path: str,
    tmp_path: Path,
) -> None:
    core = CoreV1Api(api)
    rbac = RbacAuthorizationV1Api(api)
    service_namespace = kubectl_berth.service.split("/")[0]
    pods = Pods(api, namespace)
    await pods.create(pod_body("p", SCHEDULER, cpu="1", nodeSelector={"none": "such"}))
    await refused(pods, "p", "didn't match Pod's node affinity/selector")
    # A user who may read pods in their namespace, and nothing of the scheduler.
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    subject = [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]
    await rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "pod-reader"},
            "subjects": subject,
        },
    )
    issued = await core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    )
    reader = token_kubeconfig(kubeconfig_path, issued.status.token, tmp_path / "reader")
    as_reader = ("why", "p", "-n", namespace, f"--kubeconfig={reader}")

    async def denied() -> bool:
        result = await kubectl_berth(*as_reader)
        return result.returncode == 1 and "no access to the scheduler" in result.stderr

    await eventually(denied, 60)  # RBAC caches settle within a moment
    denial = (await kubectl_berth(*as_reader)).stderr
    assert denial.startswith("error: no access to the scheduler (service ")
    assert "services/proxy" in denial
    assert denial.count("\n") == 1

    await rbac.create_namespaced_role(service_namespace, reader_role(service_namespace))
    await rbac.create_namespaced_role_binding(
        service_namespace,
        {
            "metadata": {"name": f"why-{namespace}"[:63]},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "berth-decisions-reader"},
            "subjects": subject,
        },
    )
    report: list[str] = []

    async def allowed() -> bool:
        result = await kubectl_berth(*as_reader)
        report[:] = [result.stdout]
        return result.returncode == 0

    await eventually(allowed, 60)
    assert f"Pod {namespace}/p is pending" in report[0]
