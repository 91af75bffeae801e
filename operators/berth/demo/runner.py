"""The demo from start to end: the local cluster up with its real node, Berth installed
from its image and running there as pods, each story played and timed, the summary, and
everything stopped again unless ``--keep``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from berth.demo.console import Console, StoryFailed
from berth.demo.install import report_often, write_overlay
from berth.demo.stories import STORIES
from berth.demo.story import Context, Story
from berth.demo.suite import run_suite
from berth.demo.summary import Outcome, duration, table
from berth.image.spec import ImageError
from berth.localcluster.cluster import LocalCluster
from berth.localcluster.errors import ClusterError
from berth.localcluster.incluster import InstallError, install
from berth.localcluster.kubectl import Kubectl, KubectlError
from berth.localcluster.nodes import node_name
from berth.localcluster.paths import CACHE_DIR
from berth.localcluster.realnode import RealNodeError

MIN_NODES = 3
"""The load-aware story needs three kwok nodes: a cool, a warm and a hot one."""
SETUP_ERRORS = (ClusterError, ImageError, InstallError, RealNodeError, KubectlError)


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
    nodes = tuple(node_name(i) for i in range(options.nodes))
    console = Console(Kubectl(str(cluster.kubeconfig)))
    try:
        cluster.up(nodes=options.nodes, say=say, real_node=True)
        installed = install(cluster, say, write_overlay(CACHE_DIR / "demo" / "install"))
        outcomes.append(
            Outcome(
                "-",
                f"Berth running as pods on {installed.node} (leader {installed.leader})",
                True,
                time.monotonic() - started,
            )
        )
        report_often(console, installed.node, say)
        # `kubectl berth` is the plugin installed beside berth: kubectl finds it on PATH.
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        context = Context(console, say, nodes, installed.node)
        outcomes += [_play(story, context) for story in STORIES]
    except SETUP_ERRORS as err:
        say(f"error: {err}")
        outcomes.append(Outcome("-", "setting up", False, 0.0, str(err)))
    finally:
        if options.keep:
            say(
                'local cluster and Berth left running (--keep): eval "$(berth cluster env)"; '
                "kubectl -n berth-system get pods; stop it with: berth cluster down"
            )
        else:
            cluster.down()
            say("the local cluster, its real node and Berth's pods stopped")
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
