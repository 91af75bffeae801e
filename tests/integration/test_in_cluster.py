"""Berth installed as users install it: its image loaded into the local cluster's real node,
``kubectl apply -k`` of the manifests (through the local overlay), the controller and the
agent running there as pods with their own service accounts and RBAC.

These run last in the session (tests/conftest.py): the real node is one more node in every
other test's messages. They need root (a kubelet) and the local cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.agent.memory import node_memory, parse_meminfo
from berth.api.nodemetric import NodeMetric, NodeMetricStatus
from berth.image.spec import image_name
from berth.localcluster import incluster
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.nodeconfig import NODE_NAME
from tests.integration.cluster import Pods, pod_body
from tests.support import eventually

pytestmark = pytest.mark.in_cluster

SCHEDULER = "berth-scheduler"
LEASE_SECONDS = 15
"""The installed leader election's lease (kube-scheduler's default, as installed)."""
REPORT_SECONDS = 5
RESERVATIONS = ("scheduling.koordinator.sh", "v1alpha1", "reservations")
MIB = 2**20
MEMINFO = Path("/proc/meminfo")


@pytest.fixture(scope="module")
def installed(kubeconfig_path: str, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    """Berth installed from its image on the real node, for every test of this module;
    uninstalled with ``kubectl delete -k`` and the node stopped after the last."""
    if request.config.getoption("kube_config") or os.environ.get("BERTH_KUBECONFIG"):
        pytest.skip("Berth in the cluster is tested on the local cluster's real node")
    if os.geteuid() != 0:
        pytest.skip("the local cluster's real node needs root (a kubelet)")
    cluster = LocalCluster.default()
    kubectl = Kubectl(kubeconfig_path)
    incluster.install(cluster, print)
    incluster.report_often(kubectl, NODE_NAME, REPORT_SECONDS)
    try:
        yield kubectl
    finally:
        incluster.uninstall(cluster)
        cluster.stop_real_node()


def _berth_pods(kubectl: Kubectl, *, terminating: bool = False) -> list[dict[str, Any]]:
    """Berth's pods; those being deleted only when asked (they may still serve)."""
    listed = json.loads(kubectl("-n", incluster.NAMESPACE, "get", "pods", "-o", "json"))
    return [p for p in listed["items"] if terminating or not p["metadata"].get("deletionTimestamp")]


def test_the_controller_and_the_agent_run_from_the_built_image(installed: Kubectl) -> None:
    status = incluster.status(installed)
    assert status.ready(), status
    assert status.controller_wanted == 2
    image = image_name().reference
    pods = _berth_pods(installed)
    assert {p["metadata"]["labels"]["app.kubernetes.io/name"] for p in pods} == {
        incluster.CONTROLLER,
        incluster.AGENT,
    }
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == NODE_NAME, name
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"].endswith(image), (name, container["image"])
        assert container["ready"], name
        # A real service-account token, projected by ServiceAccount admission.
        assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"]), name
        security = pod["spec"]["containers"][0]["securityContext"]
        assert security["readOnlyRootFilesystem"], name
        assert security["capabilities"]["drop"] == ["ALL"], name
    # The processes really run in the pods' cgroups, as the non-root user of the image.
    processes = _berth_processes()
    assert {command for command, _, _ in processes} >= {"run", "agent"}, processes
    assert all(uid == "65532" and in_pod for _, uid, in_pod in processes), processes


async def test_berth_in_the_cluster_binds_a_pod(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    pods = Pods(api, namespace)
    await pods.create(pod_body("web", SCHEDULER, cpu="100m"))
    node = await pods.wait_bound("web", within=60)
    assert node.startswith("kwok-node-"), node
    (event,) = await pods.events("web", "Scheduled")
    assert event.source.component == SCHEDULER
    # Nothing of Berth runs beside the cluster: the binding came from its pod.
    assert all(in_pod for _, _, in_pod in _berth_processes())
    # The leader's first list of pods was the one asked for, with the pod's service
    # account, as its process started.
    read_early = [
        line["read_early"]
        for line in _controller_log_lines(installed)
        if line.get("event") == "first list read from the pages asked for at start"
        and line.get("kind") == "pods"
    ]
    assert read_early, "no controller says how it read its first list of pods"
    assert max(read_early) >= 1, read_early


def _controller_log_lines(kubectl: Kubectl) -> list[dict[str, Any]]:
    """The JSON lines of every controller pod's log (others, such as kopf's, skipped)."""
    lines = []
    for pod in _berth_pods(kubectl):
        if pod["metadata"]["labels"]["app.kubernetes.io/name"] != incluster.CONTROLLER:
            continue
        log = kubectl("-n", incluster.NAMESPACE, "logs", pod["metadata"]["name"])
        for text in log.splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(text)
                if isinstance(line, dict):
                    lines.append(line)
    return lines


def _berth_processes() -> list[tuple[str, str, bool]]:
    """Each ``berth run`` or ``berth agent`` process of this machine: its command, its
    user id, and whether it lives in a pod's cgroup."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            uid = Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0]
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except (OSError, IndexError):
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        berth = next((i for i, w in enumerate(words) if w.endswith("/berth")), None)
        if berth is None or berth + 1 >= len(words) or words[berth + 1] not in ("run", "agent"):
            continue
        found.append((words[berth + 1], uid, "/kubepods" in cgroups))
    return found


async def test_the_webhook_refuses_a_bad_quota_through_its_service(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    configuration = json.loads(
        installed("get", "validatingwebhookconfiguration", "berth-elasticquota", "-o", "json")
    )
    for webhook in configuration["webhooks"]:
        assert webhook["clientConfig"]["service"]["name"] == "berth-webhook", webhook
        assert "url" not in webhook["clientConfig"]
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "orphan",
            "labels": {"quota.scheduling.koordinator.sh/parent": "nowhere"},
        },
        "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
    }
    custom = CustomObjectsApi(api)
    with pytest.raises(ApiException) as refused:
        await custom.create_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
        )
    assert refused.value.status == 403, refused.value.body
    message = json.loads(refused.value.body or "{}")["message"]
    assert message.startswith('admission webhook "elasticquotas.berth.io" denied the request'), (
        message
    )
    assert "nowhere" in message


async def test_kubectl_berth_why_reads_the_decision_through_the_service_proxy(
    installed: Kubectl, api: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kubectl finds the plugin installed beside berth on PATH, as a user's would.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    pods = Pods(api, namespace)
    await pods.create(pod_body("huge", SCHEDULER, cpu="100"))
    await pods.wait_event("huge", "FailedScheduling", within=60)
    report = installed.plugin("berth", "why", "huge", "-n", namespace)
    assert f"Pod {namespace}/huge is pending (profile {SCHEDULER}" in report
    assert "Insufficient cpu" in report


def _metric(kubectl: Kubectl) -> NodeMetric:
    return NodeMetric.from_dict(json.loads(kubectl("get", "nodemetric", NODE_NAME, "-o", "json")))


def _reported_after(kubectl: Kubectl, since: datetime) -> bool:
    updated = (_metric(kubectl).status or NodeMetricStatus()).update_time
    return updated is not None and updated > since


async def test_the_agent_reports_the_real_node_s_usage_and_comes_back(
    installed: Kubectl,
) -> None:
    started = datetime.now(UTC).replace(microsecond=0)

    async def reported() -> bool:
        return _reported_after(installed, started)

    await eventually(reported, within=90)
    metric = _metric(installed)
    info = (metric.status or NodeMetricStatus()).node_metric
    usage = (info.node_usage.resources if info and info.node_usage else None) or {}
    assert {"cpu", "memory"} <= usage.keys(), usage
    policy = metric.spec.metric_collect_policy.node_memory_collect_policy
    here = node_memory(parse_meminfo(MEMINFO.read_text()), policy)  # noqa: ASYNC240 - /proc
    assert abs(usage["memory"].value - here) <= max(here // 4, 256 * MIB), (usage, here)
    assert 0 <= usage["cpu"].value <= (os.cpu_count() or 1)

    (agent,) = [
        p["metadata"]["name"]
        for p in _berth_pods(installed)
        if p["metadata"]["labels"]["app.kubernetes.io/name"] == incluster.AGENT
    ]
    installed("-n", incluster.NAMESPACE, "delete", "pod", agent, "--wait=true")
    deleted = datetime.now(UTC).replace(microsecond=0)

    async def back() -> bool:
        agents = [
            p
            for p in _berth_pods(installed)
            if p["metadata"]["labels"]["app.kubernetes.io/name"] == incluster.AGENT
        ]
        return bool(agents) and agents[0]["metadata"]["name"] != agent

    await eventually(back, within=60)

    async def reports_again() -> bool:
        return _reported_after(installed, deleted)

    await eventually(reports_again, within=90)


async def test_the_standby_takes_over_when_the_leader_pod_goes_and_nothing_is_bound_twice(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    leases = CoordinationV1Api(api)

    async def holder() -> str:
        lease = await leases.read_namespaced_lease(incluster.LEASE, incluster.NAMESPACE)
        return str(lease.spec.holder_identity or "").split("_", 1)[0]

    pods = Pods(api, namespace)
    for i in range(5):
        await pods.create(pod_body(f"before-{i}", SCHEDULER, cpu="100m"))
    for i in range(5):
        await pods.wait_bound(f"before-{i}", within=60)

    # Deleted as a user or a rollout would: the leader is told to stop and gives the lease up.
    leader = await holder()
    assert leader, "no leader"
    installed("-n", incluster.NAMESPACE, "delete", "pod", leader, "--wait=false")
    deleted_at = time.monotonic()
    for i in range(5):
        await pods.create(pod_body(f"during-{i}", SCHEDULER, cpu="100m"))
    custom = CustomObjectsApi(api)
    reservations = [f"{namespace[:50]}-{i}" for i in range(2)]
    for name in reservations:
        await custom.create_cluster_custom_object(*RESERVATIONS, _reservation(name))

    async def taken_over() -> bool:
        return (await holder()) not in ("", leader)

    await eventually(taken_over, within=LEASE_SECONDS + 15)
    took = time.monotonic() - deleted_at
    assert took < LEASE_SECONDS + 15, f"took over after {took:.1f}s"

    # Killed outright (no grace): the next leader waits out the lease, then takes it.
    crashed = await holder()
    installed("-n", incluster.NAMESPACE, "delete", "pod", crashed, "--grace-period=0", "--force")
    for i in range(5):
        await pods.create(pod_body(f"after-{i}", SCHEDULER, cpu="100m"))

    async def taken_again() -> bool:
        return (await holder()) not in ("", leader, crashed)

    await eventually(taken_again, within=LEASE_SECONDS * 2 + 15)
    for phase in ("before", "during", "after"):
        for i in range(5):
            await pods.wait_bound(f"{phase}-{i}", within=90)

    events = (await CoreV1Api(api).list_namespaced_event(namespace)).items
    scheduled: dict[str, int] = {}
    for event in events:
        if event.reason == "Scheduled":
            name = event.involved_object.name
            scheduled[name] = scheduled.get(name, 0) + (event.count or 1)
    assert len(scheduled) == 15, scheduled
    assert set(scheduled.values()) == {1}, f"a pod was bound more than once: {scheduled}"

    async def placed() -> bool:
        for name in reservations:
            obj = await custom.get_cluster_custom_object(*RESERVATIONS, name)
            if not (obj.get("status") or {}).get("nodeName"):
                return False
        return True

    await eventually(placed, within=60)
    # Events of cluster-scoped objects land in the default namespace.
    placements = [
        e
        for e in (await CoreV1Api(api).list_namespaced_event("default")).items
        if e.reason == "Scheduled"
        and e.involved_object.kind == "Reservation"
        and e.involved_object.name in reservations
    ]
    counts = {name: 0 for name in reservations}
    for event in placements:
        counts[event.involved_object.name] += event.count or 1
    assert set(counts.values()) == {1}, f"a reservation was placed more than once: {counts}"
    for name in reservations:
        await custom.delete_cluster_custom_object(*RESERVATIONS, name)
    # The Deployment is whole again for the tests after this one.
    incluster.wait_ready(installed, print)


def _containers(kubectl: Kubectl) -> dict[str, tuple[str, int]]:
    """Each Berth pod's container id and restart count."""
    found = {}
    for pod in _berth_pods(kubectl):
        (container,) = pod["status"]["containerStatuses"]
        found[pod["metadata"]["name"]] = (container["containerID"], container["restartCount"])
    return found


async def _binds_one(api: ApiClient, namespace: str, name: str) -> None:
    """A pod created now is bound by Berth (the API server may still be coming back)."""
    pods = Pods(api, namespace)

    async def created() -> bool:
        try:
            await pods.create(pod_body(name, SCHEDULER, cpu="100m"))
        except (ApiException, OSError) as err:
            return getattr(err, "status", 0) == 409
        return True

    await eventually(created, within=60)
    await pods.wait_bound(name, within=90)


async def test_berth_s_pods_outlive_a_restart_of_the_kubelet_and_containerd(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    before = _containers(installed)
    restarted_at = datetime.now(UTC).replace(microsecond=0)
    LocalCluster.default().restart_node_runtime()

    async def heard_again() -> bool:
        """The restarted kubelet has renewed its node's lease."""
        lease = json.loads(
            installed("-n", "kube-node-lease", "get", "lease", NODE_NAME, "-o", "json")
        )
        renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        return renewed > restarted_at

    await eventually(heard_again, within=60)
    incluster.wait_ready(installed, print)
    # The same containers, never restarted: the runtime came back under them.
    assert _containers(installed) == before
    await _binds_one(api, namespace, "after-runtime-restart")


async def test_berth_comes_back_after_the_api_server_restarts(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    LocalCluster.default().restart_apiserver()
    await _binds_one(api, namespace, "after-apiserver-restart")
    incluster.wait_ready(installed, print)


async def test_quota_writes_are_refused_by_name_while_berth_is_down_and_taken_after(
    installed: Kubectl, api: ApiClient, namespace: str
) -> None:
    """The webhook fails closed: with no Berth replica, an ElasticQuota write is refused
    with the webhook's name, and nothing is stored; with Berth back it is taken."""
    deployment = ("-n", incluster.NAMESPACE, "scale", "deployment", incluster.CONTROLLER)
    installed(*deployment, "--replicas=0")

    def controllers() -> list[dict[str, Any]]:
        """Every controller pod, those still shutting down too: one of them may still answer
        a review the API server sends it before its address leaves the endpoints."""
        return [
            p
            for p in _berth_pods(installed, terminating=True)
            if p["metadata"]["labels"]["app.kubernetes.io/name"] == incluster.CONTROLLER
        ]

    async def down() -> bool:
        return not controllers() and not json.loads(
            installed("-n", incluster.NAMESPACE, "get", "endpoints", "berth-webhook", "-o", "json")
        ).get("subsets")

    try:
        await eventually(down, within=90)
        quota = {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "while-down"},
            "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
        }
        custom = CustomObjectsApi(api)
        with pytest.raises(ApiException) as refused:
            await custom.create_namespaced_custom_object(
                "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
            )
        message = json.loads(refused.value.body or "{}")["message"]
        assert 'failed calling webhook "elasticquotas.berth.io"' in message, message
        listed = await custom.list_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas"
        )
        assert listed["items"] == []
    finally:
        installed(*deployment, "--replicas=2")
        incluster.wait_ready(installed, print)
    await custom.create_namespaced_custom_object(
        "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
    )


def test_the_local_overlay_changes_only_what_the_local_cluster_needs(installed: Kubectl) -> None:
    """The objects applied are the manifests' own, but for the two commented patches."""
    base = {_key(o): o for o in yaml.safe_load_all(installed("kustomize", str(_manifests())))}
    local = {_key(o): o for o in yaml.safe_load_all(installed("kustomize", str(incluster.OVERLAY)))}
    assert base.keys() == local.keys()
    changed = sorted(k for k in base if base[k] != local[k])
    assert changed == [
        ("apps/v1", "DaemonSet", incluster.AGENT),
        ("apps/v1", "Deployment", incluster.CONTROLLER),
    ]


def _reservation(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                }
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
            "ttl": "10m",
        },
    }


def _manifests() -> Path:
    return incluster.OVERLAY.parents[2] / "manifests"


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
