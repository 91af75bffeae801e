"""What a gang workload's trial counts: a gang is placed when every one of its members is
bound (the last member's binding is its time), and a scheduler that placed it as a gang
says so on its PodGroup (the ``PodGroupScheduled`` condition both schedulers write)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from berth.gang.workload import SCHEDULED


def gang_completions(bound: Mapping[str, float], groups: Mapping[str, str]) -> list[float]:
    """When each gang had all its members bound, in order; a gang with a member not bound
    is not counted. ``bound``: pod name to its binding time; ``groups``: every measured
    pod's name to its PodGroup's."""
    members: dict[str, list[str]] = {}
    for pod, group in groups.items():
        members.setdefault(group, []).append(pod)
    return sorted(
        max(bound[pod] for pod in pods)
        for pods in members.values()
        if all(pod in bound for pod in pods)
    )


def scheduled_groups(pod_groups: Iterable[Mapping[str, Any]]) -> int:
    """How many of the PodGroups have ``PodGroupScheduled`` True."""
    return sum(
        any(
            c.get("type") == SCHEDULED and c.get("status") == "True"
            for c in (group.get("status") or {}).get("conditions") or []
        )
        for group in pod_groups
    )
