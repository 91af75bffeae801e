"""Which pods may be migrated at all (Koordinator's eviction filters).

A pod refused here never becomes migratable by waiting, so its job fails at once
(``ForbiddenMigratePod``) with the rule that refused it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth.migration.args import SYSTEM_CRITICAL_PRIORITY, MigrationControllerArgs

__all__ = ["controller_of", "refusal"]

Pod = Mapping[str, Any]


def controller_of(pod: Pod) -> Mapping[str, Any] | None:
    """The owner reference marked ``controller: true``, if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def _volumes(pod: Pod) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("volumes") or ())


def refusal(
    pod: Pod, args: MigrationControllerArgs, priority_of_class: int | None = None
) -> str | None:
    """Why the pod may not be migrated, or ``None`` when it may.

    ``priority_of_class`` is the value of ``priorityThreshold.name``'s PriorityClass, read
    by the caller when the threshold names one.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    phase = (pod.get("status") or {}).get("phase")
    if controller_of(pod) is None and not (args.evict_failed_bare_pods and phase == "Failed"):
        return "it has no controller to replace it (a bare pod)"
    if (meta.get("annotations") or {}).get("kubernetes.io/config.mirror") is not None:
        return "it is a static (mirror) pod"
    owners = meta.get("ownerReferences") or ()
    if any(ref.get("kind") == "DaemonSet" for ref in owners):
        return "it belongs to a DaemonSet, which would put it back on the same node"
    priority = spec.get("priority")
    critical = priority is not None and int(priority) >= SYSTEM_CRITICAL_PRIORITY
    if critical and not args.evict_system_critical_pods:
        return f"it is system-critical (priority {priority}); see evictSystemCriticalPods"
    if not args.evict_local_storage_pods and any(
        "emptyDir" in v or "hostPath" in v for v in _volumes(pod)
    ):
        return "it uses local storage (emptyDir or hostPath); see evictLocalStoragePods"
    if args.ignore_pvc_pods and any("persistentVolumeClaim" in v for v in _volumes(pod)):
        return "it mounts a PersistentVolumeClaim and ignorePvcPods is set"
    threshold = args.priority_threshold
    if threshold is not None:
        limit = threshold.value if threshold.value is not None else priority_of_class
        if limit is not None and int(priority or 0) >= limit:
            return f"its priority {priority or 0} is not below priorityThreshold {limit}"
    if args.namespaces is not None and not args.namespaces.allows(namespace):
        return f"namespace {namespace} is not in the migration's namespaces"
    if args.label_selector is not None and not args.label_selector.matches(
        meta.get("labels") or {}
    ):
        return "its labels do not match the migration's labelSelector"
    return None
