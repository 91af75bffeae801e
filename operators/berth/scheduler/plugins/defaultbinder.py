"""DefaultBinder: POST the pod's Binding subresource; a Reservation's binding is its status.

A Reservation's template goes through the same plugin points as a pod; what binds it to
its node is the placement written to its status (node, allocatable, phase), after which
the reservation book holds its capacity.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from berth.kube.write import api_message
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import SUCCESS, Code, CycleState, Handle, Plugin, Status
from berth.scheduler.placement import ReservationPlacement


class DefaultBinder(Plugin):
    name = "DefaultBinder"

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.placement = (
            ReservationPlacement(handle.view, handle.reservations, handle.writer)
            if handle.writer is not None
            else None
        )

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        writer = self.handle.writer
        assert writer is not None
        assert self.placement is not None
        if pod.reservation is not None:
            pre_allocated = bool((pod.reservation.get("spec") or {}).get("preAllocation"))
            if await self.placement.placed(pod, node, pre_allocated):
                return SUCCESS
            return Status(Code.ERROR, ("reservation status not written",), self.name)
        try:
            await writer.bind(pod, node)
        except ApiException as err:
            return Status(Code.ERROR, (f"binding rejected: {api_message(err)}",), self.name)
        writer.event(pod.raw, "Pod", "Scheduled", f"Successfully assigned {pod.key} to {node}")
        return SUCCESS
