"""The pending pods nominated to nodes, by pod and by node.

kube-scheduler's nominator keeps both sides (``nominatedPodToNode`` and
``nodeToNominatedPods``): a queueing hint asks what is nominated to the node an event
happened on, for every waiting pod and every event, and a thousand preemptors waiting on
their victims made a scan of every nomination per question half of the scheduler's time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from berth.scheduler.cache.podinfo import PodInfo

Held = tuple[str, PodInfo]
"""The node a pod is nominated to, and the pod as last seen."""


class Nominations(dict[str, Held]):
    """uid -> (node, pod), a plain dict to read; every write also files the pod under its
    node, so ``on(node)`` costs what that node holds, not what the cluster does."""

    def __init__(self) -> None:
        super().__init__()
        self._by_node: dict[str, dict[str, PodInfo]] = {}

    def on(self, node: str) -> Iterable[PodInfo]:
        """The pods nominated to ``node``."""
        filed = self._by_node.get(node)
        return filed.values() if filed is not None else ()

    def __setitem__(self, uid: str, held: Held) -> None:
        previous = dict.get(self, uid)
        if previous is not None:
            self._unfile(uid, previous[0])
        dict.__setitem__(self, uid, held)
        self._by_node.setdefault(held[0], {})[uid] = held[1]

    def __delitem__(self, uid: str) -> None:
        node = dict.pop(self, uid)[0]
        self._unfile(uid, node)

    def pop(self, uid: str, *default: Any) -> Any:
        if uid not in self:
            if default:
                return default[0]
            raise KeyError(uid)
        held = dict.pop(self, uid)
        self._unfile(uid, held[0])
        return held

    def popitem(self) -> tuple[str, Held]:
        uid, held = dict.popitem(self)
        self._unfile(uid, held[0])
        return uid, held

    def setdefault(self, uid: str, default: Held) -> Held:
        if uid not in self:
            self[uid] = default
        return dict.__getitem__(self, uid)

    def update(self, *others: Mapping[str, Held] | Iterable[tuple[str, Held]], **kw: Held) -> None:  # type: ignore[override]
        for uid, held in dict(*others, **kw).items():
            self[uid] = held

    def __ior__(self, other: Any) -> Nominations:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self._by_node.clear()

    def _unfile(self, uid: str, node: str) -> None:
        filed = self._by_node.get(node)
        if filed is not None:
            filed.pop(uid, None)
            if not filed:
                del self._by_node[node]
