"""The ``berth`` command's entry: its modules imported without a collection, then frozen."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from berth.run import run_command

REPO = Path(__file__).resolve().parents[2]

# Imports berth run's path in a fresh interpreter, by the entry's way or plainly, and says
# how many whole-heap collections the imports made and what was frozen after.
PROBE = """
import gc, json, sys
if sys.argv[1] == "entry":
    from berth import entry
    entry.imported(["run"])
else:
    import berth.cli, berth.run, berth.scheduler.service
print(json.dumps({
    "full collections": gc.get_stats()[2]["collections"],
    "frozen": gc.get_freeze_count(),
    "enabled": gc.isenabled(),
    "imported": [m for m in ("berth.cli", "berth.run", "berth.scheduler.service")
                 if m in sys.modules],
}))
"""


def probe(way: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, way], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_scheduler_s_imports_make_no_whole_heap_collection_and_are_frozen() -> None:
    plain = probe("plain")
    assert plain["full collections"] > 0, f"the plain imports collect the whole heap: {plain}"
    assert plain["frozen"] == 0
    entry = probe("entry")
    assert entry["full collections"] == 0, entry
    assert entry["frozen"] > 100_000, entry
    assert entry["enabled"] is True, "the collector is on again before the command runs"
    assert entry["imported"] == ["berth.cli", "berth.run", "berth.scheduler.service"]


def test_the_command_and_its_process_start_at_the_entry() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["berth"] == "berth.entry:main"
    assert run_command("kubeconfig")[1:4] == ["-m", "berth.entry", "run"]
