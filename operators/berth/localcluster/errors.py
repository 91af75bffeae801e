"""The one error of the local cluster a person sees: a line saying what failed and what to
do; ``berth`` prints it without a traceback."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The local cluster could not do what was asked; the message says why."""
