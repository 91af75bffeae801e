"""The first build of the local cluster takes minutes: it says what it is doing meanwhile."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from berth.cli import main
from berth.localcluster import build

# Stands in for go: a version, three packages to list, and a build that writes one empty
# binary per package into the -o directory, naming each package on stderr as go -v does.
FAKE_GO = """#!/bin/sh
case "$1" in
  env) echo go1.26.0 ;;
  list) printf 'example.com/a\\nexample.com/b\\nexample.com/c\\n' ;;
  build)
    while [ "$1" != "-o" ]; do shift; done
    out="$2"; shift 2
    for package in "$@"; do
      echo "example.com/$(basename "$package")" >&2
      touch "$out/$(basename "$package")"
    done ;;
esac
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(go.stat().st_mode | stat.S_IEXEC)
    tools = tmp_path / "tools"
    for module in ("kwok", "helm"):
        (tools / module).mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(build, "TOOLS_DIR", tools)
    monkeypatch.setattr(build, "CACHE_DIR", tmp_path / "cache")
    return go


def test_a_build_names_each_step_and_each_binary(
    fake_go: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "build"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("berth: building the local cluster from Go modules")
    assert any("resolving the packages of berth-apiserver, kubectl" in line for line in lines)
    assert any(line.startswith("berth: compiling kwok, kwok-stages (3 packages") for line in lines)
    built = [line.split()[2] for line in lines if line.startswith("berth:   built ")]
    assert sorted(built) == sorted(build.BINARIES)
    assert lines[-1].startswith("berth: built the local cluster binaries in ")
    assert build.cached().complete()


def test_a_second_run_reuses_the_binaries_silently(
    fake_go: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "build"]) == 0
    capsys.readouterr()
    fake_go.unlink()  # no go needed any more
    assert main(["cluster", "build"]) == 0
    assert capsys.readouterr().err == ""


def test_a_long_step_says_the_elapsed_time_every_tick(tmp_path: Path) -> None:
    said: list[str] = []
    progress = build.BuildProgress(said.append, tmp_path, started=100.0)
    progress.doing = "compiling kubectl, 40% (k8s.io/kubectl/pkg/cmd)"
    progress.poll(110.0)
    assert said == []
    progress.poll(130.0)
    progress.poll(140.0)
    progress.tell("   50% compiled (k8s.io/kubectl/pkg/cmd/get)", now=150.0)
    progress.poll(179.0)
    progress.poll(181.0)
    assert said == [
        "  still building: compiling kubectl, 40% (k8s.io/kubectl/pkg/cmd); 30s elapsed",
        "   50% compiled (k8s.io/kubectl/pkg/cmd/get)",
        "  still building: compiling kubectl, 40% (k8s.io/kubectl/pkg/cmd); 1m21s elapsed",
    ]


def test_each_binary_is_named_once_as_it_appears(tmp_path: Path) -> None:
    said: list[str] = []
    progress = build.BuildProgress(said.append, tmp_path, started=0.0)
    (tmp_path / "kubectl").touch()
    progress.poll(65.0)
    progress.poll(66.0)
    assert said == ["  built kubectl (1/8) at 1m05s"]  # and no tick: a line was just said
