"""The log set-up: a JSON line of a logged exception carries its traceback."""

from __future__ import annotations

import json
import logging

import pytest

from berth import log


def test_a_logged_exception_keeps_its_traceback_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure("info", json=True)
    try:
        try:
            raise ValueError("the cause")
        except ValueError:
            log.get("berth.test").exception("post-filter failed", namespace="a", name="p")
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    finally:
        logging.getLogger().handlers.clear()
    assert line["event"] == "post-filter failed"
    assert "ValueError: the cause" in line["exception"]
    assert "Traceback" in line["exception"]
