"""The operators' credentials as an installation gives them: the controller's ServiceAccount,
bound by the roles in ``manifests/``, and a token the API server issues for it.

Installed, the operators authenticate with that token, whose verdict the API server keeps
for a while; the harness' kubeconfig holds the cluster admin's client certificate, which
the API server verifies again on every request: about a twelfth of its CPU during a burst
of a thousand patches. A benchmark of the operators' writes runs them as installed.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.kube.client import succeeded
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.paths import REPO_DIR

NAMESPACE = "berth-system"
SERVICE_ACCOUNT = "berth-controller"
MANIFESTS = (
    "namespace.yaml",
    "serviceaccounts.yaml",
    "rbac-operators.yaml",
    "rbac-leader-election.yaml",
)
TOKEN_SECONDS = 3600


def token_kubeconfig(admin: dict[str, Any], token: str) -> dict[str, Any]:
    """The admin kubeconfig's current cluster, reached with ``token`` instead."""
    current = admin.get("current-context")
    context = next(
        (c["context"] for c in admin.get("contexts") or () if c.get("name") == current),
        (admin.get("contexts") or [{}])[0].get("context") or {},
    )
    cluster = next(
        c for c in admin.get("clusters") or () if c.get("name") == context.get("cluster")
    )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": SERVICE_ACCOUNT,
                "context": {"cluster": cluster["name"], "user": SERVICE_ACCOUNT},
            }
        ],
        "current-context": SERVICE_ACCOUNT,
    }


@contextlib.asynccontextmanager
async def operators_kubeconfig(api: ApiClient, kubeconfig: str) -> AsyncIterator[str]:
    """A kubeconfig file for the operators' ServiceAccount (the manifests' roles applied
    first), removed afterwards."""
    folder = REPO_DIR / "manifests"
    Kubectl(kubeconfig)("apply", *(f"--filename={folder / name}" for name in MANIFESTS))
    request: Any = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS},
    }
    issued = await succeeded(
        CoreV1Api(api).create_namespaced_service_account_token(
            SERVICE_ACCOUNT, NAMESPACE, request, _preload_content=False
        )
    )
    token = str(orjson.loads(issued)["status"]["token"])
    with tempfile.TemporaryDirectory(prefix="berth-operators-") as directory:
        yield _write(Path(directory) / "kubeconfig", kubeconfig, token)


def _write(path: Path, kubeconfig: str, token: str) -> str:
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    path.write_text(yaml.safe_dump(token_kubeconfig(admin, token)))
    path.chmod(0o600)
    return str(path)
