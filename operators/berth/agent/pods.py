"""The pods bound to this node, by uid: names for the usage found in their cgroups.

Koordinator's priority class comes from the pod's ``koordinator.sh/priority-class`` label,
else from its priority value's band; its QoS class from the ``koordinator.sh/qosClass``
label. Pods outside those conventions report neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio.client import CoreV1Api

from berth.kube.client import checked

__all__ = ["PodRef", "list_node_pods", "pod_ref"]

PRIORITY_LABEL = "koordinator.sh/priority-class"
QOS_LABEL = "koordinator.sh/qosClass"
# Koordinator's priority bands (inclusive), highest first.
PRIORITY_BANDS = (
    ("koord-prod", 9000, 9999),
    ("koord-mid", 7000, 7999),
    ("koord-batch", 5000, 5999),
    ("koord-free", 3000, 3999),
)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    priority: str | None = None
    qos: str | None = None


def _priority_class(labels: Mapping[str, str], priority: int | None) -> str | None:
    if PRIORITY_LABEL in labels:
        return labels[PRIORITY_LABEL]
    if priority is None:
        return None
    return next((name for name, low, high in PRIORITY_BANDS if low <= priority <= high), None)


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return PodRef(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        priority=_priority_class(labels, (pod.get("spec") or {}).get("priority")),
        qos=labels.get(QOS_LABEL),
    )


async def list_node_pods(core: CoreV1Api, node: str) -> dict[str, PodRef]:
    """Every pod bound to ``node``, by uid (raises ApiException when the API refuses)."""
    response = await checked(
        await core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False
        )
    )
    body = orjson.loads(await response.read())
    response.release()
    return {
        str(pod["metadata"]["uid"]): pod_ref(pod)
        for pod in body.get("items") or ()
        if (pod.get("metadata") or {}).get("uid")
    }
