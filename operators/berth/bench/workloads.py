"""kube-scheduler's scheduler_perf workloads, as its ``performance-config.yaml`` files and
``templates/`` define them: the same nodes (4 cpu, 32Gi, 110 pods, zone labels put on round
robin) and the same pods (100m / 500Mi pause containers with the same affinity, anti-affinity
and spreading terms), at sizes scaled from the 5000-node cases by the number of nodes.

One difference, said wherever a figure is printed: scheduler_perf has the scheduler under
test place the initial pods too; here they are created already bound (round robin over the
nodes, which satisfies every workload's terms), so every side starts from the same cluster.

Two workloads make their initial pods again for every trial: PreemptionBasic's (900m pods
of priority 0, four a node, which the measured 3-cpu pods of priority 10 preempt, three a
pod) are used up by the trial, and Unschedulable's (9-cpu pods no 4-cpu node takes) are
pending, for the side under test, created before the measured pods as scheduler_perf does.

The gang workload is ``gangscheduling/performance-config.yaml`` of kube-scheduler 1.36 (the
GenericWorkload and GangScheduling feature gates): no initial pods, and every three measured
pods (100m / 100Mi, requests only) name one ``scheduling.k8s.io/v1alpha2`` PodGroup whose
gang policy has ``minCount: 3``, created before its pods.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from berth.localcluster.nodes import kwok_node

ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"
NODE_ALLOCATABLE = {"cpu": "4", "memory": "32Gi", "pods": "110"}
INIT_NAMESPACE = "sched-0"
MEASURED_NAMESPACE = "sched-1"
NAMESPACES = (INIT_NAMESPACE, MEASURED_NAMESPACE)
NODE_PREFIX = "perf-node-"
WORKLOAD_GATES = ("GenericWorkload", "GangScheduling")
"""kube-scheduler 1.36's feature gates for its PodGroup API and gang scheduling."""
HIGH_PRIORITY_CLASS = "perf-high-priority"
HIGH_PRIORITY = 10
"""pod-high-priority.yaml sets ``priority: 10`` (scheduler_perf runs no admission); on a
real API server a pod names a PriorityClass of that value instead."""


def _affinity_term(labels: dict[str, str], topology_key: str) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": labels},
        "topologyKey": topology_key,
        "namespaces": [MEASURED_NAMESPACE, INIT_NAMESPACE],
    }


def _spread(when: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 5,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
    ]


# The templates' labels and spec fields beyond the pause container (template file names
# in scheduler_perf's templates/ folder in the comments).
TEMPLATES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    # pod-default.yaml
    "default": ({}, {}),
    # pod-with-pod-anti-affinity.yaml
    "anti-affinity": (
        {"color": "green"},
        {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        _affinity_term({"color": "green"}, HOSTNAME_KEY)
                    ]
                }
            }
        },
    ),
    # pod-with-preferred-pod-affinity.yaml
    "preferred-affinity": (
        {"color": "red"},
        {
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "podAffinityTerm": _affinity_term({"color": "red"}, HOSTNAME_KEY),
                        }
                    ]
                }
            }
        },
    ),
    # pod-with-node-affinity.yaml
    "node-affinity": (
        {},
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": ZONE_KEY,
                                        "operator": "In",
                                        "values": ["zone1", "zone2"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        },
    ),
    # pod-with-topology-spreading.yaml
    "spreading": ({"color": "blue"}, {"topologySpreadConstraints": _spread("DoNotSchedule")}),
    # pod-with-preferred-topology-spreading.yaml
    "preferred-spreading": (
        {"color": "blue"},
        {"topologySpreadConstraints": _spread("ScheduleAnyway")},
    ),
    # gangscheduling/templates/gang-pod.yaml (its PodGroup is set by the workload)
    "gang": ({}, {}),
    # pod-low-priority.yaml, pod-high-priority.yaml, pod-large-cpu.yaml (their cpu: CPU);
    # the preemption victims of the first go at once when deleted, no kubelet to wait for
    "low-priority": ({}, {"terminationGracePeriodSeconds": 0}),
    "high-priority": ({}, {"priorityClassName": HIGH_PRIORITY_CLASS}),
    "large-cpu": ({}, {}),
}
# The templates whose pause container asks for more than 100m (requests and limits alike).
CPU: dict[str, str] = {"low-priority": "900m", "high-priority": "3", "large-cpu": "9"}

# gang-pod.yaml asks for less memory than the other templates, and has no limits or port.
_GANG_CONTAINER: dict[str, Any] = {
    "name": "pause",
    "image": "registry.k8s.io/pause:3.10.1",
    "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
}
_CONTAINER: dict[str, Any] = {
    "name": "pause",
    "image": "registry.k8s.io/pause:3.10.1",
    "ports": [{"containerPort": 80}],
    "resources": {
        "requests": {"cpu": "100m", "memory": "500Mi"},
        "limits": {"cpu": "100m", "memory": "500Mi"},
    },
}


@dataclass(frozen=True)
class Workload:
    """One scheduler_perf test case: its nodes, its initial and its measured pods.

    ``init_per_node`` and ``measured_per_node`` are the 5000-node case's pod counts over
    its nodes, so that ``sizes(1000)`` keeps the same proportions at 1000 nodes.
    """

    name: str
    zones: tuple[str, ...]
    init_template: str
    measured_template: str
    init_per_node: float
    measured_per_node: float
    threshold: float | None
    """scheduler_perf's CI floor for the 5000-node case (pods/s, 36-core CI machine)."""
    gang_size: int = 0
    """Measured pods per PodGroup (each its gang's ``minCount``); 0: no gangs."""
    gates: tuple[str, ...] = ()
    """The feature gates kube-scheduler runs with for this workload."""
    init_pending: bool = False
    """Initial pods left pending for the side under test (Unschedulable), not bound."""
    init_each_trial: bool = False
    """Initial pods made again before each trial: the trial uses them up (preemption), or
    they name the side under test."""

    def sizes(
        self, nodes: int, measured: int | None = None, bound_per_node: float | None = None
    ) -> tuple[int, int]:
        """(initial pods, measured pods) for ``nodes`` nodes; ``measured`` overrides the
        latter and scales the former with it; ``bound_per_node`` sets the former alone (the
        pods already bound in every side's view, for the curve of memory against pods)."""
        init = round(nodes * self.init_per_node)
        scaled = round(nodes * self.measured_per_node)
        if self.gang_size:
            scaled = self.gang_size * max(1, round(scaled / self.gang_size))
        if measured is not None:
            self.check_pods(measured)
            init, scaled = round(init * measured / scaled), measured
        if bound_per_node is not None:
            init = round(nodes * bound_per_node)
        return init, scaled

    def check_pods(self, pods: int) -> None:
        """Refuse a measured count that would leave a gang short of its members."""
        if self.gang_size and pods % self.gang_size:
            raise ValueError(
                f"{self.name} needs whole gangs: {pods} pods is not a multiple of {self.gang_size}"
            )

    def gangs(self, pods: int) -> int:
        """How many PodGroups ``pods`` measured pods make (0 for a workload of no gangs)."""
        return pods // self.gang_size if self.gang_size else 0

    def node(self, index: int) -> dict[str, Any]:
        """node-default.yaml, with the zone label put on round robin when the case has one."""
        labels = {ZONE_KEY: self.zones[index % len(self.zones)]} if self.zones else {}
        return kwok_node(f"{NODE_PREFIX}{index}", labels=labels, allocatable=NODE_ALLOCATABLE)

    def init_pod(
        self, index: int, nodes: int, batch: int | None = None, scheduler: str | None = None
    ) -> dict[str, Any]:
        """An initial pod, created bound to node ``index`` mod ``nodes`` (or pending for
        ``scheduler`` when the workload's are); on a cluster, named for its batch (see
        :meth:`measured_pod`)."""
        name = f"init-{index}" if batch is None else f"b{batch}-init-{index}"
        if self.init_pending:
            if scheduler is None:
                raise ValueError(f"{self.name}'s initial pods are pending: name their scheduler")
            return make_pod(self.init_template, name, INIT_NAMESPACE, scheduler)
        pod = make_pod(self.init_template, name, INIT_NAMESPACE, None)
        pod["spec"]["nodeName"] = f"{NODE_PREFIX}{index % nodes}"
        return pod

    def measured_pod(self, index: int, scheduler: str, batch: int | None = None) -> dict[str, Any]:
        """A measured pod; on a cluster, named for its batch (a trial's pods): kwok plays a
        deleted pod's last stage by name, and minutes late under load, so a name used
        again in a later batch would lose that batch's pod."""
        name = f"pod-{index}" if batch is None else f"b{batch}-pod-{index}"
        pod = make_pod(self.measured_template, name, MEASURED_NAMESPACE, scheduler)
        if self.gang_size:
            group = pod_group_name(index // self.gang_size, batch)
            pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        return pod

    def pod_group(self, index: int, batch: int | None = None) -> dict[str, Any]:
        """PodGroup ``index`` (podgroup.yaml): a gang of ``gang_size``, which measured
        pods ``index * gang_size`` onwards name; on a cluster, named for its batch too."""
        if not self.gang_size:
            raise ValueError(f"{self.name} has no gangs")
        return {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": pod_group_name(index, batch), "namespace": MEASURED_NAMESPACE},
            "spec": {"schedulingPolicy": {"gang": {"minCount": self.gang_size}}},
        }


def pod_group_name(index: int, batch: int | None) -> str:
    return f"gang-{index}" if batch is None else f"b{batch}-gang-{index}"


def make_pod(template: str, name: str, namespace: str, scheduler: str | None) -> dict[str, Any]:
    """A pod of one of scheduler_perf's templates (100m / 500Mi pause container)."""
    labels, extra = TEMPLATES[template]
    container = copy.deepcopy(_GANG_CONTAINER if template == "gang" else _CONTAINER)
    if template in CPU:
        for amounts in container["resources"].values():
            amounts["cpu"] = CPU[template]
    spec: dict[str, Any] = {"containers": [container], **extra}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        # misc/performance-config.yaml, 5000Nodes_10000Pods: 1000 initial, 10000 measured.
        Workload("SchedulingBasic", (), "default", "default", 0.2, 2.0, 680),
        # affinity/, 5000Nodes_2000Pods: 1000 initial, 2000 measured.
        Workload("SchedulingPodAntiAffinity", (), "anti-affinity", "anti-affinity", 0.2, 0.4, 60),
        # affinity/, 5000Nodes_5000Pods: 5000 initial, 5000 measured.
        Workload(
            "SchedulingPreferredPodAffinity",
            (),
            "preferred-affinity",
            "preferred-affinity",
            1.0,
            1.0,
            90,
        ),
        # topology_spreading/, 5000Nodes_5000Pods: 5000 default pods, 5000 spreading.
        Workload(
            "TopologySpreading",
            ("moon-1", "moon-2", "moon-3"),
            "default",
            "spreading",
            1.0,
            1.0,
            460,
        ),
        Workload(
            "PreferredTopologySpreading",
            ("moon-1", "moon-2", "moon-3"),
            "default",
            "preferred-spreading",
            1.0,
            1.0,
            340,
        ),
        # affinity/, 5000Nodes_10000Pods: 5000 initial, 10000 measured, every node zone1.
        Workload(
            "SchedulingNodeAffinity", ("zone1",), "node-affinity", "node-affinity", 1.0, 2.0, 220
        ),
        # gangscheduling/, 5000Nodes_1000Gangs_3000Pods (and 2000, 3000 gangs: --pods):
        # no initial pods, gangs of 3. Its CI threshold is on the group attempt's mean
        # duration (8 ms at 1000 gangs), not on pods/s.
        Workload(
            "GangScheduling",
            (),
            "default",
            "gang",
            0.0,
            0.6,
            None,
            gang_size=3,
            gates=WORKLOAD_GATES,
        ),
        # misc/, PreemptionBasic/1000Nodes (its 5000-node case is disabled upstream): 4000
        # initial pods of 900m, 1000 measured of 3 cpu at priority 10, each preempting 3.
        Workload(
            "PreemptionBasic",
            (),
            "low-priority",
            "high-priority",
            4.0,
            1.0,
            None,
            init_each_trial=True,
        ),
        # misc/, Unschedulable at 5000 nodes, its larger case: 20000 pending 9-cpu pods no
        # node takes, created before the 10000 measured ones.
        Workload(
            "Unschedulable",
            (),
            "large-cpu",
            "default",
            4.0,
            2.0,
            600,
            init_pending=True,
            init_each_trial=True,
        ),
    )
}
