"""docs/crd-reference.md is what the CRDs generate, field for field."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.api import KINDS
from berth.api.crdref import COMMAND, main, render

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "crd-reference.md"


def test_the_page_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), f"run: {COMMAND}"


def test_every_kind_and_its_columns_are_on_the_page() -> None:
    page = render()
    for crd in KINDS:
        assert f"\n## {crd.kind}\n" in page
        for column in crd.printer_columns:
            assert f"| {column.name} | `{column.json_path}` |" in page


def test_fields_say_their_type_default_and_rules() -> None:
    page = render()
    assert "| `spec.allocatePolicy` | `Aligned` \\| `Restricted`, default `Aligned` |" in page
    assert "| `spec.min` | map of quantity, at most 128 entries |" in page
    assert "Rule: ttl and expires are mutually exclusive: set at most one of them." in page
    assert "| `spec.ttl` | duration |" in page


def test_check_fails_on_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "crd-reference.md"
    stale.write_text("# CRD reference\n")
    assert main(["--check", str(stale)]) == 1
    assert COMMAND in capsys.readouterr().err
    assert main(["--write", str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
