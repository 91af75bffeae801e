"""The demo from start to end: cluster up, Berth installed, its processes started here, each
story played and timed, the summary, and everything stopped again unless ``--keep``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from berth.demo.components import Components, DemoError
from berth.demo.console import Console, StoryFailed
from berth.demo.install import (
    install,
    local_descheduler_config,
    local_scheduler_config,
    report_often,
)
from berth.demo.stories import STORIES
from berth.demo.story import Context, Story
from berth.demo.suite import run_suite
from berth.demo.summary import Outcome, duration, table
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.kubectl import Kubectl, KubectlError
from berth.localcluster.nodes import node_name
from berth.localcluster.paths import CACHE_DIR

MIN_NODES = 3
"""The load-aware story needs three nodes: the agent's, a warm one and a hot one."""


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = MIN_NODES
    keep: bool = False
    with_tests: bool = False


def demo(options: DemoOptions, say: Callable[[str], None]) -> int:
    """0 when every story (and the test suite, if asked for) was shown."""
    started = time.monotonic()
    outcomes = [run_suite(say)] if options.with_tests else []
    cluster = LocalCluster.default()
    state = CACHE_DIR / "demo"
    nodes = tuple(node_name(i) for i in range(options.nodes))
    components = Components(cluster.kubeconfig, state, nodes[0])
    components.stop_leftovers(say)
    console = Console(Kubectl(str(cluster.kubeconfig)))
    try:
        cluster.up(nodes=options.nodes, say=say)
        install(console, say)
        report_often(console, nodes[0], say)
        components.start(local_scheduler_config(state), local_descheduler_config(state), say)
        # `kubectl berth` is the plugin installed beside berth: kubectl finds it on PATH.
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        context = Context(console, say, nodes, components.scheduler_url)
        outcomes += [_play(story, context) for story in STORIES]
    except DemoError as err:
        say(f"error: {err}")
        outcomes.append(Outcome("-", "setting up", False, 0.0, str(err)))
    finally:
        if options.keep:
            components.keep(say)
            say(
                'local cluster left running (--keep): eval "$(berth cluster env)"; '
                "stop it with: berth cluster down"
            )
        else:
            components.stop()
            cluster.down()
            say("berth run, berth agent and the local cluster stopped")
    total = time.monotonic() - started
    console.heading(f"summary ({duration(total)})")
    console.write(table(outcomes, total))
    return 0 if outcomes and all(o.shown for o in outcomes) else 1


def _play(story: Story, context: Context) -> Outcome:
    context.console.heading(f"{story.key}. {story.title}")
    started = time.monotonic()
    try:
        story.play(context)
    except (StoryFailed, KubectlError, subprocess.TimeoutExpired) as err:
        seconds = time.monotonic() - started
        context.say(f"story {story.key} FAILED after {duration(seconds)}: {err}")
        return Outcome(story.key, story.title, False, seconds, str(err))
    seconds = time.monotonic() - started
    context.say(f"story {story.key} shown in {duration(seconds)}")
    return Outcome(story.key, story.title, True, seconds)
