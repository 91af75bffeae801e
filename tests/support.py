"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    """Wait until ``check()`` is true; fail the test when ``within`` seconds pass first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"not true within {within:.0f}s: {check.__qualname__}")
        await asyncio.sleep(0.2)
