"""The log set-up: a JSON line of a logged exception carries its traceback; a line below the
level costs no processing."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

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


def test_a_line_below_the_level_is_dropped_before_it_is_time_stamped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stamped: list[str] = []
    stamp = structlog.processors.TimeStamper.__call__

    def counting(self: object, logger: object, name: str, event: dict[str, object]) -> object:
        stamped.append(str(event["event"]))
        return stamp(self, logger, name, event)  # type: ignore[arg-type]

    monkeypatch.setattr(structlog.processors.TimeStamper, "__call__", counting)
    log.configure("warning", json=True)
    try:
        logger = log.get("berth.test.level")
        logger.info("below", namespace="a", name="p")
        logger.warning("at", namespace="a", name="p")
        lines = capsys.readouterr().err.strip().splitlines()
    finally:
        logging.getLogger().handlers.clear()
    assert stamped == ["at"]
    assert [json.loads(line)["event"] for line in lines] == ["at"]
