"""The ``berth`` command's entry point: its modules imported with the cyclic collector off.

Importing the scheduler's path makes about 200,000 objects the collector tracks (the
Kubernetes client's generated models among them), and they live as long as the process.
With the collector on, those imports set off whole-heap collections that walk them and free
nearly nothing: 0.1-0.15 s of the scheduler's 1.0 s of imports, on the path of every start,
restart and failover. The imports are made with the collector off; what they built is then
frozen (out of the collector's generations, as the view is once synced: see
berth.kube.collector) and the collector is switched on again before the command runs.

For ``berth run`` with its scheduler, the list of every pod is asked for before the imports
(berth.kube.earlylist): the API server prepares it while they run.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence

from berth.kube import earlylist

# What `berth run` imports once its arguments are read: imported here, under the pause,
# since its start is what a failover or a rollout waits on.
RUN_MODULES = ("berth.run", "berth.scheduler.service")


def imported(argv: Sequence[str]) -> None:
    """The command's modules (``berth run``'s whole path) imported, the collector off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        importlib.import_module("berth.cli")
        if argv[:1] == ["run"]:
            for name in RUN_MODULES:
                importlib.import_module(name)
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def main() -> int:
    argv = sys.argv[1:]
    earlylist.start(argv)
    imported(argv)
    from berth.cli import main as command

    return command(argv)


if __name__ == "__main__":
    sys.exit(main())
