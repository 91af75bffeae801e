"""What ``berth version`` says: the package's version, the Python running it, the commit.

An image has no .git to ask: its build writes the commit into the installed package
(``build-info.json``); a checkout asks git.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

BUILD_INFO = "build-info.json"


@dataclass(frozen=True)
class Version:
    version: str
    python: str
    commit: str

    def line(self) -> str:
        return f"berth {self.version} (Python {self.python}, commit {self.commit})"


PACKAGE_DIR = Path(__file__).resolve().parent


def commit(package: Path = PACKAGE_DIR) -> str:
    """The commit the image was built from, else the checkout's, else ``unknown``."""
    info = package / BUILD_INFO
    if info.is_file():
        built: str = json.loads(info.read_text())["commit"]
        return built
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=package, capture_output=True, text=True
        )
    except OSError:  # no git, as in the image
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def package_version() -> str:
    try:
        return metadata.version("berth")
    except metadata.PackageNotFoundError:
        return "unknown"


def current() -> Version:
    return Version(package_version(), platform.python_version(), commit())
