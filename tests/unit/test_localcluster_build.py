"""The local cluster's build says in one line what is missing, and exits non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.cli import main
from berth.localcluster import build


def test_without_go_the_build_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "CACHE_DIR", tmp_path)  # nothing cached: a build is needed
    monkeypatch.setenv("PATH", str(tmp_path))  # no go on it
    assert main(["cluster", "build"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "berth: error: Go is not installed (needs Go >= 1.26 on PATH to build the local cluster)"
    ]


def test_unreachable_modules_are_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "empty-module-cache"))
    monkeypatch.setenv("GOPROXY", "off")
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    assert main(["cluster", "build"]) == 1
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("berth: error:")
    ]
    assert len(errors) == 1
    assert errors[0].startswith("berth: error: cannot fetch Go modules from the module proxy:")
    assert "GOPROXY=off" in errors[0]


def test_the_cache_key_follows_the_go_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go.mod").write_text("module x\n")
    (tools / "go.sum").write_text("a v1 h1:x\n")
    monkeypatch.setattr(build, "TOOLS_DIR", tools)
    first = build.source_key()
    assert build.source_key() == first
    (tools / "go.sum").write_text("a v2 h1:y\n")
    assert build.source_key() != first
