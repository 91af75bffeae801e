"""Session fixtures: one Kubernetes cluster per test session, a namespace per test.

The cluster is the local one built from Go modules (``berth cluster up``), started on
first use and stopped when the session ends. ``--kube-config PATH`` or
``BERTH_KUBECONFIG=PATH`` runs the same tests against an existing cluster instead; plain
``KUBECONFIG`` is ignored on purpose, so a developer's real cluster is never the target by
accident.

kubetest provides the per-test namespace and its client for built-in kinds. Its pytest
plugin is switched off (``-p no:kubetest`` in pyproject.toml): its teardown hook calls
``FixtureManager.getfixtureclosure`` with the pytest 7 signature and fails every test under
pytest 8 and later, which pytest-asyncio 1.x needs. The ``kube`` fixture below drives
kubetest's own test manager the way the plugin would.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import kubernetes
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubetest.client import TestClient
from kubetest.manager import KubetestManager

from berth.api import KINDS
from berth.kube.client import client_from_kubeconfig
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl, KubectlError
from tests.support import REPO

TEST_NODES = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kube-config",
        dest="kube_config",
        default=None,
        help="run the integration tests against this kubeconfig instead of the local cluster",
    )
    parser.addoption(
        "--mutations",
        action="store_true",
        default=False,
        help="run the checker against Berth broken on purpose (reliability/test_mutations.py)",
    )
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="the long variants of the reliability tests (200+ nodes, thousands of pods)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The short churn, crash and migration runs are part of the suite; the mutation runs
    only when asked for."""
    mutations = config.getoption("mutations")
    # Berth installed in the cluster runs last: its real node is one more node in every
    # other test's view (and messages), and its install replaces the CRDs' owner.
    items.sort(key=lambda item: item.get_closest_marker("in_cluster") is not None)
    for item in items:
        if "tests/integration/" in item.nodeid:
            item.add_marker(pytest.mark.integration)
        mutation = "tests/reliability/test_mutations.py" in item.nodeid or (
            "tests/reliability/test_migration_reliability.py" in item.nodeid
            and "catches" in item.name
        )
        if mutation and not mutations:
            item.add_marker(
                pytest.mark.skip(reason="the mutation runs take 15-25 minutes: tox -e mutations")
            )


@pytest.fixture(scope="session")
def kubeconfig_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Path of the kubeconfig every integration test talks through."""
    given = request.config.getoption("kube_config") or os.environ.get("BERTH_KUBECONFIG")
    if given:
        yield os.path.expanduser(given)
        return
    cluster = LocalCluster.default()
    # The real node's network when this machine can run a kubelet (as root); the node
    # itself starts with the in-cluster tests, which run last.
    real_node = os.geteuid() == 0
    started = not cluster.is_up(real_node=real_node)
    if started:
        cluster.up(nodes=TEST_NODES, real_node=real_node)
    try:
        yield str(cluster.kubeconfig)
    finally:
        if started:
            cluster.down()


_KUBETEST = KubetestManager()


@pytest.fixture
def kube(kubeconfig_path: str, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """kubetest's client, bound to a fresh namespace that is deleted after the test."""
    kubernetes.config.load_kube_config(config_file=kubeconfig_path)
    # kubetest's own names end in a timestamp in seconds, which parametrized tests share.
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    case = _KUBETEST.new_test(
        node_id=request.node.nodeid,
        test_name=request.node.name,
        namespace_create=True,
        namespace_name=f"{base}-{uuid.uuid4().hex[:8]}",
    )
    case.setup()
    wait_default_service_account(case.ns)
    try:
        yield case.client
    finally:
        _KUBETEST.teardown(request.node.nodeid)


def wait_default_service_account(namespace: str, within: float = 60.0) -> None:
    """ServiceAccount admission refuses pods in a namespace until the controller manager
    has made its ``default`` ServiceAccount (it retries for a second or two itself)."""
    core = kubernetes.client.CoreV1Api()
    deadline = time.monotonic() + within
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except kubernetes.client.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


@pytest.fixture(scope="session")
async def api(kubeconfig_path: str) -> AsyncIterator[ApiClient]:
    """An asyncio API client for the session cluster."""
    client = await client_from_kubeconfig(kubeconfig_path)
    async with client:
        yield client


@pytest.fixture
def namespace(kube: TestClient) -> str:
    """A fresh namespace for this test, created and deleted by kubetest."""
    return str(kube.namespace)


@pytest.fixture
async def second_namespace(api: ApiClient, namespace: str) -> AsyncIterator[str]:
    """Another namespace for this test, deleted after it."""
    core = CoreV1Api(api)
    name = f"{namespace[:50]}-b"
    await core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        await core.delete_namespace(name)


@pytest.fixture(scope="session")
def crds(kubeconfig_path: str) -> None:
    """The four Berth CRDs, applied from crds/ and Established."""
    kubectl = Kubectl(kubeconfig_path)
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "crds"))
    # Wait until every kind can be listed: that needs the CRD Established and its storage
    # ready ("storage is (re)initializing", 429 comes after Established), and it works
    # while a just-created CRD has no status yet (which `kubectl wait` trips over).
    plurals = ",".join(f"{kind.plural}.{kind.group}" for kind in KINDS)
    deadline = time.monotonic() + 60
    while True:
        try:
            kubectl("get", plurals, "--all-namespaces")
            return
        except KubectlError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
