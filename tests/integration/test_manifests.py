"""`kubectl apply -k manifests` installs Berth: CRDs Established, least-privilege RBAC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes_asyncio.client import ApiClient, AuthorizationV1Api

from berth.localcluster.kubectl import Kubectl
from tests.support import REPO

CONTROLLER = "system:serviceaccount:berth-system:berth-controller"
AGENT = "system:serviceaccount:berth-system:berth-agent"


@pytest.fixture(scope="module")
def installed(kubeconfig_path: str) -> Iterator[Kubectl]:
    """The manifests applied; their workloads deleted after the module (CRDs and RBAC are
    kept for the session). Left behind, the Deployment's Pending pods would be bound to kwok
    nodes once the real node's kube-scheduler starts, and the in-cluster install would roll
    out over them, its Service answering from pods that run nowhere."""
    kubectl = Kubectl(kubeconfig_path)
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "manifests"))
    yield kubectl
    kubectl(
        "-n",
        "berth-system",
        "delete",
        "deployment/berth-controller",
        "daemonset/berth-agent",
        "--ignore-not-found",
        "--wait=true",
        timeout=120,
    )


def test_crds_become_established(installed: Kubectl) -> None:
    names = (
        "reservations.scheduling.koordinator.sh",
        "elasticquotas.scheduling.sigs.k8s.io",
        "nodemetrics.slo.koordinator.sh",
        "noderesourcetopologies.topology.node.k8s.io",
        "podmigrationjobs.scheduling.koordinator.sh",
        "podgroups.scheduling.x-k8s.io",
    )
    out = installed(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names)
    )
    for name in names:
        assert f"{name} condition met" in out


def test_components_are_installed(installed: Kubectl) -> None:
    out = installed(
        "-n",
        "berth-system",
        "get",
        "deployment/berth-controller",
        "daemonset/berth-agent",
        "configmap/berth-scheduler-config",
        "configmap/slo-controller-config",
        "serviceaccount/berth-controller",
        "serviceaccount/berth-agent",
        "service/berth-webhook",
        "-o",
        "name",
    )
    assert len(out.split()) == 7


async def _allowed(api: ApiClient, user: str, verb: str, resource: str, **extra: str) -> bool:
    attributes = {"verb": verb, "resource": resource, **extra}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts"],
            "resourceAttributes": attributes,
        },
    }
    result = await AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(result.status.allowed)


@pytest.mark.parametrize(
    ("user", "verb", "resource", "extra", "allowed"),
    [
        (CONTROLLER, "create", "pods", {"subresource": "binding"}, True),
        (CONTROLLER, "create", "pods", {"subresource": "eviction"}, True),
        (
            CONTROLLER,
            "patch",
            "reservations",
            {"group": "scheduling.koordinator.sh", "subresource": "status"},
            True,
        ),
        (
            CONTROLLER,
            "update",
            "leases",
            {"group": "coordination.k8s.io", "namespace": "berth-system"},
            True,
        ),
        (
            CONTROLLER,
            "update",
            "leases",
            {"group": "coordination.k8s.io", "namespace": "default"},
            False,
        ),
        # The Reservation operator deletes ended reservations (garbage collection) and
        # records events about them in default; it never rewrites their spec.
        (
            CONTROLLER,
            "delete",
            "reservations",
            {"group": "scheduling.koordinator.sh"},
            True,
        ),
        (
            CONTROLLER,
            "update",
            "reservations",
            {"group": "scheduling.koordinator.sh"},
            False,
        ),
        (CONTROLLER, "create", "events", {"namespace": "default"}, True),
        (CONTROLLER, "get", "nodes", {}, True),
        (CONTROLLER, "patch", "pods", {}, True),  # the reservation-allocated annotation
        (CONTROLLER, "delete", "pods", {}, True),  # a victim whose budget refuses eviction
        (CONTROLLER, "update", "pods", {}, False),
        (CONTROLLER, "delete", "nodes", {}, False),
        (CONTROLLER, "get", "secrets", {}, False),
        (
            AGENT,
            "patch",
            "nodemetrics",
            {"group": "slo.koordinator.sh", "subresource": "status"},
            True,
        ),
        (AGENT, "patch", "nodemetrics", {"group": "slo.koordinator.sh"}, False),
        (AGENT, "watch", "nodemetrics", {"group": "slo.koordinator.sh"}, True),
        (AGENT, "list", "pods", {}, True),
        (AGENT, "get", "nodes", {}, False),
        (CONTROLLER, "create", "nodemetrics", {"group": "slo.koordinator.sh"}, True),
        (CONTROLLER, "delete", "nodemetrics", {"group": "slo.koordinator.sh"}, True),
        # The NodeMetric operator watches slo-controller-config in berth-system only.
        (CONTROLLER, "watch", "configmaps", {"namespace": "berth-system"}, True),
        (CONTROLLER, "list", "configmaps", {"namespace": "default"}, False),
        # Koordinator's root, default and system quotas (quotaGroupNamespace).
        (CONTROLLER, "create", "elasticquotas", {"group": "scheduling.sigs.k8s.io"}, True),
        (CONTROLLER, "delete", "elasticquotas", {"group": "scheduling.sigs.k8s.io"}, False),
        # kube-scheduler 1.36's PodGroup: watched, and its PodGroupScheduled condition set.
        (CONTROLLER, "watch", "podgroups", {"group": "scheduling.k8s.io"}, True),
        (
            CONTROLLER,
            "patch",
            "podgroups",
            {"group": "scheduling.k8s.io", "subresource": "status"},
            True,
        ),
        (CONTROLLER, "patch", "podgroups", {"group": "scheduling.k8s.io"}, False),
        # The admission webhook: its own certificate Secret only, its own configuration.
        (
            CONTROLLER,
            "get",
            "secrets",
            {"namespace": "berth-system", "name": "berth-webhook-tls"},
            True,
        ),
        (CONTROLLER, "get", "secrets", {"namespace": "berth-system", "name": "other"}, False),
        (
            CONTROLLER,
            "patch",
            "validatingwebhookconfigurations",
            {"group": "admissionregistration.k8s.io", "name": "berth-elasticquota"},
            True,
        ),
        (
            CONTROLLER,
            "patch",
            "validatingwebhookconfigurations",
            {"group": "admissionregistration.k8s.io", "name": "other"},
            False,
        ),
        (AGENT, "create", "pods", {"subresource": "binding"}, False),
        # Volumes: the scheduler reads claims and volumes, and binds claims at PreBind.
        (CONTROLLER, "list", "persistentvolumes", {}, True),
        (CONTROLLER, "watch", "csinodes", {"group": "storage.k8s.io"}, True),
        (CONTROLLER, "delete", "persistentvolumes", {}, False),
        # PodMigrationJobs: the balancer creates them, the operator writes their status.
        (
            CONTROLLER,
            "patch",
            "podmigrationjobs",
            {"group": "scheduling.koordinator.sh", "subresource": "status"},
            True,
        ),
        (CONTROLLER, "create", "podmigrationjobs", {"group": "scheduling.koordinator.sh"}, True),
        # PodGroups: watched by the scheduler, their status written by the operator.
        (CONTROLLER, "watch", "podgroups", {"group": "scheduling.x-k8s.io"}, True),
        (
            CONTROLLER,
            "patch",
            "podgroups",
            {"group": "scheduling.x-k8s.io", "subresource": "status"},
            True,
        ),
        (CONTROLLER, "patch", "podgroups", {"group": "scheduling.x-k8s.io"}, False),
    ],
)
async def test_rbac_is_least_privilege(
    installed: Kubectl,
    api: ApiClient,
    user: str,
    verb: str,
    resource: str,
    extra: dict[str, str],
    allowed: bool,
) -> None:
    assert await _allowed(api, user, verb, resource, **extra) is allowed
