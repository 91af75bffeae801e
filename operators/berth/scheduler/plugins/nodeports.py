"""NodePorts: a host port can be bound once per node, protocol and address."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import HostPort, PodInfo
from berth.scheduler.framework.clusterevents import NODE, POD, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    Plugin,
    Status,
    Verdict,
    skip,
)

REASON = "node(s) didn't have free ports for the requested pod ports"
ANY_IP = "0.0.0.0"


def conflicts(wanted: HostPort, used: HostPort) -> bool:
    ip, protocol, port = wanted
    used_ip, used_protocol, used_port = used
    if port != used_port or protocol != used_protocol:
        return False
    return ip == used_ip or ANY_IP in (ip, used_ip)


class NodePorts(Plugin):
    name = "NodePorts"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (
            on(POD, ActionType.DELETE),
            on(NODE, ActionType.ADD),
        )

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        """Skip for a pod without host ports, as kube-scheduler's does: nothing to judge,
        and a preemption's dry runs then need not ask about the ports on each node."""
        return SUCCESS if pod.host_ports else skip(self.name)

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Verdict:
        if not pod.host_ports:
            return Verdict.all(nodes)
        failed = np.zeros(nodes.size, dtype=bool)
        for row in nodes.rows():
            used = list(nodes.ports[row])
            for held in state.nominated_pods.get(row, ()):
                used.extend(held.host_ports)
            if used and any(conflicts(w, u) for w in pod.host_ports for u in used):
                failed[row] = True
        return Verdict.failing(nodes, failed, REASON)

    def passes_at(
        self, pod: PodInfo, nodes: NodeTable, row: int, beside: Sequence[PodInfo]
    ) -> bool:
        if not pod.host_ports:
            return True
        used = [*nodes.ports[row], *(port for other in beside for port in other.host_ports)]
        return not any(conflicts(w, u) for w in pod.host_ports for u in used)
