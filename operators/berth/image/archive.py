"""The image archive: an OCI image layout in a tar, plus docker's ``manifest.json``.

Written with the standard library only, and byte for byte the same from the same root
filesystem: entries sorted, every timestamp clamped to the build's epoch, owners numeric
and unnamed, gzip without a name or a time. ``docker load``, ``podman load``,
``ctr images import`` and ``kind load image-archive`` all take it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from berth.image import spec
from berth.image.spec import ImageError, ImageName

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
GZIP_LEVEL = 6  # level 9 takes twice as long for a few percent


@dataclass(frozen=True)
class Blob:
    digest: str  # "sha256:<hex>"
    size: int

    @property
    def path(self) -> str:
        """Where the blob lives inside the layout."""
        return "blobs/sha256/" + self.digest.removeprefix("sha256:")


@dataclass(frozen=True)
class Layer:
    blob: Blob  # the gzip'd tar
    diff_id: str  # the digest of the tar before gzip
    unpacked: int  # the size of the tar before gzip


@dataclass(frozen=True)
class Archive:
    path: Path
    name: ImageName
    manifest: Blob  # its digest is the image's digest
    config: Blob
    layer: Layer


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.size += view.nbytes
        self.inner.write(view)
        return view.nbytes

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()


def _walk(root: Path) -> Iterator[Path]:
    """Every path under ``root``, parents before children, siblings sorted by name."""
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


def _members(root: Path, epoch: int) -> Iterator[tuple[tarfile.TarInfo, Path | None]]:
    """Tar headers of the tree, with the file whose bytes follow each regular one."""
    first_link: dict[tuple[int, int], str] = {}
    for path in _walk(root):
        st = path.lstat()
        info = tarfile.TarInfo(path.relative_to(root).as_posix())
        info.mtime = min(int(st.st_mtime), epoch)
        info.mode = stat.S_IMODE(st.st_mode)
        info.uid, info.gid = st.st_uid, st.st_gid
        info.uname = info.gname = ""
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISLNK(st.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            inode = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and inode in first_link:
                info.type = tarfile.LNKTYPE
                info.linkname = first_link[inode]
            else:
                first_link.setdefault(inode, info.name)
                info.size = st.st_size
                yield info, path
                continue
        else:
            raise ImageError(f"cannot put {info.name} in a layer: not a file, link or folder")
        yield info, None


def write_layer(root: Path, out: Path, epoch: int) -> Layer:
    """The tree under ``root`` as one gzip'd layer at ``out``."""
    with out.open("wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, compresslevel=GZIP_LEVEL, mtime=0
        ) as gz:
            plain = _Hashing(gz)
            with tarfile.open(
                fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8"
            ) as tar:
                for info, path in _members(root, epoch):
                    if path is None:
                        tar.addfile(info)
                    else:
                        with path.open("rb") as f:
                            tar.addfile(info, f)
    return Layer(Blob(compressed.digest, compressed.size), plain.digest, plain.size)


def _json(value: Mapping[str, Any] | list[Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _blob(data: bytes) -> Blob:
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data))


def _created(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(
    layer: Layer,
    epoch: int,
    architecture: str,
    labels: Mapping[str, str],
    run: spec.RunConfig = spec.RunConfig(),  # noqa: B008 - frozen, shared on purpose
) -> dict[str, Any]:
    """The image's configuration: what the runtime starts, as whom, and its layer."""
    return {
        "architecture": architecture,
        "os": "linux",
        "created": _created(epoch),
        "config": {
            "User": run.user,
            "Entrypoint": list(run.entrypoint),
            "Cmd": list(run.cmd),
            "Env": list(run.env),
            "WorkingDir": "/",
            "ExposedPorts": {port: {} for port in run.exposed_ports},
            "Labels": dict(labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created": _created(epoch), "created_by": "berth image build"}],
    }


def _descriptor(media_type: str, blob: Blob) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": blob.digest, "size": blob.size}


def _entry(name: str, size: int, epoch: int, folder: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, epoch, 0o755 if folder else 0o644
    info.uname = info.gname = ""
    if folder:
        info.type = tarfile.DIRTYPE
    return info


def write_archive(
    root: Path,
    out: Path,
    name: ImageName,
    epoch: int,
    architecture: str,
    labels: Mapping[str, str],
    run: spec.RunConfig = spec.RunConfig(),  # noqa: B008 - frozen, shared on purpose
) -> Archive:
    """The tree under ``root`` as a one-layer image named ``name``, written to ``out``."""
    layer_file = out.with_name(out.name + ".layer")
    partial = out.with_name(out.name + ".partial")
    try:
        layer = write_layer(root, layer_file, epoch)
        config_bytes = _json(image_config(layer, epoch, architecture, labels, run))
        config = _blob(config_bytes)
        manifest_bytes = _json(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": _descriptor(CONFIG_TYPE, config),
                "layers": [_descriptor(LAYER_TYPE, layer.blob)],
            }
        )
        manifest = _blob(manifest_bytes)
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    **_descriptor(MANIFEST_TYPE, manifest),
                    "platform": {"architecture": architecture, "os": "linux"},
                    "annotations": {
                        # containerd names the image after this one...
                        "io.containerd.image.name": name.fully_qualified,
                        # ...and OCI tools after this one (the tag).
                        "org.opencontainers.image.ref.name": name.tag,
                    },
                }
            ],
        }
        docker = [
            {
                "Config": config.path,
                "RepoTags": [name.reference],
                "Layers": [layer.blob.path],
            }
        ]
        small = {
            config.path: config_bytes,
            manifest.path: manifest_bytes,
            "index.json": _json(index),
            "manifest.json": _json(docker),
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
        }
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
            for folder in ("blobs", "blobs/sha256"):
                tar.addfile(_entry(folder, 0, epoch, folder=True))
            for path in sorted([*small, layer.blob.path]):
                if path == layer.blob.path:
                    with layer_file.open("rb") as f:
                        tar.addfile(_entry(path, layer.blob.size, epoch), f)
                else:
                    tar.addfile(_entry(path, len(small[path]), epoch), io.BytesIO(small[path]))
        partial.replace(out)
    finally:
        layer_file.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return Archive(out, name, manifest, config, layer)
