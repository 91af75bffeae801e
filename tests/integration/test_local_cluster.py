"""The local cluster is a real control plane: nodes Ready with realistic capacity, kwok
running bound pods, the controller manager running Deployments, RBAC enforced."""

from __future__ import annotations

from kubernetes_asyncio.client import ApiClient, AppsV1Api, AuthorizationV1Api, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubetest.client import TestClient as KubeClient

from berth.localcluster.nodes import ALLOCATABLE
from tests.support import eventually


async def test_nodes_ready_with_allocatable_and_labels(api: ApiClient) -> None:
    nodes = (await CoreV1Api(api).list_node()).items
    assert len(nodes) >= 3
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name
        if node.metadata.name.startswith("kwok-node-"):
            assert node.status.allocatable == ALLOCATABLE
            assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
            assert node.metadata.labels["topology.kubernetes.io/zone"].startswith("zone-")


async def test_kwok_runs_a_bound_pod_and_finishes_its_deletion(
    api: ApiClient, namespace: str
) -> None:
    core = CoreV1Api(api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound"},
        "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "c", "image": "x"}]},
    }
    await core.create_namespaced_pod(namespace, pod)

    async def running() -> bool:
        p = await core.read_namespaced_pod("bound", namespace)
        return bool(p.status.phase == "Running")

    await eventually(running)
    await core.delete_namespaced_pod("bound", namespace)

    async def gone() -> bool:
        try:
            await core.read_namespaced_pod("bound", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    await eventually(gone)


async def test_controller_manager_creates_the_pods_of_a_deployment(
    api: ApiClient, namespace: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    await AppsV1Api(api).create_namespaced_deployment(namespace, deployment)

    async def three_pods() -> bool:
        pods = await CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app=web")
        return len(pods.items) == 3

    await eventually(three_pods)


async def test_rbac_denies_an_unbound_service_account(api: ApiClient, namespace: str) -> None:
    """Authorization is RBAC, not always-allow: a bare service account may not list nodes."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:nobody",
            "resourceAttributes": {"verb": "list", "resource": "nodes"},
        },
    }
    result = await AuthorizationV1Api(api).create_subject_access_review(review)
    assert result.status.allowed is False


def test_kubetest_client_sees_the_same_cluster(kube: KubeClient) -> None:
    """kubetest's fixtures (used for built-in kinds) talk to the session cluster too."""
    nodes = kube.get_nodes()
    assert len(nodes) >= 3
    # is_ready() reads each node again: check the first three, whatever the cluster's size.
    local = [nodes[name] for name in ("kwok-node-0", "kwok-node-1", "kwok-node-2") if name in nodes]
    checked = local or list(nodes.values())[:3]
    assert all(node.is_ready() for node in checked)
