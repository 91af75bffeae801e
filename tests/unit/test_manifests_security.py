"""The installed manifests, read as files: least privilege and locked-down containers.

RBAC names every verb and resource (no wildcards); every workload runs non-root, with a
read-only root filesystem, no privilege escalation and no capabilities. The integration
test test_manifests checks what the installed RBAC allows, on the API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support import REPO

MANIFESTS = REPO / "manifests"


def objects() -> Iterator[dict[str, Any]]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield doc


def rbac_rules() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{obj['kind']} {obj['metadata']['name']}", rule)
        for obj in objects()
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj.get("rules") or ()
    ]


def workloads() -> list[dict[str, Any]]:
    return [obj for obj in objects() if obj["kind"] in ("Deployment", "DaemonSet")]


def test_there_are_rules_and_workloads_to_check() -> None:
    assert len(rbac_rules()) >= 5
    assert {w["kind"] for w in workloads()} == {"Deployment", "DaemonSet"}


@pytest.mark.parametrize(("owner", "rule"), rbac_rules(), ids=lambda v: str(v)[:60])
def test_rbac_has_no_wildcards(owner: str, rule: dict[str, Any]) -> None:
    for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
        assert "*" not in (rule.get(field) or []), f"{owner}: {field} has a wildcard"
    assert rule.get("verbs"), f"{owner}: a rule without verbs"


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: w["metadata"]["name"])
def test_containers_are_locked_down(workload: dict[str, Any]) -> None:
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert not pod.get("hostNetwork")
    assert not pod.get("hostPID")
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged")
    for volume in pod.get("volumes") or ():
        if "hostPath" in volume:  # the agent reads the host's /proc and cgroups only
            mounts = [m for c in pod["containers"] for m in c.get("volumeMounts") or ()]
            assert all(m.get("readOnly") for m in mounts if m["name"] == volume["name"])
