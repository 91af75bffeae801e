"""The facts of a pod the scheduler decides on, parsed once per pod version.

Parsing happens when a watch event arrives, not in the scheduling cycle; plugins read these
fields and never the raw object on the hot path.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.api.meta import NodeSelector, PreferredSchedulingTerm, Toleration
from berth.podresources import CPU, DEFAULT_MEMORY, DEFAULT_MILLI_CPU, MEMORY, pod_requests
from berth.podstate import TERMINAL_PHASES, holds_capacity
from berth.scheduler.cache.podterms import (
    NO_AFFINITY,
    PodAffinity,
    SpreadConstraint,
    image_names,
    spread_constraints,
)
from berth.scheduler.cache.podvolumes import NO_VOLUMES, PodVolumes, pod_volumes

PREEMPTION_REASON = "PreemptionByScheduler"

HostPort = tuple[str, str, int]  # (host IP, protocol, port)


def _timestamp(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _host_ports(spec: dict[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers that keep running: app containers and sidecars."""
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    ports: list[HostPort] = []
    for container in [*(spec.get("containers") or ()), *sidecars]:
        for port in container.get("ports") or ():
            host_port = port.get("hostPort") or 0
            if host_port > 0:
                ports.append(
                    (port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP", host_port)
                )
    return tuple(ports)


@functools.lru_cache(maxsize=1024)
def _toleration(fields: tuple[tuple[str, Any], ...]) -> Toleration:
    return Toleration.model_validate(dict(fields))


def _tolerations(spec: dict[str, Any]) -> tuple[Toleration, ...]:
    """Parsed once per distinct toleration and shared: nearly every pod carries the same
    admission-added ones (not-ready, unreachable), a kilobyte of models each otherwise.
    Nothing changes a parsed toleration."""
    parsed = []
    for toleration in spec.get("tolerations") or ():
        try:
            parsed.append(_toleration(tuple(sorted(toleration.items()))))
        except (AttributeError, TypeError):  # malformed: validation says how
            parsed.append(Toleration.model_validate(toleration))
    return tuple(parsed)


def _scheduled_at(status: dict[str, Any]) -> float | None:
    """When the pod was bound: its PodScheduled=True condition's transition time."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return _timestamp(condition.get("lastTransitionTime")) or None
    return None


def _preempted(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == PREEMPTION_REASON
        for c in status.get("conditions") or ()
    )


@dataclass(slots=True)
class PodInfo:
    """One pod as the scheduler sees it."""

    raw: dict[str, Any]
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    node_name: str
    phase: str
    priority: int
    created: float
    labels: dict[str, str]
    annotations: dict[str, str]
    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[HostPort, ...]
    node_selector: dict[str, str]
    required_affinity: NodeSelector | None
    preferred_affinity: tuple[PreferredSchedulingTerm, ...]
    tolerations: tuple[Toleration, ...]
    gated: bool
    nominated_node: str
    deleting: bool
    # status.startTime (when the kubelet started it), None before that.
    started: float | None = None
    # Being deleted because a scheduler preempted it (DisruptionTarget/PreemptionByScheduler).
    preempted: bool = False
    # When it was bound (PodScheduled=True), None before that.
    scheduled_at: float | None = None
    # spec.affinity.podAffinity / podAntiAffinity.
    pod_affinity: PodAffinity = NO_AFFINITY
    # spec.topologySpreadConstraints (selectors narrowed by matchLabelKeys).
    spread: tuple[SpreadConstraint, ...] = ()
    # Container images (init and app), normalized with ``:latest``.
    images: tuple[str, ...] = ()
    # spec.volumes: claims, unshareable disks, migrated in-tree disks.
    volumes: PodVolumes = NO_VOLUMES
    # The Reservation object this pod stands for (its template being placed, or the
    # capacity it holds on a node); None for real pods.
    reservation: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def occupies_node(self) -> bool:
        """Counts against its node: bound and not finished (terminating pods still count)."""
        return holds_capacity(self.node_name, self.phase)

    @classmethod
    def update(cls, previous: PodInfo | None, pod: dict[str, Any]) -> PodInfo:
        """``from_pod``, reusing what was parsed when only status or binding changed.

        Most watch events of a pod are status updates (the kubelet) and its binding; its
        requests, affinity and tolerations are parsed once.
        """
        if previous is None:
            return cls.from_pod(pod)
        spec = pod.get("spec") or {}
        before = previous.raw.get("spec") or {}
        if spec.keys() - {"nodeName"} != before.keys() - {"nodeName"} or any(
            before.get(key) != value for key, value in spec.items() if key != "nodeName"
        ):
            return cls.from_pod(pod)
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        labels = dict(meta.get("labels") or {})
        return dataclasses.replace(
            previous,
            raw=pod,
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            labels=labels,
            # matchLabelKeys read the pod's labels.
            spread=previous.spread
            if labels == previous.labels
            else spread_constraints(spec, labels),
            annotations=dict(meta.get("annotations") or {}),
            nominated_node=status.get("nominatedNodeName") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            started=_timestamp(status.get("startTime")) or None,
            preempted=bool(meta.get("deletionTimestamp")) and _preempted(status),
            scheduled_at=_scheduled_at(status),
            # What plugins derived from the pod may read its labels.
            extra=previous.extra if labels == previous.labels else {},
        )

    def same_spec(self, other: PodInfo) -> bool:
        """Whether both versions carry one parse of the spec, which ``update`` passes on
        when only the metadata, status or binding changed. (False does not say the specs
        differ: equal ones parsed twice are not one parse.)"""
        return self.requests is other.requests

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> PodInfo:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        requests = pod_requests(spec)
        nonzero = pod_requests(spec, non_zero=True)
        labels = dict(meta.get("labels") or {})
        namespace = meta.get("namespace") or ""
        return cls(
            raw=pod,
            uid=meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}",
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            priority=int(spec.get("priority") or 0),
            created=_timestamp(meta.get("creationTimestamp")),
            labels=labels,
            annotations=dict(meta.get("annotations") or {}),
            requests=requests,
            nonzero_cpu=nonzero.get(CPU, DEFAULT_MILLI_CPU),
            nonzero_memory=nonzero.get(MEMORY, DEFAULT_MEMORY),
            host_ports=_host_ports(spec),
            node_selector=dict(spec.get("nodeSelector") or {}),
            required_affinity=NodeSelector.model_validate(required) if required else None,
            preferred_affinity=tuple(PreferredSchedulingTerm.model_validate(p) for p in preferred),
            tolerations=_tolerations(spec),
            gated=bool(spec.get("schedulingGates")),
            nominated_node=status.get("nominatedNodeName") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            started=_timestamp(status.get("startTime")) or None,
            preempted=bool(meta.get("deletionTimestamp")) and _preempted(status),
            scheduled_at=_scheduled_at(status),
            pod_affinity=PodAffinity.parse(spec.get("affinity") or {}, namespace),
            spread=spread_constraints(spec, labels),
            images=image_names(spec),
            volumes=pod_volumes(meta.get("name") or "", spec),
        )


# What a pod update may change without being one for scheduling (kube-scheduler's
# isPodUpdated strips the same).
_UNCHANGING_META = frozenset({"resourceVersion", "generation", "managedFields", "finalizers"})


def spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a pod changed in more than its status and bookkeeping metadata."""

    def stripped(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        meta = raw.get("metadata") or {}
        rest = {k: v for k, v in raw.items() if k not in ("metadata", "status")}
        return {k: v for k, v in meta.items() if k not in _UNCHANGING_META}, rest

    return stripped(old) != stripped(new)
