"""A side's process does not outlive the harness that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = """
import asyncio, sys
from berth.bench.process import SideProcess
from berth.bench.sides import Side

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]

async def main():
    side = SideProcess(Side("child", "child", SLEEP, (), None))
    await side.start()
    print(side.process.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_side_is_stopped_when_the_harness_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
