"""Building the local cluster's binaries from Go modules, once per source version.

The Go modules under tools/localcluster pin k8s.io/kubernetes and kwok. Binaries land in
``.cache/bin/<key>/`` where the key hashes the modules' go.mod, go.sum and Go
sources: a second start reuses them, and a change to the pins builds afresh.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from berth.localcluster.paths import CACHE_DIR, TOOLS_DIR

MIN_GO = (1, 26)
TICK_SECONDS = 30.0
"""How often a running build says how long it has been going."""

# (module directory relative to TOOLS_DIR, packages to build).
TARGETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        ".",
        (
            "./cmd/berth-apiserver",
            "k8s.io/kubernetes/cmd/kubectl",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes/cmd/kubelet",
        ),
    ),
    ("kwok", ("sigs.k8s.io/kwok/cmd/kwok", "./cmd/kwok-stages")),
    ("helm", ("helm.sh/helm/v3/cmd/helm",)),
)
BINARIES = (
    "berth-apiserver",
    "kubectl",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kwok",
    "kwok-stages",
    "helm",
)


class BuildError(RuntimeError):
    """The binaries could not be built; the message is one line saying why."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the built local-cluster binaries."""

    directory: Path

    def __getitem__(self, name: str) -> Path:
        return self.directory / name

    def complete(self) -> bool:
        return all((self.directory / name).is_file() for name in BINARIES)


def source_key() -> str:
    """A short hash of everything that decides what the build produces."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in TOOLS_DIR.rglob("*")
        if p.is_file() and (p.name in ("go.mod", "go.sum") or p.suffix == ".go")
    )
    for path in files:
        digest.update(str(path.relative_to(TOOLS_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cached() -> Binaries:
    """Where the binaries for the current sources live (built or not)."""
    return Binaries(CACHE_DIR / "bin" / source_key())


def ensure_built(progress: Callable[[str], None] | None = None) -> Binaries:
    """The binaries for the current sources, building them first if needed."""
    binaries = cached()
    if binaries.complete():
        return binaries
    say = progress or _stderr
    go = _check_go()
    say(
        "building the local cluster from Go modules: once per version of tools/localcluster "
        "(about 10 minutes on a fresh 2-core machine; later runs reuse .cache/bin)"
    )
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=_ensure_dir(CACHE_DIR / "bin")))
    started = time.monotonic()
    try:
        with _ticking(BuildProgress(say, staging, started)) as tracker:
            for module, packages in TARGETS:
                _build_module(go, TOOLS_DIR / module, packages, tracker)
        if binaries.directory.exists():
            shutil.rmtree(binaries.directory)
        staging.rename(binaries.directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"built the local cluster binaries in {_elapsed(time.monotonic() - started)}")
    return binaries


@dataclass
class BuildProgress:
    """What a build is doing, said as it changes: each binary as it appears, and every
    ``TICK_SECONDS`` the elapsed time, so that a long compile or link never looks hung."""

    say: Callable[[str], None]
    out: Path
    started: float
    doing: str = "starting"
    tick: float = TICK_SECONDS
    clock: Callable[[], float] = time.monotonic
    _last_said: float = field(init=False)
    _seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._last_said = self.started

    def tell(self, message: str, now: float | None = None) -> None:
        """Say a line; the next tick is counted from it."""
        self._last_said = self.clock() if now is None else now
        self.say(message)

    def poll(self, now: float) -> None:
        """Called about once a second (from a thread): new binaries, else the tick."""
        for name in BINARIES:
            if name not in self._seen and (self.out / name).is_file():
                self._seen.add(name)
                count = f"{len(self._seen)}/{len(BINARIES)}"
                self.tell(f"  built {name} ({count}) at {self._at(now)}", now)
        if now - self._last_said >= self.tick:
            self.tell(f"  still building: {self.doing}; {self._at(now)} elapsed", now)

    def _at(self, now: float) -> str:
        return _elapsed(now - self.started)


@contextmanager
def _ticking(progress: BuildProgress) -> Iterator[BuildProgress]:
    """Polls ``progress`` once a second in a thread for as long as the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(1.0):
            progress.poll(time.monotonic())

    thread = threading.Thread(target=loop, name="build-progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
        progress.poll(time.monotonic())  # binaries that appeared since the last poll


def _elapsed(seconds: float) -> str:
    """``45s``, ``4m05s``."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def _build_module(
    go: str, module: Path, packages: tuple[str, ...], progress: BuildProgress
) -> None:
    say, out = progress.tell, progress.out
    env = _go_env()
    names = ", ".join(p.rsplit("/", 1)[-1] for p in packages)
    say(f"resolving the packages of {names} (fetching Go modules if needed)")
    progress.doing = f"fetching Go modules for {names}"
    listed = subprocess.run(
        [go, "list", "-deps", *packages],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        raise BuildError(_explain(listed.stderr))
    total = max(1, len(listed.stdout.split()))
    say(f"compiling {names} ({total} packages; those compiled before come from Go's cache)")
    progress.doing = f"compiling {names}"
    ldflags = " ".join(("-s -w", *_version_ldflags(module)))
    command = [go, "build", "-v", "-trimpath", f"-ldflags={ldflags}", "-o", f"{out}/", *packages]
    proc = subprocess.Popen(
        command, cwd=module, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert proc.stderr is not None
    compiled, last_shown, errors = 0, -10, []
    for line in proc.stderr:
        line = line.rstrip()
        if re.match(r"^[\w.\-]+(/[\w.\-~]+)*$", line):
            compiled += 1
            percent = min(99, 100 * compiled // total)
            progress.doing = f"compiling {names}, {percent}% ({line})"
            if percent >= last_shown + 10:
                last_shown = percent
                say(f"  {percent:3d}% compiled ({line})")
        else:
            errors.append(line)
    if proc.wait() != 0:
        raise BuildError(_explain("\n".join(errors)))


def _version_ldflags(module: Path) -> tuple[str, ...]:
    """Kubernetes binaries built from a module report the version it pins, not
    ``v0.0.0-master``: a kubelet registers it on its Node, and clients compare it."""
    gomod = module / "go.mod"
    text = gomod.read_text() if gomod.is_file() else ""
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v(\d+)\.(\d+)\.\S+)", text, re.M)
    if pinned is None:
        return ()
    package = "k8s.io/component-base/version"
    return (
        f"-X {package}.gitVersion={pinned[1]}",
        f"-X {package}.gitMajor={pinned[2]}",
        f"-X {package}.gitMinor={pinned[3]}",
    )


def _explain(stderr: str) -> str:
    """One line that says what is missing, from go's error output."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    fetching = ("dial tcp", "no such host", "connection refused", "proxy", "module lookup")
    for line in lines:
        if any(s in line.lower() for s in fetching):
            return f"cannot fetch Go modules from the module proxy: {line}"
    for line in lines:
        if "go.mod requires go" in line or "toolchain" in line:
            return f"this Go is too old for the pinned Kubernetes: {line}"
    return "go build failed: " + (lines[-1] if lines else "no output")


def _check_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not installed (needs Go >= {}.{} on PATH to build the local cluster)".format(
                *MIN_GO
            )
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise BuildError(
            f"Go {out.strip() or '?'} is too old: the local cluster needs Go >= "
            f"{MIN_GO[0]}.{MIN_GO[1]}"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-mod=readonly -buildvcs=false")
    return env


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
