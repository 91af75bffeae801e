"""Berth's wheels, built on this machine and installed into the image's root filesystem.

pip runs here, not in the image: the image needs no pip, and every wheel is checked against
the lock (``--require-hashes``). Berth's own wheel is built with the locked build backend
from a copy of the package's sources, so stray build output in the checkout never ships.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from berth.image import lock, spec
from berth.image.lock import Pin, target_options
from berth.image.process import run

# What Berth's wheel is built from (also what decides whether the image is rebuilt).
SOURCES = ("pyproject.toml", "README.md", "operators")


def source_files(repo: Path) -> list[Path]:
    """The package's source files, sorted, without bytecode or build leftovers."""
    files: list[Path] = []
    for name in SOURCES:
        top = repo / name
        candidates = top.rglob("*") if top.is_dir() else [top]
        files += [
            p
            for p in candidates
            if p.is_file()
            and "__pycache__" not in p.parts
            and not any(part.endswith(".egg-info") for part in p.parts)
        ]
    return sorted(files)


def _pip(python: Path | str, command: str, *options: str | Path) -> list[str | Path]:
    return [python, "-m", "pip", command, "--quiet", "--disable-pip-version-check", *options]


def _builder(cache: Path) -> Path:
    """A virtual environment with the locked build backend, kept in ``cache`` per version
    of the build lock; returns its Python."""
    lock_digest = hashlib.sha256(spec.BUILD_LOCK_FILE.read_bytes()).hexdigest()[:12]
    venv = cache / f"builder-{lock_digest}"
    python = venv / "bin" / "python"
    if (venv / "ready").is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv], "creating the wheel builder's environment")
    run(
        _pip(python, "install", "--no-deps", "--require-hashes", "-r", spec.BUILD_LOCK_FILE),
        "installing the locked build backend",
    )
    (venv / "ready").touch()
    return python


def build_berth_wheel(repo: Path, work: Path, cache: Path) -> Path:
    """Berth's wheel, built from a copy of its sources in ``work`` with the build backend
    kept in ``cache``; returns its path."""
    copy = work / "source"
    for path in source_files(repo):
        target = copy / path.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    out = work / "wheels"
    python = _builder(cache)
    run(
        _pip(python, "wheel", "--no-deps", "--no-build-isolation", f"--wheel-dir={out}", copy),
        "building Berth's wheel",
    )
    (wheel,) = out.glob("berth-*.whl")
    return wheel


def install(root: Path, berth_wheel: Path, machine: str, work: Path) -> None:
    """The locked wheels and Berth's into ``root``'s site-packages, then its commands."""
    digest = hashlib.sha256(berth_wheel.read_bytes()).hexdigest()
    version = berth_wheel.name.split("-")[1]
    pins = [*lock.read(spec.LOCK_FILE), Pin(spec.NAME, version, (f"sha256:{digest}",))]
    requirements = work / "requirements.txt"
    requirements.write_text(lock.render(pins, "The lock, and Berth's wheel built for this image"))
    site = root / spec.SITE_PACKAGES
    run(
        _pip(
            sys.executable,
            "install",
            "--no-deps",
            "--require-hashes",
            "--no-compile",
            "--no-warn-script-location",
            *target_options(machine),
            f"--find-links={berth_wheel.parent}",
            f"--target={site}",
            "-r",
            requirements,
        ),
        "installing the wheels into the root filesystem",
    )
    _move_commands(site / "bin", root / spec.BIN_DIR)


def _move_commands(scripts: Path, bin_dir: Path) -> None:
    """The console scripts to the image's PATH, run by the image's Python (pip wrote
    this machine's interpreter into them)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for script in sorted(scripts.iterdir()):
        _, _, body = script.read_text().partition("\n")
        target = bin_dir / script.name
        target.write_text(f"#!{spec.INTERPRETER}\n{body}")
        target.chmod(0o755)
    shutil.rmtree(scripts)
