"""Which pods hold capacity: the one definition the scheduler and the operators share.

A pod bound to a node holds what it requests there until it finishes (Succeeded or
Failed); a pod being deleted still holds it until it is gone.
"""

from __future__ import annotations

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def holds_capacity(node_name: str | None, phase: str | None) -> bool:
    return bool(node_name) and phase not in TERMINAL_PHASES
