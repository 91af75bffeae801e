"""kubectl as the demo shows it: the command a user would type, then what it printed.

Commands run against the local cluster's kubeconfig but are shown without it, with paths
relative to the repository, as they would be typed after ``eval "$(berth cluster env)"``.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from berth.localcluster.kubectl import Kubectl
from berth.localcluster.paths import REPO_DIR


class StoryFailed(Exception):
    """A story did not end as its design document says; the message says what was seen."""


class Console:
    """Runs kubectl; ``show`` also prints the command and its output for the reader."""

    def __init__(self, kubectl: Kubectl, out: TextIO | None = None) -> None:
        self.kubectl = kubectl
        self.out = out or sys.stdout

    def run(self, *args: str, stdin: str | None = None) -> str:
        """kubectl, not shown: set-up, checks and clean-up."""
        return self.kubectl(*args, stdin=stdin)

    def get_json(self, *args: str) -> Any:
        """``kubectl get ... -o json``, parsed."""
        return json.loads(self.run("get", *args, "-o", "json"))

    def show(
        self, *args: str, stdin: str | None = None, note: str = "", sections: Iterable[str] = ()
    ) -> str:
        """kubectl, shown: the command, then its output (only ``sections`` of it if given)."""
        output = self.kubectl(*args, stdin=stdin)
        return self._shown(args, output, note, sections)

    def show_plugin(self, name: str, *args: str) -> str:
        """A kubectl plugin, shown like any kubectl command."""
        return self._shown((name, *args), self.kubectl.plugin(name, *args), "", ())

    def _shown(self, args: tuple[str, ...], output: str, note: str, sections: Iterable[str]) -> str:
        wanted = tuple(sections)
        comment = note or (f"excerpt: {', '.join(s.rstrip(':') for s in wanted)}" if wanted else "")
        command = shlex.join(["kubectl", *(_relative(a) for a in args)])
        self.write(f"\n$ {command}" + (f"   # {comment}" if comment else "") + "\n")
        self.write(excerpt(output, wanted) if wanted else output)
        return output

    def heading(self, text: str) -> None:
        self.write(f"\n=== {text} ===\n")

    def write(self, text: str) -> None:
        self.out.write(text if text.endswith("\n") or not text else text + "\n")
        self.out.flush()


def _relative(arg: str) -> str:
    root = f"{REPO_DIR}/"
    return arg.replace(root, "") if root in arg else arg


def excerpt(output: str, sections: tuple[str, ...]) -> str:
    """The top-level sections of ``kubectl describe`` (or YAML) output that start with one of
    ``sections`` (``Status:``, ``Events:``), each up to the next unindented line."""
    kept: list[str] = []
    keeping = False
    for line in output.splitlines():
        if line and not line[0].isspace():
            keeping = line.startswith(sections)
        if keeping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def eventually(
    what: str, probe: Callable[[], str | None], timeout: float = 60.0, interval: float = 0.5
) -> None:
    """Until ``probe`` returns None. Meanwhile it returns what it sees, which the failure
    names, so a story that times out says how far it got."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if seen is None:
            return
        if time.monotonic() > deadline:
            raise StoryFailed(f"{what}: not within {timeout:.0f}s; last seen: {seen}")
        time.sleep(interval)


def check(condition: bool, failure: str) -> None:
    """A story's outcome, checked: raises StoryFailed with ``failure`` when false."""
    if not condition:
        raise StoryFailed(failure)
