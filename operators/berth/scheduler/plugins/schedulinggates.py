"""SchedulingGates: a pod with spec.schedulingGates waits outside the active queue."""

from __future__ import annotations

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import SUCCESS, Plugin, Status, unschedulable


class SchedulingGates(Plugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.gated:
            return SUCCESS
        gates = [g.get("name") for g in (pod.raw.get("spec") or {}).get("schedulingGates") or ()]
        return unschedulable(self.name, f"waiting for scheduling gates: {gates}", resolvable=False)
