"""The wheel locks: every package the image installs, pinned to a version and its hashes.

Without a lock the same commit would install whatever PyPI serves on the day. The locks are
pip requirement files (``name==version --hash=sha256:…``) so that pip checks every wheel
with ``--require-hashes``, in the archive build and in the Dockerfile alike. They are
refreshed from pip's own resolution (``pip install --dry-run --report``), once per target
machine, so one lock serves x86_64 and aarch64.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berth.image import spec
from berth.image.process import run
from berth.image.spec import ImageError
from berth.localcluster.paths import REPO_DIR

MACHINES = ("x86_64", "aarch64")
GLIBC = (2, 36)  # bookworm's: wheels for this glibc or older run in the image
OLDEST_GLIBC_MINOR = 5  # manylinux1's
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", sorted

    def line(self) -> str:
        hashes = "".join(f" \\\n    --hash={h}" for h in self.hashes)
        return f"{self.name}=={self.version}{hashes}"


def normalize(name: str) -> str:
    """The name as PyPI compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str) -> list[Pin]:
    """The pins of a lock; ImageError for a line that pins nothing or has no hash."""
    joined = re.sub(r"\\\n", " ", text)
    pins = []
    for number, raw in enumerate(joined.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        match = _PIN.match(requirement)
        if match is None:
            raise ImageError(f"lock line {number}: not name==version: {requirement}")
        hashes = sorted(o.removeprefix("--hash=") for o in options if o.startswith("--hash="))
        if not hashes or any(not h.startswith("sha256:") for h in hashes):
            raise ImageError(f"lock line {number}: {requirement} has no sha256 hash")
        pins.append(Pin(normalize(match[1]), match[2], tuple(hashes)))
    return pins


def read(path: Path) -> list[Pin]:
    try:
        return parse(path.read_text())
    except FileNotFoundError:
        raise ImageError(f"no lock at {path.name}: write it with `berth image lock`") from None


def pins_from_reports(reports: Iterable[Mapping[str, Any]]) -> list[Pin]:
    """One pin per package from pip's installation reports (one report per machine),
    with the hash of every wheel chosen; ImageError when machines disagree on a version."""
    versions: dict[str, str] = {}
    hashes: dict[str, set[str]] = {}
    for report in reports:
        for item in report["install"]:
            name = normalize(item["metadata"]["name"])
            version = item["metadata"]["version"]
            if versions.setdefault(name, version) != version:
                raise ImageError(
                    f"{name} resolves to {versions[name]} on one machine, {version} on another"
                )
            archive = item["download_info"].get("archive_info") or {}
            sha256 = (archive.get("hashes") or {}).get("sha256")
            if sha256 is None:
                raise ImageError(f"{name} {version} has no sha256 in pip's report")
            hashes.setdefault(name, set()).add(f"sha256:{sha256}")
    return [Pin(n, versions[n], tuple(sorted(hashes[n]))) for n in sorted(versions)]


def render(pins: Sequence[Pin], header: str) -> str:
    comments = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comments + "".join(pin.line() + "\n" for pin in pins)


def target_options(machine: str) -> list[str]:
    """pip's options for wheels that run on the image's Python on ``machine``."""
    major, newest = GLIBC
    # pip takes each glibc a wheel may be tagged for, not "this one or older".
    platforms = [
        f"--platform=manylinux_{major}_{minor}_{machine}"
        for minor in range(newest, OLDEST_GLIBC_MINOR - 1, -1)
    ]
    return [
        "--only-binary=:all:",
        "--implementation=cp",
        f"--python-version={spec.PYTHON}",
        f"--abi=cp{spec.PYTHON.replace('.', '')}",
        *platforms,
    ]


def _resolve(requirements: Sequence[str], machine: str | None) -> dict[str, Any]:
    """pip's resolution of ``requirements`` for ``machine`` (None: pure-Python tools)."""
    with tempfile.TemporaryDirectory(prefix="berth-lock-") as scratch:
        report = Path(scratch) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
        argv += ["--quiet", "--disable-pip-version-check", f"--report={report}"]
        if machine is not None:
            argv += [*target_options(machine), f"--target={scratch}/target"]
        run([*argv, *requirements], f"resolving the wheels for {machine or 'the build'}")
        result: dict[str, Any] = json.loads(report.read_text())
        return result


def _project(repo: Path) -> dict[str, Any]:
    with (repo / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


RUN_HEADER = """Berth's run-time wheels in the image, each with the hash of its wheel for every
machine the image is built for ({machines}, CPython {python}, glibc {glibc}).
Generated from pyproject.toml's dependencies by `berth image lock`; do not edit.
Install: pip install --require-hashes --no-deps -r image/requirements.lock"""

BUILD_HEADER = """The build backend that makes Berth's own wheel for the image (pyproject.toml's
build-system requires), pinned so that the wheel's metadata does not drift.
Generated by `berth image lock`; do not edit."""


def refresh(repo: Path = REPO_DIR) -> tuple[Path, Path]:
    """Rewrite both locks from the current PyPI; returns their paths."""
    project = _project(repo)
    reports = [_resolve(project["project"]["dependencies"], m) for m in MACHINES]
    run_lock = repo / spec.LOCK_FILE.relative_to(REPO_DIR)
    header = RUN_HEADER.format(
        machines=", ".join(MACHINES), python=spec.PYTHON, glibc="{}.{}".format(*GLIBC)
    )
    run_lock.write_text(render(pins_from_reports(reports), header))
    backend = _resolve(project["build-system"]["requires"], None)
    build_lock = repo / spec.BUILD_LOCK_FILE.relative_to(REPO_DIR)
    build_lock.write_text(render(pins_from_reports([backend]), BUILD_HEADER))
    return run_lock, build_lock
