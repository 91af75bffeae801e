"""The pods bound to this node, by uid: names for the usage found in their cgroups.

Each pod's Koordinator QoS and priority classes are reported with Koordinator's defaults:
the QoS class from the ``koordinator.sh/qosClass`` label, else from the Kubernetes QoS class
(``status.qosClass``, else computed; Guaranteed ``LSR``, Burstable ``LS``, BestEffort
``BE``); the priority class from the
``koordinator.sh/priority-class`` label, else from the pod's priority value's band, else
from the QoS class (``LSE``, ``LSR``, ``LS`` and ``SYSTEM`` are ``koord-prod``, ``BE`` is
``koord-batch``). Values outside Koordinator's names count as unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio.client import CoreV1Api

from berth.kube.client import checked
from berth.loadaware.priority import BANDS as PRIORITY_BANDS
from berth.loadaware.priority import PRIORITY_LABEL, QOS_LABEL
from berth.podresources import BEST_EFFORT, BURSTABLE, GUARANTEED, qos_class

__all__ = ["PodRef", "list_node_pods", "pod_ref"]

QOS_CLASSES = frozenset({"LSE", "LSR", "LS", "BE", "SYSTEM"})
QOS_OF_KUBE_QOS = {GUARANTEED: "LSR", BURSTABLE: "LS", BEST_EFFORT: "BE"}
PRIORITY_OF_QOS = {"LSE": "koord-prod", "LSR": "koord-prod", "LS": "koord-prod"}
PRIORITY_OF_QOS |= {"SYSTEM": "koord-prod", "BE": "koord-batch"}


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    priority: str | None = None
    qos: str | None = None


def _qos_class(labels: Mapping[str, str], pod: Mapping[str, Any]) -> str | None:
    label = labels.get(QOS_LABEL)
    if label in QOS_CLASSES:
        return label
    kube = (pod.get("status") or {}).get("qosClass") or qos_class(pod.get("spec") or {})
    return QOS_OF_KUBE_QOS.get(kube)


def _priority_class(labels: Mapping[str, str], priority: int | None, qos: str | None) -> str | None:
    names = {name for name, _, _ in PRIORITY_BANDS}
    if PRIORITY_LABEL in labels:
        label = labels[PRIORITY_LABEL]
        if label in names:
            return label
    elif priority is not None:
        for name, low, high in PRIORITY_BANDS:
            if low <= priority <= high:
                return name
    return None if qos is None else PRIORITY_OF_QOS.get(qos)


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    qos = _qos_class(labels, pod)
    return PodRef(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        priority=_priority_class(labels, spec.get("priority"), qos),
        qos=qos,
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
