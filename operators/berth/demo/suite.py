"""``berth demo --with-tests``: the test suite first, as ``./dev test`` runs it (without
its ruff and mypy steps), on a local cluster of its own that it stops when done."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable

from berth.demo.summary import Outcome
from berth.localcluster.paths import REPO_DIR

TITLE = "the test suite (pytest)"


def run_suite(say: Callable[[str], None]) -> Outcome:
    if importlib.util.find_spec("pytest") is None:
        return Outcome("t", TITLE, False, 0.0, "pytest is not installed: pip install -e '.[test]'")
    say("running the test suite first (pytest; it starts and stops a local cluster of its own)")
    started = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=REPO_DIR).returncode
    seconds = time.monotonic() - started
    return Outcome("t", TITLE, code == 0, seconds, "" if code == 0 else f"pytest exited {code}")
