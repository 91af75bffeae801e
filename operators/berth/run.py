"""``berth run``: the operators and the scheduler in one process, one event loop.

Each component is a coroutine that runs until the shared stop event is set; a component
that fails stops the others, so the Deployment restarts a process that is whole or not at
all.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from berth import log
from berth.kube import load_configuration

logger = log.get(__name__)


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None = None
    operators: bool = True
    scheduler: bool = True
    scheduler_config: str | None = None
    log_level: str = "info"


def run(options: RunOptions) -> int:
    log.configure(options.log_level)
    if not (options.operators or options.scheduler):
        logger.error("nothing to run: both the operators and the scheduler are switched off")
        return 2
    return asyncio.run(serve(options))


async def serve(options: RunOptions, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    configuration = await load_configuration(options.kubeconfig)

    components: dict[str, Coroutine[Any, Any, None]] = {}
    if options.operators:
        from berth.operators.runner import run_operators

        components["operators"] = run_operators(configuration, stop)
    if options.scheduler:
        from berth.scheduler import config as scheduler_config
        from berth.scheduler.service import run_scheduler

        settings = scheduler_config.load(options.scheduler_config)
        components["scheduler"] = run_scheduler(configuration, settings, stop)

    tasks = {asyncio.create_task(c, name=name): name for name, c in components.items()}
    logger.info("berth running", components=list(components))
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    failed = 0
    for task in done:
        if task.exception() is not None:
            failed = 1
            logger.error("component failed", component=tasks[task], error=repr(task.exception()))
    await asyncio.gather(*tasks, return_exceptions=True)
    logger.info("berth stopped")
    return failed
