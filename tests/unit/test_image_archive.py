"""The image archive from a small root filesystem: a valid layout whose digests agree from
index to layer, and the same bytes every time."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from berth.image import spec
from berth.image.archive import write_archive
from berth.image.spec import ImageError, ImageName

NAME = ImageName("berth", "9.9.9")
EPOCH = 1_700_000_000


def fake_root(root: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    tool = root / "usr" / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    os.link(tool, root / "usr" / "bin" / "tool-again")
    (root / "bin").symlink_to("usr/bin")
    os.utime(root / "etc" / "passwd", (EPOCH + 999, EPOCH + 999))  # newer: clamped
    return root


def blob(layout: tarfile.TarFile, digest: str) -> bytes:
    member = layout.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
    assert member is not None
    data = member.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def read_json(layout: tarfile.TarFile, name: str) -> Any:
    member = layout.extractfile(name)
    assert member is not None
    return json.loads(member.read())


def test_the_layout_leads_from_the_index_to_the_layer(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    archive = write_archive(root, tmp_path / "image.tar", NAME, EPOCH, "amd64", {"a": "b"})
    with tarfile.open(archive.path) as layout:
        assert read_json(layout, "oci-layout") == {"imageLayoutVersion": "1.0.0"}
        index = read_json(layout, "index.json")
        (entry,) = index["manifests"]
        assert entry["annotations"] == {
            "io.containerd.image.name": "docker.io/library/berth:9.9.9",
            "org.opencontainers.image.ref.name": "9.9.9",
        }
        assert entry["digest"] == archive.manifest.digest
        manifest = json.loads(blob(layout, entry["digest"]))
        assert len(blob(layout, entry["digest"])) == entry["size"]
        config = json.loads(blob(layout, manifest["config"]["digest"]))
        (layer,) = manifest["layers"]
        compressed = blob(layout, layer["digest"])
        assert len(compressed) == layer["size"] == archive.layer.blob.size
        plain = gzip.decompress(compressed)
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(plain).hexdigest()]
        assert len(plain) == archive.layer.unpacked
        docker = read_json(layout, "manifest.json")
        assert docker == [
            {
                "Config": "blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:"),
                "RepoTags": ["berth:9.9.9"],
                "Layers": ["blobs/sha256/" + layer["digest"].removeprefix("sha256:")],
            }
        ]
    assert config["os"] == "linux"
    assert config["architecture"] == "amd64"
    run = config["config"]
    assert run["User"] == "65532:65532"
    assert run["Entrypoint"] == ["berth"]
    assert run["Cmd"] == ["run"]
    assert "PYTHONDONTWRITEBYTECODE=1" in run["Env"]
    assert any(e.startswith("PATH=") for e in run["Env"])
    assert run["Labels"] == {"a": "b"}


def test_the_layer_holds_the_tree_sorted_clamped_and_unnamed(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    archive = write_archive(root, tmp_path / "image.tar", NAME, EPOCH, "amd64", {})
    with tarfile.open(archive.path) as layout:
        layer = blob(layout, archive.layer.blob.digest)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tree:
        members = tree.getmembers()
    names = [m.name for m in members]
    assert names == [
        "bin",
        "etc",
        "etc/passwd",
        "tmp",
        "usr",
        "usr/bin",
        "usr/bin/tool",
        "usr/bin/tool-again",
    ]
    by_name = {m.name: m for m in members}
    assert by_name["bin"].issym()
    assert by_name["bin"].linkname == "usr/bin"
    assert by_name["usr/bin/tool-again"].islnk()
    assert by_name["usr/bin/tool-again"].linkname == "usr/bin/tool"
    assert by_name["usr/bin/tool"].mode == 0o755
    assert by_name["tmp"].mode == 0o1777
    assert all(m.mtime <= EPOCH for m in members)
    assert all(m.uname == "" and m.gname == "" for m in members)


def test_the_same_tree_gives_the_same_bytes(tmp_path: Path) -> None:
    first_root = fake_root(tmp_path / "one")
    second_root = fake_root(tmp_path / "two")  # other inodes, other times of creation
    os.utime(second_root / "usr" / "bin" / "tool", (EPOCH + 5, EPOCH + 5))
    first = write_archive(first_root, tmp_path / "one.tar", NAME, EPOCH, "amd64", {})
    second = write_archive(second_root, tmp_path / "two.tar", NAME, EPOCH, "amd64", {})
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.manifest == second.manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "one.tar", "two", "two.tar"]


def test_a_change_in_the_tree_changes_the_digest(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    first = write_archive(root, tmp_path / "a.tar", NAME, EPOCH, "amd64", {})
    (root / "etc" / "passwd").write_text("changed\n")
    second = write_archive(root, tmp_path / "b.tar", NAME, EPOCH, "amd64", {})
    assert first.layer.diff_id != second.layer.diff_id
    assert first.manifest.digest != second.manifest.digest


def test_a_device_or_pipe_is_refused_by_name(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    os.mkfifo(root / "tmp" / "pipe")
    with pytest.raises(ImageError, match="tmp/pipe"):
        write_archive(root, tmp_path / "image.tar", NAME, EPOCH, "amd64", {})
    assert not (tmp_path / "image.tar").exists()


def test_the_image_is_named_after_the_package_version() -> None:
    name = spec.image_name()
    assert name.reference == f"berth:{spec.package_version()}"
    assert name.fully_qualified == f"docker.io/library/berth:{spec.package_version()}"
