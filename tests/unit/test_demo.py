"""The demo's parts that need no cluster: excerpts, the summary, the local configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from berth.cli import main
from berth.demo import suite
from berth.demo.console import StoryFailed, eventually, excerpt
from berth.demo.install import (
    BALANCED_LABEL,
    MANIFESTS,
    RESERVING_SCHEDULER,
    demo_descheduler_config,
    demo_scheduler_config,
    high_thresholds,
    write_overlay,
)
from berth.demo.stories import STORIES
from berth.demo.summary import Outcome, table
from berth.descheduler import config as descheduler_config
from berth.localcluster.paths import REPO_DIR
from berth.scheduler.config import load as load_scheduler_config

DESCRIBE = """Name:         web-scale-up
Labels:       <none>
Spec:
  Owners:
    Label Selector:
Status:
  Phase:  Available
Events:
  Type    Reason     Age   From             Message
  Normal  Scheduled  2s    berth-scheduler  Reservation web-scale-up placed on node n1
"""


def test_an_excerpt_keeps_the_named_sections_whole() -> None:
    assert excerpt(DESCRIBE, ("Status:", "Events:")) == (
        "Status:\n"
        "  Phase:  Available\n"
        "Events:\n"
        "  Type    Reason     Age   From             Message\n"
        "  Normal  Scheduled  2s    berth-scheduler  Reservation web-scale-up placed on node n1\n"
    )


def test_the_summary_marks_each_story_and_says_why_one_failed() -> None:
    text = table(
        [
            Outcome("a", "a reservation held", True, 12.4),
            Outcome("b", "a stranger refused", False, 61.0, "vip bound: kwok-node-1"),
        ],
        134.0,
    )
    assert text.splitlines() == [
        "   story               result    time",
        "a  a reservation held  shown      12s",
        "b  a stranger refused  FAILED   1m01s",
        "     vip bound: kwok-node-1",
        "   1 of 2 shown                 2m14s",
    ]


def test_a_story_that_never_gets_there_says_how_far_it_got() -> None:
    with pytest.raises(StoryFailed, match="web bound: not within 0s; last seen: 1 of 2 bound"):
        eventually("web bound", lambda: "1 of 2 bound", timeout=0, interval=0)


def test_the_demo_runs_the_installed_profile_and_story_1_s_beside_it() -> None:
    installed = yaml.safe_load(
        yaml.safe_load((MANIFESTS / "scheduler-config.yaml").read_text())["data"][
            "scheduler-config.yaml"
        ]
    )
    demo = demo_scheduler_config()
    # Two replicas run in the cluster: leader election as installed.
    assert demo["leaderElection"] == installed["leaderElection"]
    assert demo["profiles"][:1] == installed["profiles"]
    # The second profile is the installed one with Story 1 on, for its story.
    reserving = demo["profiles"][1]
    story_1 = {"name": "Reservation", "args": {"reservePreemptedCapacity": True}}
    assert reserving["schedulerName"] == RESERVING_SCHEDULER
    installed_args = installed["profiles"][0].get("pluginConfig", [])
    assert reserving["pluginConfig"] == [*installed_args, story_1]
    assert reserving["plugins"] == installed["profiles"][0]["plugins"]


def test_the_demo_s_overlay_replaces_both_configurations_of_the_local_install(
    tmp_path: Path,
) -> None:
    kustomization = yaml.safe_load((write_overlay(tmp_path) / "kustomization.yaml").read_text())
    (base,) = kustomization["resources"]
    assert (tmp_path / base / "kustomization.yaml").is_file()
    replaced = {}
    for patch in kustomization["patches"]:
        (operation,) = yaml.safe_load(patch["patch"])
        replaced[patch["target"]["name"]] = yaml.safe_load(operation["value"])
    assert replaced == {
        "berth-scheduler-config": demo_scheduler_config(),
        "berth-descheduler-config": demo_descheduler_config(),
    }


def test_the_demos_descheduler_balances_only_the_migration_storys_nodes_and_quickly(
    tmp_path: Path,
) -> None:
    """The installed configuration, every 2 s, on the first hot report, on labelled nodes;
    berth run takes it beside the demo's scheduler configuration."""
    descheduler_file = tmp_path / "descheduler-config.yaml"
    descheduler_file.write_text(yaml.safe_dump(demo_descheduler_config()))
    scheduler_file = tmp_path / "scheduler-config.yaml"
    scheduler_file.write_text(yaml.safe_dump(demo_scheduler_config()))
    settings = descheduler_config.load(descheduler_file)
    descheduler_config.check_against_scheduler(settings, load_scheduler_config(scheduler_file))
    args = settings.low_node_load
    assert args is not None
    assert settings.interval_seconds == 2
    assert args.anomaly_condition is not None
    assert args.anomaly_condition.consecutive_abnormalities == 1
    assert args.node_selector is not None
    assert args.node_selector.matches({BALANCED_LABEL: "true"})
    assert not args.node_selector.matches({})
    assert high_thresholds() == {"cpu": 75, "memory": 95}


def test_the_stories_are_the_design_documents_and_why_pending_in_order() -> None:
    assert [s.key for s in STORIES] == ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]


def test_the_demo_needs_three_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--nodes", "2"])
    assert "the stories need at least 3 nodes" in capsys.readouterr().err


def test_with_tests_runs_pytest_from_the_repository_and_reports_its_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[list[str], Path]] = []

    def fake_run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
        ran.append((argv, cwd))
        return subprocess.CompletedProcess(argv, 1)

    monkeypatch.setattr(suite.subprocess, "run", fake_run)
    outcome = suite.run_suite(lambda _: None)
    assert ran == [([sys.executable, "-m", "pytest", "-q"], REPO_DIR)]
    assert (outcome.shown, outcome.failure) == (False, "pytest exited 1")
