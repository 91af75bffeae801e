"""The image's root filesystem: Debian's packages by mmdebstrap, made reproducible.

mmdebstrap installs the Essential set and the packages listed in ``image/packages.txt``
from bookworm, with the merged-usr hook (the ``usrmerge`` package would pull in perl).
Afterwards what differs from one build to the next is removed (logs, apt's caches,
``*-old`` backups, the host's resolv.conf and hostname), bytecode is compiled as hashes of
the sources (the root filesystem is read-only at run time, and timestamps are clamped),
and the installed package list is recorded, since bookworm's point releases move it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from berth.image import spec
from berth.image.process import run
from berth.image.spec import ImageError

MIRRORS = (
    f"deb http://deb.debian.org/debian {spec.SUITE} main",
    f"deb http://deb.debian.org/debian {spec.SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {spec.SUITE}-security main",
)
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")
# Documentation and translations nobody reads in a container (licences are kept).
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
# Emptied: the runtime mounts its own, or they hold what one build did (logs, caches).
EMPTIED = ("dev", "proc", "sys", "run", "tmp", "var/tmp", "var/log", "var/cache/apt")
# Removed: copies of the build machine's, or backups and caches that differ per build.
REMOVED = (
    "etc/hostname",
    "etc/resolv.conf",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
    "var/cache/ldconfig/aux-cache",
    "var/lib/apt/lists",
)
REMOVED_SUFFIXES = ("-old",)
PYTHON_DIRS = (f"usr/lib/python{spec.PYTHON}", "usr/lib/python3/dist-packages", spec.SITE_PACKAGES)


def read_packages(path: Path = spec.PACKAGES_FILE) -> list[str]:
    """The Debian packages the image adds to the Essential set."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def ensure_mmdebstrap(say: Callable[[str], None]) -> str:
    """mmdebstrap's path, installing it from Debian's packages first when it is missing."""
    found = shutil.which("mmdebstrap")
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise ImageError("mmdebstrap is missing: run `apt-get install mmdebstrap` as root")
    say("installing mmdebstrap (apt-get)")
    run(["apt-get", "update", "-q"], "apt-get update")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "install", "-y", "-q", "mmdebstrap"], "installing mmdebstrap", env=env)
    found = shutil.which("mmdebstrap")
    if found is None:
        raise ImageError("mmdebstrap is still missing after apt-get install mmdebstrap")
    return found


def bootstrap(mmdebstrap: str, root: Path, packages: list[str], epoch: int) -> None:
    """Debian's packages into ``root`` (which must not exist yet)."""
    if os.geteuid() != 0:
        raise ImageError("building the root filesystem needs root (mmdebstrap, chroot)")
    argv = [mmdebstrap, "--quiet", "--variant=essential", f"--include={','.join(packages)}"]
    argv += [f"--hook-dir={MERGED_USR_HOOK}", '--aptopt=Acquire::Languages "none"']
    argv += [f"--dpkgopt={option}" for option in DPKG_EXCLUDES]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    run([*argv, spec.SUITE, root, *MIRRORS], "mmdebstrap", env=env)


def chroot(root: Path, *argv: str, user: str | None = None) -> list[str]:
    """The command as it would run in the image: its PATH, its environment, nothing else."""
    spec_user = [f"--userspec={user}"] if user else []
    return ["chroot", *spec_user, str(root), "/usr/bin/env", "-i", *spec.ENV, *argv]


def compile_bytecode(root: Path) -> None:
    """Every module compiled once, checked by nothing at run time: the files never change
    in a read-only image, and hash-based bytecode does not depend on timestamps."""
    dirs = [f"/{d}" for d in PYTHON_DIRS if (root / d).is_dir()]
    argv = chroot(root, "PYTHONHASHSEED=0", spec.INTERPRETER, "-m", "compileall", "-q", "-f")
    run(
        [*argv, "--invalidation-mode=unchecked-hash", *dirs],
        "compiling the bytecode",
    )


def add_user(root: Path) -> None:
    """The image's user by name as well as by number: Python asks the password database
    for a home directory when HOME is unset, and fails for an unknown user."""
    uid, gid = (int(n) for n in spec.USER.split(":"))
    home = root / "home" / spec.USER_NAME
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, uid, gid)
    with (root / "etc" / "passwd").open("a") as passwd:
        passwd.write(f"{spec.USER_NAME}:x:{uid}:{gid}::/home/{spec.USER_NAME}:/usr/sbin/nologin\n")
    with (root / "etc" / "group").open("a") as group:
        group.write(f"{spec.USER_NAME}:x:{gid}:\n")


def write_build_info(root: Path, commit: str) -> None:
    package = root / spec.SITE_PACKAGES / spec.NAME
    (package / spec.BUILD_INFO).write_text(json.dumps({"commit": commit}) + "\n")


def clean(root: Path) -> None:
    """What would make two builds of the same inputs differ, or is not the image's."""
    for name in EMPTIED:
        folder = root / name
        for child in folder.iterdir() if folder.is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    for name in REMOVED:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for top in ("etc", "var"):
        for path in (root / top).rglob("*"):
            if path.name.endswith(REMOVED_SUFFIXES) and path.is_file():
                path.unlink()


def package_list(root: Path) -> str:
    """``name=version`` of every installed Debian package, one a line, sorted."""
    out = run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Package}=${Version}\\n"],
        "listing the installed packages",
    )
    return "".join(f"{line}\n" for line in sorted(out.split()))


def architecture() -> tuple[str, str]:
    """(Debian's and the OCI name, the machine name wheels are tagged with)."""
    debian = run(["dpkg", "--print-architecture"], "dpkg --print-architecture").strip()
    machines = {"amd64": "x86_64", "arm64": "aarch64"}
    if debian not in machines:
        raise ImageError(f"no image for {debian}: the lock has wheels for {', '.join(machines)}")
    return debian, machines[debian]
