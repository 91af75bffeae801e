"""The Helm chart is generated from manifests/ and crds/: the checked-in copy is current,
its defaults are the manifests' values, and what it cannot reproduce is refused by name.
tests/integration/test_chart.py renders it with helm and compares object by object."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.release import chart
from berth.release.generated import package_version
from tests.support import REPO

CHART = REPO / "charts" / "berth"


def _manifest(name: str, kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO / "manifests" / name).read_text())
    found: dict[str, Any] = next(d for d in docs if d and d["kind"] == kind)
    return found


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """A copy of manifests/ and crds/ to break."""
    shutil.copytree(REPO / "manifests", tmp_path / "manifests")
    shutil.copytree(REPO / "crds", tmp_path / "crds")
    return tmp_path / "manifests"


def test_the_chart_is_current() -> None:
    assert chart.check(CHART) == [], f"regenerate with: {chart.COMMAND}"


def test_defaults_are_the_manifests_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    deployment = _manifest("controller.yaml", "Deployment")
    daemonset = _manifest("agent.yaml", "DaemonSet")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert values["controller"]["replicas"] == deployment["spec"]["replicas"]
    assert values["controller"]["resources"] == container["resources"]
    assert f"{values['image']['repository']}:{package_version()}" == container["image"]
    assert values["image"]["tag"] == ""
    assert values["agent"]["tolerations"] == daemonset["spec"]["template"]["spec"]["tolerations"]
    assert values["controller"]["nodeSelector"] == {}
    # The configuration files come back unchanged from their `|` blocks.
    scheduler = _manifest("scheduler-config.yaml", "ConfigMap")
    assert values["scheduler"]["config"] == scheduler["data"]["scheduler-config.yaml"]
    descheduler = _manifest("descheduler-config.yaml", "ConfigMap")
    assert values["descheduler"]["config"] == descheduler["data"]["descheduler-config.yaml"]
    slo = _manifest("slo-controller-config.yaml", "ConfigMap")
    assert values["sloControllerConfig"] == slo["data"]
    assert values["namespace"] == _manifest("namespace.yaml", "Namespace")["metadata"]["name"]


def test_app_version_is_the_package_version() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == meta["version"] == package_version()


def test_crds_are_the_generated_ones() -> None:
    for path in sorted((REPO / "crds").glob("*.*.yaml")):
        copied = CHART / "crds" / path.name
        assert yaml.safe_load(copied.read_text()) == yaml.safe_load(path.read_text())


def test_templates_name_the_namespace_through_the_value() -> None:
    for path in (CHART / "templates").iterdir():
        assert "berth-system" not in path.read_text(), path.name


def test_a_stale_or_stray_file_is_reported_and_write_removes_strays(
    manifests: Path, tmp_path: Path
) -> None:
    out = tmp_path / "chart"
    chart.write(out, manifests)
    assert chart.check(out, manifests) == []
    (out / "templates" / "gone.yaml").write_text("kind: ConfigMap\n")
    (out / "values.yaml").write_text("controller: {replicas: 9}\n")
    problems = chart.check(out, manifests)
    assert any("gone.yaml: not generated" in p for p in problems)
    assert any("values.yaml: differs" in p for p in problems)
    chart.write(out, manifests)
    assert chart.check(out, manifests) == []


def test_a_manifests_change_changes_the_defaults(manifests: Path) -> None:
    path = manifests / "controller.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 4"))
    values = yaml.safe_load(chart.expected_files(manifests)["values.yaml"])
    assert values["controller"]["replicas"] == 4


def test_a_missing_field_is_refused(manifests: Path) -> None:
    path = manifests / "controller.yaml"
    path.write_text(path.read_text().replace("  replicas: 2\n", ""))
    with pytest.raises(
        chart.ChartError, match=r"Deployment berth-controller has no spec\.replicas"
    ):
        chart.expected_files(manifests)


def test_two_defaults_for_one_value_are_refused(manifests: Path) -> None:
    path = manifests / "agent.yaml"
    path.write_text(path.read_text().replace("IfNotPresent", "Always"))
    with pytest.raises(chart.ChartError, match=r"image\.pullPolicy"):
        chart.expected_files(manifests)


def test_an_image_tag_other_than_the_package_version_is_refused(manifests: Path) -> None:
    path = manifests / "agent.yaml"
    path.write_text(path.read_text().replace(f"berth:{package_version()}", "berth:9.9.9"))
    with pytest.raises(chart.ChartError, match=r"berth:9\.9\.9"):
        chart.expected_files(manifests)


def test_kustomization_fields_the_chart_does_not_reproduce_are_refused(manifests: Path) -> None:
    path = manifests / "kustomization.yaml"
    path.write_text(path.read_text() + "images:\n  - name: berth\n    newTag: dev\n")
    with pytest.raises(chart.ChartError, match="does not reproduce images"):
        chart.expected_files(manifests)


def test_the_command_line_writes_and_checks(tmp_path: Path) -> None:
    out = tmp_path / "chart"
    assert chart.main(["--check", str(out)]) == 1
    assert chart.main(["--write", str(out)]) == 0
    assert chart.main(["--check", str(out)]) == 0


def test_a_block_value_inside_a_list_item_is_refused() -> None:
    # `- resources: {{ ... }}` would render a map as a string: refused, not written.
    tokens = {"@@0@@": (chart.Form.BLOCK, ".Values.controller.resources")}
    with pytest.raises(chart.ChartError, match="must be a field of its own"):
        chart._template_text({"items": [{"resources": "@@0@@"}]}, tokens)
