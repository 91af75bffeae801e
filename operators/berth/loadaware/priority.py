"""Koordinator's priority class of a pod, with its defaults: what ``prodUsageThresholds``
and ``scoreAccordingProdUsage`` single out.

The ``koordinator.sh/priority-class`` label, else the band of ``spec.priority``; a pod in
neither, or labelled with a class Koordinator does not know, is prod when its QoS is (the
``koordinator.sh/qosClass`` label SYSTEM, LSE, LSR or LS, or without it a Guaranteed or
Burstable pod), batch when it is BE or BestEffort.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRIORITY_LABEL = "koordinator.sh/priority-class"
QOS_LABEL = "koordinator.sh/qosClass"
PROD = "koord-prod"
BATCH = "koord-batch"
# Koordinator's priority bands (inclusive).
BANDS = ((PROD, 9000, 9999), ("koord-mid", 7000, 7999), (BATCH, 5000, 5999),
         ("koord-free", 3000, 3999))  # fmt: skip
CLASSES = frozenset(name for name, _, _ in BANDS)
_PROD_QOS = frozenset({"SYSTEM", "LSE", "LSR", "LS"})


def _best_effort(spec: Mapping[str, Any]) -> bool:
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") or {}
        if resources.get("requests") or resources.get("limits"):
            return False
    return True


def priority_class(pod: Mapping[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if PRIORITY_LABEL in labels:
        if labels[PRIORITY_LABEL] in CLASSES:
            return str(labels[PRIORITY_LABEL])
        # Koordinator: a value it does not know is no class, and spec.priority is not
        # read then; the QoS decides.
    elif (value := (pod.get("spec") or {}).get("priority")) is not None:
        for name, low, high in BANDS:
            if low <= value <= high:
                return name
    qos = labels.get(QOS_LABEL)
    if qos is None:
        return BATCH if _best_effort(pod.get("spec") or {}) else PROD
    if qos in _PROD_QOS:
        return PROD
    return BATCH if qos == "BE" else None


def is_prod(pod: Mapping[str, Any]) -> bool:
    return priority_class(pod) == PROD


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """Koordinator leaves DaemonSet pods out of the threshold checks: they must run on
    every node, however loaded."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return any(owner.get("kind") == "DaemonSet" for owner in owners)
