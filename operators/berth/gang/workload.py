"""kube-scheduler 1.36's gangs: the PodGroup of ``scheduling.k8s.io/v1alpha2`` (feature gates
``GenericWorkload`` and ``GangScheduling``) that a pod names in ``spec.schedulingGroup``.

A PodGroup whose ``schedulingPolicy`` is ``gang`` is a gang of ``minCount`` members, decided
by the same group cycle as the other schemes; ``basic`` groups nothing (each pod is
scheduled alone, as kube-scheduler does). What only the other alpha gates of 1.36 act on
is refused by name, since Berth cannot honour it: ``schedulingConstraints``
(TopologyAwareWorkloadScheduling), ``disruptionMode: PodGroup`` (WorkloadAwarePreemption:
Berth may preempt one member alone) and ``resourceClaims`` (device claims). The group's
``priority`` and ``priorityClassName`` are read by workload-aware preemption only;
members are ordered and preempt by their own priority, as in kube-scheduler without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from berth.gang.group import Gang

GROUP: Final = "scheduling.k8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "podgroups"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodGroup"
VIEW_KIND: Final = f"{KIND}.{GROUP}"
"""How the cluster view and messages name it, apart from scheduler-plugins' PodGroup."""
SCHEDULED: Final = "PodGroupScheduled"
"""The status condition kube-scheduler sets: True once placed, False with the reason why not."""
FIELD: Final = "spec.schedulingGroup.podGroupName"
WAIT_SECONDS: Final = 300.0
"""kube-scheduler 1.36 holds a placed PodGroup's room for five minutes, not configurable."""


class WorkloadGangError(ValueError):
    """The PodGroup asks for something Berth cannot honour; the message names the field."""


def group_name(spec: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod's spec names, if any."""
    group = spec.get("schedulingGroup") or {}
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return str(name) if name else None


def parse_gang(raw: Mapping[str, Any]) -> Gang | None:
    """The gang a PodGroup declares; None for the ``basic`` policy (no gang)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    constraints = spec.get("schedulingConstraints") or {}
    if constraints.get("topology"):
        raise WorkloadGangError(
            "spec.schedulingConstraints.topology is not supported: Berth does not place a "
            "gang within one topology domain (TopologyAwareWorkloadScheduling)"
        )
    if spec.get("disruptionMode") == "PodGroup":
        raise WorkloadGangError(
            "spec.disruptionMode PodGroup is not supported: Berth may preempt a member "
            "alone (use Pod)"
        )
    if spec.get("resourceClaims"):
        raise WorkloadGangError("spec.resourceClaims is not supported: Berth allocates no claims")
    policy = spec.get("schedulingPolicy") or {}
    if "gang" not in policy:
        return None
    text = (policy.get("gang") or {}).get("minCount")
    if not isinstance(text, int) or isinstance(text, bool) or text < 1:
        raise WorkloadGangError(
            f"spec.schedulingPolicy.gang.minCount must be a whole number of at least 1, "
            f"not {text!r}"
        )
    return Gang(
        namespace,
        name,
        text,
        kind=VIEW_KIND,
        quorum_field="minCount",
        wait_seconds=WAIT_SECONDS,
    )


def scheduled_condition(
    status: bool, reason: str, message: str, generation: int | None, now: str
) -> dict[str, Any]:
    """The ``PodGroupScheduled`` condition as kube-scheduler writes it."""
    condition: dict[str, Any] = {
        "type": SCHEDULED,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def with_condition(
    conditions: list[Mapping[str, Any]], condition: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """The conditions with ``condition`` in place of the one of its type; None when there
    is nothing to write: that one already says the same, or it is a True PodGroupScheduled
    (like kube-scheduler, the first placement is not changed afterwards). Its transition
    time is kept when only the reason or message changed."""
    others = [dict(c) for c in conditions if c.get("type") != condition["type"]]
    old = next((c for c in conditions if c.get("type") == condition["type"]), None)
    if old is not None and old.get("type") == SCHEDULED and old.get("status") == "True":
        return None
    same = ("status", "reason", "message", "observedGeneration")
    if old is not None and all(old.get(k) == condition.get(k) for k in same):
        return None
    if old is not None and old.get("status") == condition["status"]:
        condition = {**condition, "lastTransitionTime": old.get("lastTransitionTime")}
    return [*others, condition]
