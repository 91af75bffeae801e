"""`berth run` as a real process for a test: started, killed or stopped, always reaped."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from berth.run import run_command


class BerthRun:
    """One `berth run` process at a time, its output appended to ``log``."""

    def __init__(
        self,
        kubeconfig: str,
        config: Path,
        log: Path,
        *,
        operators: bool = True,
        scheduler: bool = True,
    ) -> None:
        self.command = run_command(
            kubeconfig, str(config), operators=operators, scheduler=scheduler, log_level="info"
        )
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> BerthRun:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def kill(self) -> None:
        """SIGKILL: nothing is flushed or cleaned up, as in a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
