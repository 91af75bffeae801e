"""The decision records of pending pods, bounded in memory.

Least recently recorded goes first when the ledger is full; a pod's record goes as soon as
the pod binds or is deleted, so the ledger holds pending pods only.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import Any

from berth.scheduler.decisions.record import Decision

DEFAULT_CAPACITY = 1000


class DecisionLedger:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._records: OrderedDict[tuple[str, str], Decision] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def record(self, decision: Decision) -> None:
        key = (decision.namespace, decision.name)
        self._records.pop(key, None)
        self._records[key] = decision
        while len(self._records) > self.capacity:
            self._records.popitem(last=False)

    def get(self, namespace: str, name: str) -> Decision | None:
        return self._records.get((namespace, name))

    def on_pod(self, event: str, raw: Mapping[str, Any]) -> None:
        """A pod that binds, ends or is deleted is no longer pending: its record goes."""
        meta = raw.get("metadata") or {}
        bound = bool((raw.get("spec") or {}).get("nodeName"))
        ended = (raw.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if event == "DELETED" or bound or ended or meta.get("deletionTimestamp"):
            key = (meta.get("namespace") or "", meta.get("name") or "")
            held = self._records.get(key)
            if held is not None and held.uid == meta.get("uid"):
                del self._records[key]

    def by_plugin(self) -> Counter[tuple[str, str]]:
        """Recorded pods by (plugin, profile), once for each plugin that rejected them."""
        counts: Counter[tuple[str, str]] = Counter()
        for decision in self._records.values():
            for plugin in decision.plugins:
                counts[(plugin, decision.profile)] += 1
        return counts
