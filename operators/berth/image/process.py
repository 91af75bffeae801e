"""Running the build's tools: their failure becomes one line that says which and why."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from berth.image.spec import ImageError


def run(
    argv: Sequence[str | Path],
    what: str,
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """``argv``'s standard output; ImageError naming ``what`` and its last error line."""
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
        )
    except OSError as err:
        raise ImageError(f"{what}: cannot run {argv[0]}: {err.strerror}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines()]
        last = next((line for line in reversed(lines) if line), f"exit {done.returncode}")
        raise ImageError(f"{what} failed: {last}")
    return done.stdout
