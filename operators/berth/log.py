"""structlog set-up shared by every Berth component.

Lines are JSON when not on a terminal (the Deployment), readable key=value pairs on one.
Callers bind the object's namespace/name (``log.bind(namespace=…, name=…)``) so every line
about an object says which one.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", json: bool | None = None) -> None:
    """Route structlog and the standard library's logging (kopf, aiohttp) to one stream."""
    use_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        # A line below the level is dropped before any processor runs: time-stamped and
        # merged first, it cost about 15 us, on hot paths that log each object at debug.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # JSON lines carry the traceback as text (the console renderer prints it).
                *([structlog.processors.format_exc_info] if use_json else []),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.stdlib.get_logger(name)
