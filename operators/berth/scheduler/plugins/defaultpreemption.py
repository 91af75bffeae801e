"""DefaultPreemption: make room for a pod by evicting pods of lower priority.

The search and the eviction are the shared evaluator's (``berth.scheduler.framework.preemption``);
this plugin's rule is kube-scheduler's: any pod of lower priority on the node may go, and
nothing but the node's filters has to hold once it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from berth.scheduler.cache.nodetable import Ints
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import (
    CycleState,
    Diagnosis,
    Handle,
    Plugin,
    PostFilterResult,
)
from berth.scheduler.framework.preemption import Evaluator, VictimPolicy, more_important_first


class DefaultPreemption(Plugin):
    name = "DefaultPreemption"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        # kube-scheduler deletes the victims it chose (after the DisruptionTarget condition),
        # in a task of their own (its async preemption).
        self.evaluator = Evaluator(self.name, args, handle, eviction_api=False, asynchronous=True)

    async def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> PostFilterResult:
        chosen = self.victim_policy(state, pod, diagnosis)
        return await self.evaluator.preempt_by(state, pod, diagnosis, chosen)

    def victim_policy(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[Ints, VictimPolicy, str] | str:
        """The nodes where evicting could help, this plugin's rule and the victims' message;
        or why it cannot preempt for the pod. A gang's preemption asks it member by member."""
        if diagnosis.prefilter is not None:
            return ""
        rows = self.evaluator.helpful_rows(diagnosis)
        return rows, self, "preempting to accommodate a higher priority pod"

    # -- VictimPolicy ----------------------------------------------------------------

    def potential_victims(self, pod: PodInfo, row: int) -> list[PodInfo]:
        pods = self.handle.view.nodes.pods[row].values()
        return [p for p in pods if p.priority < pod.priority]

    def blocking(self, pod: PodInfo, victims: Sequence[PodInfo]) -> tuple[str, ...]:
        return ()

    def reprieve_order(self, pod: PodInfo, victims: Sequence[PodInfo]) -> list[PodInfo]:
        return more_important_first(list(victims))

    def may_have_evicted(self, pod: PodInfo, other: PodInfo) -> bool:
        return other.priority < pod.priority

    def evicted(self, victim: PodInfo) -> None:
        pass  # the node table follows the watch; the nominated pod holds the room meanwhile

    def kept(self, victim: PodInfo) -> None:
        pass

    def why(self, victim: PodInfo) -> str:
        return ""  # its lower priority
