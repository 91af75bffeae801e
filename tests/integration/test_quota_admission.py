"""The quota tree's admission webhook on the local cluster: `berth run` serves it on
127.0.0.1 beside kube-apiserver and writes the ValidatingWebhookConfiguration; `kubectl
apply` (and the API) get each refusal with its reason, and a valid tree is accepted. Then
`berth quota tree` and `kubectl berth quota tree` draw the tree from the status the
operator writes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
)
from kubernetes_asyncio.client.exceptions import ApiException

from berth.localcluster.kubectl import Kubectl, KubectlError
from berth.operators.admission import CONFIGURATION
from tests.integration.cluster import only_these_quotas, pod_body
from tests.integration.processes import BerthRun
from tests.support import eventually

GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
PREFIX = "quota.scheduling.koordinator.sh/"
DENIED = 'admission webhook "elasticquotas.berth.io" denied the request: '
WITHIN = 60.0
SCHEDULER = "berth-quota-admission"
CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": False},
    "profiles": [{"schedulerName": SCHEDULER}],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Tree:
    """ElasticQuotas of this test (tree quotas are known by name across the cluster, so
    each name carries the test's prefix), applied with kubectl."""

    def __init__(self, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.prefix = "qa-" + hashlib.sha1(namespace.encode()).hexdigest()[:8]

    def name(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def quota(
        self, short: str, parent: str | None = None, *, is_parent: bool = False, cpu: int = 2
    ) -> dict[str, Any]:
        labels = {PREFIX + "is-parent": "true" if is_parent else "false"}
        if parent is not None:
            labels[PREFIX + "parent"] = self.name(parent)
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ElasticQuota",
            "metadata": {"name": self.name(short), "namespace": self.namespace, "labels": labels},
            "spec": {"min": {"cpu": str(cpu)}, "max": {"cpu": "16"}},
        }

    def apply(self, *docs: dict[str, Any]) -> str:
        return self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))

    def refused(self, doc: dict[str, Any]) -> str:
        """kubectl apply's error for ``doc``, which must be the webhook's refusal."""
        with pytest.raises(KubectlError) as caught:
            self.apply(doc)
        message = str(caught.value)
        assert DENIED in message, message
        return message.split(DENIED, 1)[1]


@pytest.fixture
def tree(kubeconfig_path: str, crds: None, namespace: str) -> Tree:
    return Tree(Kubectl(kubeconfig_path), namespace)


@pytest.fixture
async def webhook(
    api: ApiClient, kubeconfig_path: str, crds: None, tmp_path: Path, tree: Tree
) -> AsyncIterator[BerthRun]:
    """`berth run` serving the webhook on 127.0.0.1, once the API server calls it: a quota
    whose parent does not exist comes back refused."""
    port = free_port()
    process = BerthRun.configured(kubeconfig_path, CONFIG, tmp_path, operators=False)
    process.command += [
        f"--webhook-address=127.0.0.1:{port}",
        f"--webhook-url=https://127.0.0.1:{port}",
    ]
    process.start()
    registration = AdmissionregistrationV1Api(api)
    custom = CustomObjectsApi(api)
    probe = tree.quota("probe", "missing")

    async def serving() -> bool:
        try:
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, tree.namespace, PLURAL, probe
            )
        except ApiException as err:
            return err.status == 403 and "does not exist" in (err.body or "")
        # Created before the configuration took effect: take it back and ask again.
        await custom.delete_namespaced_custom_object(
            GROUP, VERSION, tree.namespace, PLURAL, probe["metadata"]["name"]
        )
        return False

    try:
        await eventually(serving, WITHIN)
        yield process
    finally:
        # Before berth run stops: its Fail policy would refuse every quota change after.
        try:
            await registration.delete_validating_webhook_configuration(CONFIGURATION)
        except ApiException as err:
            if err.status != 404:
                raise
        process.stop()


async def test_refusals_say_why_and_a_valid_tree_is_accepted(
    webhook: BerthRun, tree: Tree, api: ApiClient
) -> None:
    dept, a, b = tree.name("dept"), tree.name("team-a"), tree.name("team-b")
    # A department (min 4) with two teams (min 2 each): accepted, parent first.
    out = tree.apply(
        tree.quota("dept", is_parent=True, cpu=4), tree.quota("team-a", "dept"),
        tree.quota("team-b", "dept"),
    )  # fmt: skip
    assert out.count("created") == 3, out

    why = tree.refused(tree.quota("team-c", "dept", cpu=1))
    assert why == (
        f"ElasticQuota {tree.name('team-c')}: the children's min of ElasticQuota {dept} "
        "would add up to more than its min (cpu 5 > 4)"
    )
    why = tree.refused(tree.quota("dept", is_parent=True, cpu=3))
    assert why == (
        f"ElasticQuota {dept}: its children's min would add up to more than its min (cpu 4 > 3)"
    )
    why = tree.refused(tree.quota("team-c", "nowhere", cpu=1))
    assert f"parent ElasticQuota {tree.name('nowhere')}" in why
    assert "does not exist" in why
    why = tree.refused(tree.quota("team-c", "team-a", cpu=1))
    assert f"parent ElasticQuota {a} is not labelled {PREFIX}is-parent" in why
    why = tree.refused(tree.quota("dept", is_parent=False, cpu=4))
    assert (
        why
        == f'ElasticQuota {dept} has children ({a}, {b}): it must stay {PREFIX}is-parent: "true"'
    )

    # No cycle: top over mid, then top under mid.
    tree.apply(tree.quota("top", is_parent=True, cpu=8))
    tree.apply(tree.quota("mid", "top", is_parent=True, cpu=4))
    why = tree.refused(tree.quota("top", "mid", is_parent=True, cpu=8))
    assert "would make a cycle" in why

    # Deleting a quota with children: refused.
    with pytest.raises(KubectlError) as caught:
        tree.kubectl("-n", tree.namespace, "delete", "elasticquota", dept)
    assert f"ElasticQuota {dept} has children ({a}, {b}); delete or move them first" in str(
        caught.value
    )

    # A parent runs no pods: a pod naming it is refused; a quota with a pod neither becomes a
    # parent nor moves.
    core = CoreV1Api(api)

    def pod(name: str, quota: str) -> dict[str, Any]:
        return pod_body(name, "nobody", labels={PREFIX + "name": quota})

    with pytest.raises(ApiException) as refused_pod:
        await core.create_namespaced_pod(tree.namespace, pod("on-parent", dept))
    assert refused_pod.value.status == 403
    assert f"names ElasticQuota {dept}, a parent quota" in (refused_pod.value.body or "")
    await core.create_namespaced_pod(tree.namespace, pod("on-team", a))
    why = tree.refused(tree.quota("team-a", "dept", is_parent=True))
    assert why == (
        f'ElasticQuota {a} cannot become a parent ({PREFIX}is-parent: "true") while it runs '
        f"pods (a parent runs none): 1 pod(s): {tree.namespace}/on-team"
    )
    why = tree.refused(tree.quota("team-a", "top"))
    assert (
        f"ElasticQuota {a} cannot move from {dept} to {tree.name('top')} while pods use it" in why
    )

    # team-b, without pods, may move (its min 2 within mid's 4).
    tree.apply(tree.quota("team-b", "mid"))
    # And a child deleted first lets its parent go.
    tree.kubectl("-n", tree.namespace, "delete", "elasticquota", tree.name("team-b"))
    tree.kubectl("-n", tree.namespace, "delete", "elasticquota", tree.name("mid"))


def _status(doc: dict[str, Any], field: str) -> str | None:
    return ((doc.get("status") or {}).get(field) or {}).get("cpu")


@pytest.fixture
def operators(kubeconfig_path: str, crds: None, tmp_path: Path) -> Iterator[BerthRun]:
    process = BerthRun.configured(kubeconfig_path, CONFIG, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


async def test_quota_tree_shows_the_tree_with_its_status(
    operators: BerthRun, tree: Tree, api: ApiClient, kubeconfig_path: str
) -> None:
    tree.apply(
        tree.quota("dept", is_parent=True, cpu=4), tree.quota("team-a", "dept"),
        tree.quota("team-b", "dept"),
    )  # fmt: skip
    # One pod of 1 CPU in team-a, placed by berth run's scheduler: request, runtime, used.
    await CoreV1Api(api).create_namespaced_pod(
        tree.namespace,
        pod_body("placed", SCHEDULER, cpu="1", labels={PREFIX + "name": tree.name("team-a")}),
    )
    custom = CustomObjectsApi(api)

    async def written() -> bool:
        team = await custom.get_namespaced_custom_object(
            GROUP, VERSION, tree.namespace, PLURAL, tree.name("team-a")
        )
        return all(_status(team, field) == "1" for field in ("request", "runtime", "used"))

    await eventually(written, WITHIN)
    # Both commands draw every quota of the cluster: none of an earlier test may vanish
    # between them.
    await only_these_quotas(api, {tree.namespace})
    env = {**os.environ, "KUBECONFIG": kubeconfig_path}
    berth_tree = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "berth.cli", "quota", "tree"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    berth = berth_tree.stdout
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    kubectl_berth = await asyncio.to_thread(
        subprocess.run,
        [str(tree.kubectl.binary), "berth", "quota", "tree"],
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert kubectl_berth.stdout == berth
    lines = berth.splitlines()
    assert lines[0].split()[:3] == ["QUOTA", "NAMESPACE", "RESOURCE"]
    dept = next(i for i, line in enumerate(lines) if f"─ {tree.name('dept')} (parent)" in line)
    # dept, then its two teams under it; columns: min, max, request, runtime, used,
    # borrowed, lent (the unused min).
    assert lines[dept].split()[-9:] == [tree.namespace, "cpu", "4", "16", "1", "1", "1", "0", "3"]
    team_a = lines[dept + 1]
    assert f"├─ {tree.name('team-a')}" in team_a
    assert team_a.split()[-10:] == [
        tree.name("team-a"), tree.namespace, "cpu", "2", "16", "1", "1", "1", "0", "1"
    ]  # fmt: skip
    assert f"└─ {tree.name('team-b')}" in lines[dept + 2]
