"""What a story is, and what it is given to play with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from berth.demo.console import Console


@dataclass(frozen=True)
class Context:
    """The console, progress lines, the local cluster's kwok nodes (the workload's), and the
    real node, where Berth runs and whose agent reports this machine's usage."""

    console: Console
    say: Callable[[str], None]
    nodes: tuple[str, ...]
    agent_node: str


@dataclass(frozen=True)
class Story:
    """One story of a design document. ``play`` shows it, checks its outcome (raising
    StoryFailed when it is not the documented one) and removes what it made, so that no
    story depends on another's leftovers."""

    key: str
    title: str
    play: Callable[[Context], None]
