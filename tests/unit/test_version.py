"""``berth version``: the package's version, the Python, and the commit, from the file an
image build writes or else from git."""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

import pytest

from berth import version
from berth.cli import main


def test_berth_version_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    line = capsys.readouterr().out
    assert re.fullmatch(
        rf"berth \S+ \(Python {re.escape(platform.python_version())}, commit \S+\)\n", line
    )


def test_an_image_says_the_commit_its_build_wrote(tmp_path: Path) -> None:
    (tmp_path / version.BUILD_INFO).write_text(json.dumps({"commit": "abc123"}))
    assert version.commit(tmp_path) == "abc123"


def test_without_a_build_file_or_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert version.commit(tmp_path) == "unknown"


def test_a_checkout_says_its_head() -> None:
    assert re.fullmatch(r"[0-9a-f]{40}", version.commit())
