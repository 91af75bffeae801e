"""The objects whose selectors say which pods belong together, and namespace labels.

PodTopologySpread's System default constraints spread a pod among the pods selected by the
same Services, ReplicationControllers, ReplicaSets and StatefulSets; InterPodAffinity's
``namespaceSelector`` reads namespace labels. Both are fed by watches, read per cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.api.meta import LabelSelector, LabelSelectorRequirement

SERVICE = "Service"
REPLICATION_CONTROLLER = "ReplicationController"
REPLICA_SET = "ReplicaSet"
STATEFUL_SET = "StatefulSet"
# Kinds whose spec.selector is a plain label map (the others have a LabelSelector).
MAP_SELECTORS = (SERVICE, REPLICATION_CONTROLLER)


@dataclass
class SelectorOwners:
    # kind -> namespace -> name -> selector (None: the object selects nothing).
    selectors: dict[str, dict[str, dict[str, LabelSelector | None]]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # Bumped when namespace labels change: counts derived from namespaceSelector are stale.
    namespace_version: int = 0

    def handler(self, kind: str) -> Callable[[str, dict[str, Any]], None]:
        """A watch handler keeping one kind's selectors."""
        by_namespace = self.selectors.setdefault(kind, {})

        def handle(event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            names = by_namespace.setdefault(meta.get("namespace") or "", {})
            if event == "DELETED":
                names.pop(meta["name"], None)
            else:
                names[meta["name"]] = _selector(kind, (obj.get("spec") or {}).get("selector"))

        return handle

    def on_namespace(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        before = self.namespace_labels.get(meta["name"])
        if event == "DELETED":
            self.namespace_labels.pop(meta["name"], None)
        else:
            self.namespace_labels[meta["name"]] = dict(meta.get("labels") or {})
        if self.namespace_labels.get(meta["name"]) != before:
            self.namespace_version += 1

    def labels_of(self, namespace: str) -> Mapping[str, str]:
        return self.namespace_labels.get(namespace, {})

    def default_selector(self, namespace: str, labels: Mapping[str, str]) -> LabelSelector | None:
        """kube-scheduler's DefaultSelector: every selector that selects the pod, ANDed;
        None when none does."""
        merged: dict[str, str] = {}
        expressions: list[LabelSelectorRequirement] = []
        for kind, by_namespace in self.selectors.items():
            for selector in by_namespace.get(namespace, {}).values():
                if selector is None or not selector.matches(labels):
                    continue
                if kind in MAP_SELECTORS:
                    merged.update(selector.match_labels or {})
                    continue
                expressions.extend(_as_requirements(selector))
        if not merged and not expressions:
            return None
        return LabelSelector(match_labels=merged or None, match_expressions=expressions or None)


def _selector(kind: str, raw: Any) -> LabelSelector | None:
    if not raw:
        return None  # an absent or empty selector selects no pod here
    if kind in MAP_SELECTORS:
        return LabelSelector(match_labels=dict(raw))
    selector = LabelSelector.model_validate(raw)
    if not (selector.match_labels or selector.match_expressions):
        return None
    return selector


def _as_requirements(selector: LabelSelector) -> list[LabelSelectorRequirement]:
    pinned = [
        LabelSelectorRequirement.model_validate({"key": k, "operator": "In", "values": [v]})
        for k, v in (selector.match_labels or {}).items()
    ]
    return [*pinned, *(selector.match_expressions or [])]
