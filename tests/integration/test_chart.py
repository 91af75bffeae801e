"""The Helm chart and install.yaml install what ``kubectl apply -k manifests`` installs.

``helm template`` and ``kubectl kustomize`` render both; the objects are compared one by one
(keyed by apiVersion, kind, namespace and name) and every difference is named by object and
field path. These tests need the built helm and kubectl but no cluster: none asks for the
``kubeconfig_path`` fixture, which is what starts one.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from berth.localcluster.build import Binaries, ensure_built
from berth.release import install
from tests.support import REPO

CHART = REPO / "charts" / "berth"
Key = tuple[str, str, str, str]


@pytest.fixture(scope="module")
def binaries() -> Binaries:
    return ensure_built()


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv[:2])}: {result.stderr}"
    return result.stdout


def _objects(stream: str) -> dict[Key, dict[str, Any]]:
    objects: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(stream):
        if not doc:
            continue
        meta = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in objects, f"{key} rendered twice"
        objects[key] = doc
    return objects


def helm_template(binaries: Binaries, *flags: str) -> dict[Key, dict[str, Any]]:
    helm = str(binaries["helm"])
    rendered = _run(helm, "template", "berth", str(CHART), "--namespace", "berth-system", *flags)
    return _objects(rendered)


def kustomize(binaries: Binaries) -> dict[Key, dict[str, Any]]:
    return _objects(_run(str(binaries["kubectl"]), "kustomize", str(REPO / "manifests")))


def _paths(left: Any, right: Any, path: str) -> list[str]:
    """The field paths where two parsed objects differ."""
    if isinstance(left, dict) and isinstance(right, dict):
        return [
            found
            for key in sorted(set(left) | set(right))
            for found in _paths(left.get(key), right.get(key), f"{path}.{key}")
        ]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            found
            for index, (a, b) in enumerate(zip(left, right, strict=True))
            for found in _paths(a, b, f"{path}[{index}]")
        ]
    return [] if left == right else [path]


def differences(left: dict[Key, dict[str, Any]], right: dict[Key, dict[str, Any]]) -> set[str]:
    """``<kind>/<namespace>/<name>: <path>`` for every field that differs, and
    ``<kind>/<namespace>/<name>: only in ...`` for an object on one side."""
    found = set()
    for key in sorted(set(left) | set(right)):
        name = "/".join(part for part in key[1:] if part)
        if key not in right:
            found.add(f"{name}: only in the first")
        elif key not in left:
            found.add(f"{name}: only in the second")
        else:
            found.update(f"{name}: {path}" for path in _paths(left[key], right[key], ""))
    return found


def test_the_chart_renders_the_manifests(binaries: Binaries) -> None:
    # The CRDs are in the chart's crds/ folder, which helm template leaves out by default.
    chart = helm_template(binaries, "--include-crds")
    manifests = kustomize(binaries)
    assert len(manifests) > 20
    assert differences(chart, manifests) == set()


def test_replicas_and_image_change_those_fields_only(binaries: Binaries) -> None:
    default = helm_template(binaries)
    custom = helm_template(
        binaries,
        "--set=controller.replicas=3",
        "--set=image.repository=registry.example.com/platform/berth",
        "--set=image.tag=0.1.0-rc1",
        "--set=image.pullPolicy=Always",
    )
    container = ".spec.template.spec.containers[0]"
    assert differences(default, custom) == {
        "Deployment/berth-system/berth-controller: .spec.replicas",
        f"Deployment/berth-system/berth-controller: {container}.image",
        f"Deployment/berth-system/berth-controller: {container}.imagePullPolicy",
        f"DaemonSet/berth-system/berth-agent: {container}.image",
        f"DaemonSet/berth-system/berth-agent: {container}.imagePullPolicy",
    }
    deployment = custom[("apps/v1", "Deployment", "berth-system", "berth-controller")]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/platform/berth:0.1.0-rc1"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"


def test_resources_and_placement_values(binaries: Binaries) -> None:
    custom = helm_template(
        binaries,
        "--set=controller.resources.limits.memory=2Gi",
        "--set=controller.nodeSelector.node-role\\.kubernetes\\.io/control-plane=",
        "--set=agent.tolerations=null",
        "--set=agent.nodeSelector.kubernetes\\.io/os=linux",
    )
    pod = custom[("apps/v1", "Deployment", "berth-system", "berth-controller")]["spec"]
    spec = pod["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"memory": "2Gi"}
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    agent = custom[("apps/v1", "DaemonSet", "berth-system", "berth-agent")]["spec"]
    assert "tolerations" not in agent["template"]["spec"]
    assert agent["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_another_namespace_without_the_agent(binaries: Binaries) -> None:
    custom = helm_template(
        binaries,
        "--set=namespace=platform",
        "--set=createNamespace=false",
        "--set=agent.enabled=false",
    )
    kinds = {(kind, name) for _, kind, _, name in custom}
    assert ("Namespace", "platform") not in kinds
    assert not {name for _, name in kinds} & {"berth-agent", "berth-system"}
    assert {namespace for _, _, namespace, _ in custom} == {"", "platform"}
    for obj in custom.values():
        for subject in obj.get("subjects") or ():
            assert subject["namespace"] == "platform"
    operators = custom[("rbac.authorization.k8s.io/v1", "ClusterRole", "", "berth-operators")]
    assert ["platform"] in [rule.get("resourceNames") for rule in operators["rules"]]
    config = custom[("v1", "ConfigMap", "platform", "berth-scheduler-config")]
    profile = yaml.safe_load(config["data"]["scheduler-config.yaml"])
    assert profile["leaderElection"]["resourceNamespace"] == "platform"


def test_the_chart_lints(binaries: Binaries) -> None:
    _run(str(binaries["helm"]), "lint", "--strict", str(CHART))


def test_install_yaml_is_current(binaries: Binaries) -> None:
    current = (REPO / "install.yaml").read_text(encoding="utf-8")
    assert current == install.render(binaries["kubectl"]), f"regenerate: {install.COMMAND}"
