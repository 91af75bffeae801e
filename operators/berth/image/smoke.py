"""The smoke check: the built root filesystem runs what ``berth run`` and ``berth agent`` do.

``berth --help`` alone passes on an image that lacks a library numpy links: the commands
import their heavy modules lazily. So every module of the package is imported, the
extension modules' libraries are looked up, and the commands are started, all inside the
root filesystem, as the image's user.
"""

from __future__ import annotations

from pathlib import Path

from berth.image import spec
from berth.image.process import run
from berth.image.rootfs import chroot
from berth.image.spec import ImageError

# The third-party modules the components import, compiled ones first.
THIRD_PARTY = (
    "numpy",
    "orjson",
    "pydantic_core",
    "xxhash",
    "yaml",
    "cryptography.hazmat.bindings._rust",
    "aiohttp",
    "kopf",
    "kubernetes_asyncio",
    "prometheus_client",
    "pydantic",
    "structlog",
)
# Then every module of the package: a module that fails to import fails the check.
IMPORT_EVERYTHING = f"""
import importlib, pkgutil, berth
for name in {THIRD_PARTY!r}:
    importlib.import_module(name)
modules = [m.name for m in pkgutil.walk_packages(berth.__path__, "berth.")]
for name in modules:
    importlib.import_module(name)
print(len(modules))
"""

FIND_EXTENSIONS = f"find /{spec.SITE_PACKAGES} -name '*.so*' -type f -exec ldd {{}} +"


def missing_libraries(ldd: str) -> list[str]:
    """The libraries ``ldd`` could not find, from its output for one or more files."""
    return sorted({line.split()[0] for line in ldd.splitlines() if "=> not found" in line})


def check(root: Path) -> str:
    """Raises ImageError naming what is broken; returns what ``berth version`` says."""
    imported = run(
        chroot(root, spec.INTERPRETER, "-c", IMPORT_EVERYTHING, user=spec.USER),
        "the smoke check's imports",
    )
    if int(imported.strip() or 0) == 0:
        raise ImageError("the smoke check imported no Berth module")
    linked = run(chroot(root, "/bin/sh", "-c", FIND_EXTENSIONS, user=spec.USER), "ldd")
    missing = missing_libraries(linked)
    if missing:
        raise ImageError(f"extension modules link missing libraries: {', '.join(missing)}")
    for command in ("run", "agent"):
        run(chroot(root, "berth", command, "--help", user=spec.USER), f"berth {command} --help")
    return run(chroot(root, "berth", "version", user=spec.USER), "berth version").strip()
