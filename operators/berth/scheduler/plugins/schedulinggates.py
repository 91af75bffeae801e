"""SchedulingGates: a pod with spec.schedulingGates waits outside the active queue."""

from __future__ import annotations

from berth.scheduler.framework import SUCCESS, Plugin, Status, unschedulable
from berth.scheduler.podinfo import PodInfo


class SchedulingGates(Plugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.gated:
            return SUCCESS
        gates = [g.get("name") for g in (pod.raw.get("spec") or {}).get("schedulingGates") or ()]
        return unschedulable(self.name, f"waiting for scheduling gates: {gates}", resolvable=False)
