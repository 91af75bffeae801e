"""The ``--write``/``--check`` command line the release files' generators share: ``--write``
makes the files, ``--check`` exits 1 naming each stale one and the command that fixes it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def main(
    argv: Sequence[str] | None,
    *,
    command: str,
    description: str,
    write: Callable[[Path], None],
    problems: Callable[[Path], list[str]],
) -> int:
    """``--write PATH`` calls ``write``; ``--check PATH`` reports ``problems`` and exits 1
    when there are any."""
    parser = argparse.ArgumentParser(prog=command.split(" --")[0], description=description)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="PATH", help="write the files at PATH")
    mode.add_argument("--check", type=Path, metavar="PATH", help="fail if PATH is stale")
    args = parser.parse_args(argv)
    if args.write is not None:
        write(args.write)
        sys.stderr.write(f"wrote {args.write}\n")
        return 0
    found = problems(args.check)
    for problem in found:
        sys.stderr.write(f"{problem}\n")
    if found:
        sys.stderr.write(f"regenerate with: {command}\n")
        return 1
    return 0
