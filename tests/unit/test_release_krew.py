"""plugins/krew/berth.yaml: well-formed except for the placeholders a release fills, and
once filled from a release's archives, what krew's validation accepts."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.release import krew
from berth.release.generated import package_version

BASE = "https://downloads.example.com/berth/v0.1.0"


def _template() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(krew.MANIFEST.read_text())
    return manifest


@pytest.fixture
def archives(tmp_path: Path) -> Path:
    for platform in _template()["spec"]["platforms"]:
        name = platform["uri"].rsplit("/", 1)[-1]
        (tmp_path / name).write_bytes(f"archive {name}".encode())
    return tmp_path


def test_the_manifest_is_valid_but_for_its_placeholders() -> None:
    template = _template()
    found = krew.problems(template, krew.MANIFEST.stem)
    placeholders = len(template["spec"]["platforms"])
    # The version and one sha256 a platform: nothing else is left to the release.
    assert len(found) == 1 + placeholders, found
    assert all("@VERSION@" in p or "@SHA256@" in p for p in found)


def test_each_platform_names_its_own_archive() -> None:
    seen = set()
    for platform in _template()["spec"]["platforms"]:
        labels = platform["selector"]["matchLabels"]
        seen.add((labels["os"], labels["arch"]))
        assert (
            platform["uri"]
            == f"{krew.BASE_URL}/kubectl-berth_{labels['os']}_{labels['arch']}.tar.gz"
        )
        assert platform["sha256"] == krew.SHA256
        assert platform["bin"] == "kubectl-berth"
    assert len(seen) == len(_template()["spec"]["platforms"])


def test_filled_from_archives_it_is_what_krew_accepts(archives: Path) -> None:
    version = f"v{package_version()}"
    plugin = krew.fill(_template(), version, "https://berth.example.com", BASE, archives)
    assert krew.problems(plugin, "berth") == []
    first = plugin["spec"]["platforms"][0]
    assert first["uri"] == f"{BASE}/kubectl-berth_linux_amd64.tar.gz"
    expected = hashlib.sha256(b"archive kubectl-berth_linux_amd64.tar.gz").hexdigest()
    assert first["sha256"] == expected
    assert plugin["spec"]["version"] == version


def test_a_missing_archive_is_refused(archives: Path) -> None:
    (archives / "kubectl-berth_darwin_arm64.tar.gz").unlink()
    with pytest.raises(krew.ReleaseError, match="kubectl-berth_darwin_arm64"):
        krew.fill(_template(), "v0.1.0", "https://berth.example.com", BASE, archives)


def test_a_version_without_v_is_refused(archives: Path) -> None:
    with pytest.raises(krew.ReleaseError, match="semantic version"):
        krew.fill(_template(), "0.1.0", "https://berth.example.com", BASE, archives)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"sha256": "ABC"}, "sha256"),
        ({"bin": ""}, "bin is not set"),
        ({"selector": {"matchLabels": {"os": "linux", "distro": "debian"}}}, "only os and arch"),
        ({"selector": {}}, "the selector is empty"),
        ({"files": []}, "files is empty"),
    ],
)
def test_krews_platform_rules(change: dict[str, Any], problem: str) -> None:
    platform = {
        "selector": {"matchLabels": {"os": "linux", "arch": "amd64"}},
        "uri": f"{BASE}/kubectl-berth_linux_amd64.tar.gz",
        "sha256": "0" * 64,
        "bin": "kubectl-berth",
    }
    plugin = {
        "apiVersion": krew.API_VERSION,
        "kind": "Plugin",
        "metadata": {"name": "berth"},
        "spec": {"version": "v0.1.0", "shortDescription": "x", "platforms": [platform]},
    }
    assert krew.problems(plugin, "berth") == []
    platform.update(change)
    assert any(problem in p for p in krew.problems(plugin, "berth"))


def test_the_name_must_be_the_files() -> None:
    assert any("metadata.name" in p for p in krew.problems(_template(), "kubectl-berth"))
