"""The build's bookkeeping without building: the inputs' key, the cache, the clean-up of a
root filesystem, and the Dockerfile reading the same definition."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from berth.image import build, rootfs, smoke, spec
from berth.image.spec import ImageError
from berth.localcluster.paths import REPO_DIR


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout holding what the image is built from."""
    (tmp_path / "operators" / "berth").mkdir(parents=True)
    (tmp_path / "operators" / "berth" / "cli.py").write_text("print()\n")
    (tmp_path / "operators" / "berth" / "__pycache__").mkdir()
    (tmp_path / "operators" / "berth" / "__pycache__" / "cli.pyc").write_bytes(b"x")
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "1.2.3"\n')
    (tmp_path / "README.md").write_text("readme\n")
    shutil.copytree(spec.SPEC_DIR, tmp_path / "image")
    return tmp_path


def test_the_key_follows_the_sources_the_locks_and_the_package_list(repo: Path) -> None:
    first = build.input_key(repo)
    assert build.input_key(repo) == first
    (repo / "operators" / "berth" / "__pycache__" / "cli.pyc").write_bytes(b"y")
    assert build.input_key(repo) == first  # bytecode is not a source
    keys = {first}
    for changed in ("operators/berth/cli.py", "image/packages.txt", "image/requirements.lock"):
        path = repo / changed
        path.write_text(path.read_text() + "# changed\n")
        keys.add(build.input_key(repo))
    assert len(keys) == 4


def test_the_archive_is_reused_only_for_the_key_it_was_built_from(tmp_path: Path) -> None:
    archive = tmp_path / "berth-1.tar"
    record = {
        "key": "k1",
        "digest": "sha256:d",
        "compressed": 1,
        "unpacked": 2,
        "commit": "c",
        "epoch": 0,
        "seconds": 1.0,
    }
    build.record_path(archive).write_text(json.dumps(record))
    assert build.cached(archive, "k1") is None  # no archive beside the record
    archive.write_bytes(b"tar")
    cached = build.cached(archive, "k1")
    assert cached is not None
    assert cached.digest == "sha256:d"
    assert build.cached(archive, "k2") is None


def test_ensure_image_builds_only_when_the_inputs_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spec, "OUT_DIR", tmp_path)
    archive = spec.archive_path(spec.image_name())
    archive.write_bytes(b"tar")
    record = {"key": build.input_key(), "digest": "sha256:d", "compressed": 1, "unpacked": 2}
    record |= {"commit": "c", "epoch": 0, "seconds": 1.0}
    build.record_path(archive).write_text(json.dumps(record))

    def refuse(say: object, archive: Path) -> None:
        raise ImageError("built again")

    monkeypatch.setattr(build, "_build", refuse)
    assert build.ensure_image() == archive
    build.record_path(archive).write_text(json.dumps(record | {"key": "stale"}))
    with pytest.raises(ImageError, match="built again"):
        build.ensure_image()


def test_clean_leaves_nothing_one_build_differs_in(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for folder in ("dev/pts", "tmp", "var/log/apt", "var/lib/apt/lists", "var/lib/dpkg", "etc"):
        (root / folder).mkdir(parents=True)
    for name in (
        "var/log/dpkg.log",
        "var/log/apt/history.log",
        "var/lib/apt/lists/bookworm_InRelease",
        "var/lib/dpkg/status-old",
        "var/lib/dpkg/status",
        "etc/resolv.conf",
        "etc/hostname",
        "etc/passwd",
        "tmp/leftover",
    ):
        (root / name).write_text("x")
    (root / "dev" / "fd").symlink_to("/proc/self/fd")
    rootfs.clean(root)
    left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    assert left == [
        "dev",
        "etc",
        "etc/passwd",
        "tmp",
        "var",
        "var/lib",
        "var/lib/apt",
        "var/lib/dpkg",
        "var/lib/dpkg/status",
        "var/log",
    ]


def test_the_package_list_skips_comments() -> None:
    packages = rootfs.read_packages()
    assert "python3" in packages
    assert "libstdc++6" in packages  # numpy links it
    assert all(" " not in p and not p.startswith("#") for p in packages)


def test_the_dockerfile_builds_from_the_same_definition() -> None:
    dockerfile = (REPO_DIR / "Dockerfile").read_text()
    for path in (spec.PACKAGES_FILE, spec.LOCK_FILE, spec.BUILD_LOCK_FILE):
        assert path.relative_to(REPO_DIR).as_posix() in dockerfile
    assert "--require-hashes" in dockerfile
    assert f"USER {spec.USER}" in dockerfile
    assert f"ENTRYPOINT {json.dumps(list(spec.ENTRYPOINT))}" in dockerfile
    assert f"CMD {json.dumps(list(spec.CMD))}" in dockerfile
    assert f"FROM debian:{spec.SUITE}-slim" in dockerfile
    assert "--invalidation-mode=unchecked-hash" in dockerfile
    for variable in spec.ENV[1:]:
        assert re.search(rf"\b{re.escape(variable)}\b", dockerfile), variable


def test_ldd_output_names_the_missing_libraries() -> None:
    output = (
        "/x/_multiarray_umath.so:\n"
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibstdc++.so.6 => not found\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
        "/x/_orjson.so:\n"
        "\tlibstdc++.so.6 => not found\n"
        "\tlibgcc_s.so.1 => not found\n"
    )
    assert smoke.missing_libraries(output) == ["libgcc_s.so.1", "libstdc++.so.6"]
    assert smoke.missing_libraries("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == []


def test_without_mmdebstrap_and_without_root_the_build_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rootfs.shutil, "which", lambda name: None)
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 1000)
    with pytest.raises(
        ImageError, match=r"^mmdebstrap is missing: run `apt-get install mmdebstrap`"
    ):
        rootfs.ensure_mmdebstrap(print)
