"""Berth commands run as processes of their own for a test, always stopped after it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from berth.run import run_command


def _start(argv: list[str], log: Path, env: Mapping[str, str] | None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s; reaped either way."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


@contextlib.contextmanager
def process(
    argv: list[str], log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` with output to ``log``; stopped when the block ends."""
    child = _start(argv, log, env)
    try:
        yield child
    finally:
        _stop(child)


class BerthRun:
    """`berth run` that a test can start, crash (SIGKILL) and start again."""

    def __init__(
        self,
        kubeconfig: str,
        config: Path,
        log: Path,
        *,
        operators: bool = True,
        scheduler: bool = True,
        env: Mapping[str, str] | None = None,
        log_level: str = "info",
    ) -> None:
        self.command = run_command(
            kubeconfig, str(config), operators=operators, scheduler=scheduler, log_level=log_level
        )
        self.log = log
        self.env = env
        self.child: subprocess.Popen[bytes] | None = None

    @classmethod
    def configured(
        cls, kubeconfig: str, config: Mapping[str, Any], directory: Path, **kwargs: Any
    ) -> BerthRun:
        """`berth run` with ``config`` (a KubeSchedulerConfiguration) written to
        ``directory``, its log beside it."""
        path = directory / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(dict(config)))
        return cls(kubeconfig, path, directory / "berth.log", **kwargs)

    def start(self) -> BerthRun:
        self.child = _start(self.command, self.log, self.env)
        return self

    def kill(self) -> None:
        """As in a crash: nothing is flushed or cleaned up."""
        if self.child is not None:
            self.child.kill()
            self.child.wait()
            self.child = None

    def stop(self) -> None:
        if self.child is not None:
            _stop(self.child)
            self.child = None
