"""The wheel locks: parsed strictly, made from pip's reports, and complete for the package."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest

from berth.image import lock, spec
from berth.image.lock import Pin
from berth.image.spec import ImageError
from berth.localcluster.paths import REPO_DIR

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_pins_are_read_across_continued_lines_and_comments() -> None:
    text = (
        f"# header\nNumPy==2.1.0 \\\n    --hash={B} \\\n    --hash={A}\norjson==3.10.1 --hash={A}\n"
    )
    assert lock.parse(text) == [
        Pin("numpy", "2.1.0", (A, B)),
        Pin("orjson", "3.10.1", (A,)),
    ]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (f"numpy>=2 --hash={A}\n", "line 1: not name==version: numpy>=2"),
        ("numpy==2.1.0\n", "line 1: numpy==2.1.0 has no sha256 hash"),
        ("# c\nnumpy==2.1.0 --hash=md5:00\n", "line 2: numpy==2.1.0 has no sha256 hash"),
    ],
)
def test_a_line_that_pins_nothing_or_hashes_nothing_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(ImageError, match=re.escape(complaint)):
        lock.parse(text)


def item(name: str, version: str, sha256: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": "https://x", "archive_info": {"hashes": {"sha256": sha256}}},
    }


def test_reports_of_two_machines_make_one_pin_with_both_hashes() -> None:
    x86 = {"install": [item("NumPy", "2.1.0", "b" * 64), item("attrs", "24.1", "a" * 64)]}
    arm = {"install": [item("numpy", "2.1.0", "a" * 64), item("attrs", "24.1", "a" * 64)]}
    pins = lock.pins_from_reports([x86, arm])
    assert pins == [Pin("attrs", "24.1", (A,)), Pin("numpy", "2.1.0", (A, B))]
    assert lock.parse(lock.render(pins, "a header\n\nover lines")) == pins


def test_machines_that_disagree_on_a_version_are_refused() -> None:
    x86 = {"install": [item("numpy", "2.1.0", "a" * 64)]}
    arm = {"install": [item("numpy", "2.0.0", "b" * 64)]}
    with pytest.raises(
        ImageError, match=re.escape("numpy resolves to 2.1.0 on one machine, 2.0.0")
    ):
        lock.pins_from_reports([x86, arm])


def test_the_target_options_name_every_glibc_up_to_bookworms() -> None:
    options = lock.target_options("x86_64")
    assert "--only-binary=:all:" in options
    assert "--platform=manylinux_2_36_x86_64" in options
    assert "--platform=manylinux_2_17_x86_64" in options
    assert "--platform=manylinux_2_37_x86_64" not in options


def test_the_checked_in_locks_pin_every_dependency_and_the_build_backend() -> None:
    with (REPO_DIR / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)

    def names(requirements: list[str]) -> set[str]:
        return {lock.normalize(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0]) for r in requirements}

    pinned = {pin.name for pin in lock.read(spec.LOCK_FILE)}
    assert names(project["project"]["dependencies"]) <= pinned
    backend = {pin.name for pin in lock.read(spec.BUILD_LOCK_FILE)}
    assert names(project["build-system"]["requires"]) <= backend
