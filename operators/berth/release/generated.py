"""What the release files' generators share: the package version they are made for, YAML
written as people write it, and the ``--write``/``--check`` command line (``--check`` exits 1
naming each stale file and the command that fixes it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import yaml


def package_version() -> str:
    """The chart's appVersion, the image tag the manifests run, the plugin's version."""
    return metadata.version("berth")


class LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (configuration files, descriptions) as ``|`` blocks."""


def _literal(dumper: yaml.representer.BaseRepresenter, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


LiteralDumper.add_representer(str, _literal)


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
