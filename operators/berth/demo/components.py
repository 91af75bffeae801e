"""The Berth processes the demo runs on this machine, outside the cluster and against its
kubeconfig: ``berth run`` (scheduler and operators) and ``berth agent`` for one kwok node.

Their logs go to ``.cache/demo/``. With ``--keep`` they outlive the demo; their pids are
recorded so that the next demo stops them before it starts its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT = 90.0
STOP_GRACE = 15.0


class DemoError(RuntimeError):
    """The demo could not set itself up; the message says why."""


@dataclass
class Components:
    """``berth run`` and ``berth agent``, started and stopped together."""

    kubeconfig: Path
    state: Path
    agent_node: str
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # berth run's HTTP address (probes, metrics, decision records), once started.
    scheduler_url: str = ""

    @property
    def _pidfile(self) -> Path:
        return self.state / "processes.json"

    def start(
        self, scheduler_config: Path, descheduler_config: Path, say: Callable[[str], None]
    ) -> None:
        """``berth run`` until it is ready (informers synced), then the agent."""
        port = _free_port()
        self.scheduler_url = f"http://127.0.0.1:{port}"
        say(
            "starting berth run (scheduler, operators and descheduler) here; "
            f"log in {self._log('run')}"
        )
        self._spawn(
            "run",
            "run",
            f"--config={scheduler_config}",
            f"--descheduler-config={descheduler_config}",
            f"--health-address=127.0.0.1:{port}",
        )
        self._wait_ready(port)
        say(f"starting berth agent --node-name {self.agent_node}: this machine's real usage")
        self._spawn("agent", "agent", f"--node-name={self.agent_node}")

    def stop(self) -> None:
        """SIGTERM each, SIGKILL after a grace period."""
        for child in self.children.values():
            child.terminate()
        for child in self.children.values():
            try:
                child.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children.clear()
        self._pidfile.unlink(missing_ok=True)

    def keep(self, say: Callable[[str], None]) -> None:
        pids = " ".join(str(child.pid) for child in self.children.values())
        say(f"berth run and berth agent left running (--keep); stop them with: kill {pids}")

    def stop_leftovers(self, say: Callable[[str], None]) -> None:
        """Processes an earlier demo left running with ``--keep``."""
        try:
            pids = [int(pid) for pid in json.loads(self._pidfile.read_text())]
        except (OSError, ValueError, TypeError):
            return
        for pid in pids:
            if _runs_against(pid, self.kubeconfig):
                say(f"stopping process {pid}, left running by an earlier demo")
                _stop(pid)
        self._pidfile.unlink(missing_ok=True)

    def _log(self, name: str) -> Path:
        return self.state / f"{name}.log"

    def _spawn(self, name: str, *args: str) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "berth.cli", *args, f"--kubeconfig={self.kubeconfig}"]
        with self._log(name).open("ab") as log:
            self.children[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stopped by the demo, not by the terminal's Ctrl-C
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._pidfile.write_text(json.dumps([c.pid for c in self.children.values()]))

    def _wait_ready(self, port: int) -> None:
        child = self.children["run"]
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise DemoError(f"berth run exited with {child.returncode}: {self._tail('run')}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                url = f"http://127.0.0.1:{port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(0.3)
        raise DemoError(f"berth run not ready after {READY_TIMEOUT:.0f}s: {self._tail('run')}")

    def _tail(self, name: str) -> str:
        lines = self._log(name).read_text(errors="replace").splitlines()
        return " | ".join(lines[-3:]) or "(no output)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runs_against(pid: int, kubeconfig: Path) -> bool:
    """Still a Berth process of this cluster (pids get reused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"berth.cli" in argv and f"--kubeconfig={kubeconfig}".encode() in argv


def _stop(pid: int) -> None:
    """Stop a process that is not our child (its parent, init, reaps it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and _exists(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
