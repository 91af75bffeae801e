"""Building the image archive, once per version of its inputs.

The archive lands in ``.cache/image/`` beside a record of what it was built from (the
inputs' key, its digest, the Debian package list). ``ensure_image`` returns it at once
while the package's sources, the locks and the package list are unchanged, so the demo and
the tests can ask for it every run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from berth.image import rootfs, smoke, spec, wheels
from berth.image.archive import Archive, write_archive
from berth.image.spec import ImageError
from berth.localcluster.paths import REPO_DIR

Progress = Callable[[str], None]
TICK_SECONDS = 30.0
"""How often a long step (mmdebstrap's minute) says it is still going."""


@dataclass(frozen=True)
class Built:
    """What one build made: the record kept beside the archive."""

    key: str
    digest: str  # the manifest's: what containerd and registries show
    compressed: int
    unpacked: int
    commit: str
    epoch: int
    seconds: float

    def describe(self, archive: Path) -> str:
        return (
            f"{archive} ({_mb(self.compressed)} compressed, {_mb(self.unpacked)} unpacked), "
            f"digest {self.digest}"
        )


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def input_files(repo: Path = REPO_DIR) -> list[Path]:
    """Everything that decides the image's contents, but Debian's mirror."""
    lists = [spec.PACKAGES_FILE, spec.LOCK_FILE, spec.BUILD_LOCK_FILE]
    return [*wheels.source_files(repo), *(repo / p.relative_to(REPO_DIR) for p in lists)]


def input_key(repo: Path = REPO_DIR) -> str:
    """A short hash of the inputs: the archive is rebuilt when it changes."""
    digest = hashlib.sha256()
    for path in input_files(repo):
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def record_path(archive: Path) -> Path:
    return archive.with_suffix(".json")


def packages_path(archive: Path) -> Path:
    return archive.with_name(archive.stem + ".packages.txt")


def cached(archive: Path, key: str) -> Built | None:
    """The record of the archive at ``archive`` when it was built from inputs ``key``."""
    try:
        record = json.loads(record_path(archive).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if record.get("key") != key or not archive.is_file():
        return None
    try:
        return Built(**record)
    except TypeError:  # a record from an older build of the builder
        return None


@contextmanager
def _exclusive() -> Iterator[None]:
    """One build at a time in the cache: the demo and the tests may both ask at once."""
    spec.OUT_DIR.mkdir(parents=True, exist_ok=True)
    with (spec.OUT_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_image(progress: Progress | None = None) -> Path:
    """The archive of the image for the checkout, building it first if its inputs changed."""
    name = spec.image_name()
    archive = spec.archive_path(name)
    with _exclusive():
        record = cached(archive, input_key())
        if record is None:
            _build(progress or _stderr, archive)
        else:
            (progress or _stderr)(f"{name.reference} is up to date: {record.describe(archive)}")
    return archive


class _Steps:
    """Says each step of a build as it starts and, every TICK_SECONDS, the time gone, so
    that a long step never looks hung."""

    def __init__(self, say: Progress) -> None:
        self.say = say
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="image-progress", daemon=True)

    def __enter__(self) -> _Steps:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def __call__(self, doing: str) -> None:
        self.say(doing)

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self.say(f"  ... {self.seconds():.0f}s")


def commit_and_epoch(repo: Path = REPO_DIR) -> tuple[str, int]:
    """The commit built (``-dirty`` with uncommitted changes to the inputs), and the time
    every file in the image carries: SOURCE_DATE_EPOCH, else the commit's time."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=repo, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown"
    paths = [p.relative_to(repo).as_posix() for p in input_files(repo)]
    if commit != "unknown" and git("status", "--porcelain", "--", *paths):
        commit += "-dirty"
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct") or "0"
    return commit, int(epoch)


def build(progress: Progress | None = None) -> tuple[Archive, Built]:
    """Build the archive in .cache/image and its record, up to date or not."""
    with _exclusive():
        return _build(progress or _stderr, spec.archive_path(spec.image_name()))


def _build(say: Progress, archive_file: Path) -> tuple[Archive, Built]:
    with _Steps(say) as step:
        return _build_steps(step, archive_file)


def _build_steps(step: _Steps, archive_file: Path) -> tuple[Archive, Built]:
    name = spec.image_name()
    key = input_key()
    commit, epoch = commit_and_epoch()
    debian_arch, machine = rootfs.architecture()
    work = archive_file.parent / f"{archive_file.stem}.work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = work / "rootfs"
    try:
        mmdebstrap = rootfs.ensure_mmdebstrap(step)
        packages = rootfs.read_packages()
        step(f"building {name.reference}: Debian {spec.SUITE} packages (mmdebstrap, a minute)")
        rootfs.bootstrap(mmdebstrap, root, packages, epoch)
        step("building Berth's wheel and installing the locked wheels")
        wheel = wheels.build_berth_wheel(REPO_DIR, work, spec.OUT_DIR)
        wheels.install(root, wheel, machine, work)
        rootfs.add_user(root)
        rootfs.write_build_info(root, commit)
        step("compiling the bytecode")
        rootfs.compile_bytecode(root)
        step("smoke check: importing every module, ldd, berth run/agent --help")
        step.say(f"  {smoke.check(root)}")
        rootfs.clean(root)
        package_list = rootfs.package_list(root)
        step("writing the archive")
        labels = {
            "org.opencontainers.image.title": name.repository,
            "org.opencontainers.image.version": name.tag,
            "org.opencontainers.image.revision": commit,
        }
        image = write_archive(root, archive_file, name, epoch, debian_arch, labels)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = Built(
        key=key,
        digest=image.manifest.digest,
        compressed=image.layer.blob.size,
        unpacked=image.layer.unpacked,
        commit=commit,
        epoch=epoch,
        seconds=round(step.seconds(), 1),
    )
    packages_path(archive_file).write_text(package_list)
    record_path(archive_file).write_text(json.dumps(asdict(built), indent=2) + "\n")
    step.say(f"built {name.reference} in {built.seconds:.0f}s: {built.describe(archive_file)}")
    return image, built


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def build_twice(progress: Progress | None = None) -> tuple[Built, Built]:
    """Two builds from scratch; ImageError unless their archives are the same bytes."""
    say = progress or _stderr
    archive = spec.archive_path(spec.image_name())
    again = archive.with_name(f"{archive.stem}.again.tar")
    with _exclusive():
        _, first = _build(say, archive)
        say("building again to compare")
        _, second = _build(say, again)
    if second.digest != first.digest:
        raise ImageError(
            f"two builds differ: {first.digest} and {second.digest} "
            f"(compare {archive.name} with {again.name})"
        )
    for path in (again, record_path(again), packages_path(again)):
        path.unlink(missing_ok=True)
    say(f"reproducible: both builds are {first.digest}")
    return first, second
