"""What the image is: its name, its run-time configuration, and the files that define it.

The lock and the Debian package list live in the checked-in ``image/`` folder, so that the
archive build and the Dockerfile read the same definition.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from berth import version
from berth.localcluster.paths import CACHE_DIR, REPO_DIR

SPEC_DIR = REPO_DIR / "image"
PACKAGES_FILE = SPEC_DIR / "packages.txt"
LOCK_FILE = SPEC_DIR / "requirements.lock"
BUILD_LOCK_FILE = SPEC_DIR / "build-requirements.lock"
OUT_DIR = CACHE_DIR / "image"

NAME = "berth"
PYTHON = "3.11"
SUITE = "bookworm"
# Where the wheels go: Debian's python3 searches it, and no Debian package writes there.
SITE_PACKAGES = f"usr/local/lib/python{PYTHON}/dist-packages"
BIN_DIR = "usr/local/bin"
INTERPRETER = "/usr/bin/python3"
# Written into the installed package: the image has no .git to ask for its commit.
BUILD_INFO = version.BUILD_INFO

USER = "65532:65532"  # numeric, so that runAsNonRoot can verify it
USER_NAME = "nonroot"
ENTRYPOINT = ("berth",)
CMD = ("run",)
ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
EXPOSED_PORTS = ("10251/tcp",)


class ImageError(RuntimeError):
    """The image could not be built; the message is one line saying why."""


@dataclass(frozen=True)
class ImageName:
    """The name the archive carries, as ``docker load`` and containerd record it."""

    repository: str
    tag: str

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def fully_qualified(self) -> str:
        """containerd's name for it, which the kubelet looks up for ``berth:<tag>``: a
        repository without a registry is Docker Hub's library's."""
        first = self.repository.split("/", 1)[0]
        if "/" in self.repository and ("." in first or ":" in first or first == "localhost"):
            return self.reference
        return f"docker.io/library/{self.reference}"


@dataclass(frozen=True)
class RunConfig:
    """What a runtime starts from the image, and as whom."""

    user: str = USER
    entrypoint: tuple[str, ...] = ENTRYPOINT
    cmd: tuple[str, ...] = CMD
    env: tuple[str, ...] = ENV
    exposed_ports: tuple[str, ...] = EXPOSED_PORTS


def package_version(repo: Path = REPO_DIR) -> str:
    """The version pyproject.toml gives the package: the image's tag."""
    with (repo / "pyproject.toml").open("rb") as f:
        tag: str = tomllib.load(f)["project"]["version"]
    return tag


def image_name(repo: Path = REPO_DIR) -> ImageName:
    return ImageName(NAME, package_version(repo))


def archive_path(name: ImageName) -> Path:
    return OUT_DIR / f"{name.repository}-{name.tag}.tar"
