"""``berth demo``: the local cluster with Berth installed, and the design documents' stories
played on it one after another, each checked and shown with the kubectl lines that prove it.

A story is one module in :mod:`berth.demo.stories`; the runner (:mod:`berth.demo.runner`)
brings up the cluster, installs Berth, starts ``berth run`` and ``berth agent`` on this
machine, plays every story, prints a summary and leaves nothing running unless asked.
"""

from berth.demo.runner import DemoOptions, demo

__all__ = ["DemoOptions", "demo"]
