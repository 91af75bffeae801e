"""Per-node state as columns over all nodes, so a filter or score is one numpy expression.

Row ``i`` is one node; resource columns are cpu (millicores), memory, ephemeral-storage,
pods, then extended resources in the order first seen. Slots of deleted nodes are reused.
Derived views (label values, taint groups) are cached per generation counter and rebuilt
only when nodes change, never per pod.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.api.meta import Taint
from berth.podresources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, resource_list
from berth.scheduler.cache.podinfo import HostPort, PodInfo

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
LABEL_MASKS = 256
"""Selections by label kept at once; more distinct selectors than this start afresh."""


class NodeTable:
    """Columns of allocatable and requested resources, plus per-node facts."""

    def __init__(self, capacity: int = 64) -> None:
        self.columns: dict[str, int] = {name: i for i, name in enumerate(BASE_RESOURCES)}
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self._free: list[int] = []
        self.present: Mask = np.zeros(capacity, dtype=bool)
        self.allocatable: Ints = np.zeros((capacity, len(BASE_RESOURCES)), dtype=np.int64)
        self.requested: Ints = np.zeros_like(self.allocatable)
        self.nonzero_requested: Ints = np.zeros((capacity, 2), dtype=np.int64)
        self.unschedulable: Mask = np.zeros(capacity, dtype=bool)
        self.nodes: list[dict[str, Any] | None] = []
        self.labels: list[dict[str, str]] = []
        self.taints: list[tuple[Taint, ...]] = []
        self.ports: list[dict[HostPort, int]] = []
        self.pods: list[dict[str, PodInfo]] = []
        # Bumped whenever a row's node or pods change (a pod's status alone does not), so
        # per-node derivations can be cached.
        self.row_versions: Ints = np.zeros(capacity, dtype=np.int64)
        self.label_generation = 0
        self.taint_generation = 0
        # Bumped whenever a node object is added, replaced or removed.
        self.node_generation = 0
        self._label_cache: dict[str, tuple[int, npt.NDArray[np.int32], dict[str, int]]] = {}
        self._taint_cache: tuple[int, npt.NDArray[np.int32], list[tuple[Taint, ...]]] | None = None
        self._label_masks: dict[Hashable, Mask] = {}
        self._label_masks_generation = -1

    # -- shape -----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of rows in use (present or free); arrays are sliced to this."""
        return len(self.names)

    @property
    def count(self) -> int:
        return len(self.index)

    def column(self, resource: str) -> int:
        """The column of a resource, adding one for a resource never seen before."""
        col = self.columns.get(resource)
        if col is None:
            col = len(self.columns)
            self.columns[resource] = col
            pad = ((0, 0), (0, 1))
            self.allocatable = np.pad(self.allocatable, pad)
            self.requested = np.pad(self.requested, pad)
        return col

    def vector(self, resources: Mapping[str, int]) -> Ints:
        """A request as a row over the resource columns."""
        cols = [self.column(name) for name in resources]
        row = np.zeros(len(self.columns), dtype=np.int64)
        for col, value in zip(cols, resources.values(), strict=True):
            row[col] = value
        return row

    def _grow(self) -> None:
        capacity = len(self.present) * 2
        extra = capacity - len(self.present)
        self.present = np.concatenate([self.present, np.zeros(extra, dtype=bool)])
        self.unschedulable = np.concatenate([self.unschedulable, np.zeros(extra, dtype=bool)])
        self.allocatable = np.pad(self.allocatable, ((0, extra), (0, 0)))
        self.requested = np.pad(self.requested, ((0, extra), (0, 0)))
        self.nonzero_requested = np.pad(self.nonzero_requested, ((0, extra), (0, 0)))
        self.row_versions = np.pad(self.row_versions, (0, extra))

    # -- nodes -----------------------------------------------------------------------------

    def upsert_node(self, node: dict[str, Any]) -> int:
        """Add or update a node from its API object; returns its row."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        name = meta["name"]
        row = self.index.get(name)
        if row is None:
            row = self._free.pop() if self._free else self.size
            if row == self.size:
                if row >= len(self.present):
                    self._grow()
                self.names.append(name)
                self.nodes.append(None)
                self.labels.append({})
                self.taints.append(())
                self.ports.append({})
                self.pods.append({})
            else:
                self.names[row] = name
            self.index[name] = row
            self.present[row] = True
            self.requested[row] = 0
            self.nonzero_requested[row] = 0
            self.ports[row] = {}
            self.pods[row] = {}
            self.label_generation += 1
            self.taint_generation += 1
        self.row_versions[row] += 1
        self.node_generation += 1
        allocatable = resource_list((node.get("status") or {}).get("allocatable"))
        self.allocatable[row] = 0
        for resource, value in allocatable.items():
            col = self.column(resource)  # may widen the arrays: index them afterwards
            self.allocatable[row, col] = value
        self.unschedulable[row] = bool(spec.get("unschedulable"))
        labels = dict(meta.get("labels") or {})
        if labels != self.labels[row]:
            self.labels[row] = labels
            self.label_generation += 1
        taints = tuple(Taint.model_validate(t) for t in spec.get("taints") or ())
        if taints != self.taints[row]:
            self.taints[row] = taints
            self.taint_generation += 1
        self.nodes[row] = node
        return row

    def remove_node(self, name: str) -> dict[str, PodInfo]:
        """Drop a node; returns the pods that were on it (the caller keeps them as orphans)."""
        row = self.index.pop(name, None)
        if row is None:
            return {}
        pods = self.pods[row]
        self.present[row] = False
        self.allocatable[row] = 0
        self.requested[row] = 0
        self.nonzero_requested[row] = 0
        self.unschedulable[row] = False
        self.nodes[row] = None
        self.labels[row] = {}
        self.taints[row] = ()
        self.ports[row] = {}
        self.pods[row] = {}
        self._free.append(row)
        self.node_generation += 1
        self.label_generation += 1
        self.taint_generation += 1
        return pods

    def rows(self) -> Iterator[int]:
        return iter(self.index.values())

    # -- pods ------------------------------------------------------------------------------

    def add_pod(self, row: int, pod: PodInfo) -> None:
        """Count a pod on a node (bound, assumed or held)."""
        if pod.uid in self.pods[row]:
            return
        self.pods[row][pod.uid] = pod
        self._account(row, pod, 1)

    def update_pod(self, row: int, pod: PodInfo) -> None:
        """Hold the latest version of a counted pod whose requests and ports did not
        change (a resize is ``remove_pod`` then ``add_pod``). The row's version moves
        only when what is derived from a node's pods may differ: the pod's labels
        (selectors), its termination (topology spread leaves terminating pods out) or
        its spec; status updates, most of a pod's events, leave it alone."""
        pods = self.pods[row]
        counted = pods.get(pod.uid)
        if counted is None or counted is pod:
            return
        pods[pod.uid] = pod
        if (
            counted.labels != pod.labels
            or counted.deleting != pod.deleting
            or not pod.same_spec(counted)
        ):
            self.row_versions[row] += 1

    def remove_pod(self, row: int, pod: PodInfo) -> None:
        counted = self.pods[row].pop(pod.uid, None)
        if counted is not None:
            self._account(row, counted, -1)

    def _account(self, row: int, pod: PodInfo, sign: int) -> None:
        self.row_versions[row] += 1
        for resource, value in pod.requests.items():
            col = self.column(resource)  # may widen the arrays: index them afterwards
            self.requested[row, col] += sign * value
        self.requested[row, self.columns[PODS]] += sign
        self.nonzero_requested[row, 0] += sign * pod.nonzero_cpu
        self.nonzero_requested[row, 1] += sign * pod.nonzero_memory
        ports = self.ports[row]
        for port in pod.host_ports:
            ports[port] = ports.get(port, 0) + sign
            if ports[port] <= 0:
                del ports[port]

    # -- derived views ---------------------------------------------------------------------

    def label_codes(self, key: str) -> tuple[npt.NDArray[np.int32], dict[str, int]]:
        """Each row's value of a label as an integer code (-1 where absent), and the codes.

        Cached until any node's labels change, so matching a selector is integer compares.
        """
        cached = self._label_cache.get(key)
        if cached is not None and cached[0] == self.label_generation:
            return cached[1], cached[2]
        vocabulary: dict[str, int] = {}
        codes = np.full(self.size, -1, dtype=np.int32)
        for row, labels in enumerate(self.labels):
            value = labels.get(key)
            if value is not None:
                codes[row] = vocabulary.setdefault(value, len(vocabulary))
        self._label_cache[key] = (self.label_generation, codes, vocabulary)
        return codes, vocabulary

    def label_mask(self, key: Hashable, build: Callable[[], Mask]) -> Mask:
        """The rows ``build`` selects by the nodes' labels and names, cached under ``key``
        (what the selection depends on) until a node is added, removed or relabelled: the
        pods of one workload carry the same selector. Read-only: it is shared."""
        if self._label_masks_generation != self.label_generation:
            self._label_masks.clear()
            self._label_masks_generation = self.label_generation
        mask = self._label_masks.get(key)
        if mask is None:
            if len(self._label_masks) >= LABEL_MASKS:
                self._label_masks.clear()
            mask = build()
            mask.flags.writeable = False
            self._label_masks[key] = mask
        return mask

    def taint_groups(self) -> tuple[npt.NDArray[np.int32], list[tuple[Taint, ...]]]:
        """Rows grouped by identical taint sets: (group of each row, taints of each group)."""
        if self._taint_cache is not None and self._taint_cache[0] == self.taint_generation:
            return self._taint_cache[1], self._taint_cache[2]
        groups: dict[tuple[tuple[str, str | None, str], ...], int] = {}
        ordered: list[tuple[Taint, ...]] = []
        ids = np.zeros(self.size, dtype=np.int32)
        for row, taints in enumerate(self.taints):
            signature = tuple((t.key, t.value, str(t.effect)) for t in taints)
            group = groups.get(signature)
            if group is None:
                group = groups[signature] = len(ordered)
                ordered.append(taints)
            ids[row] = group
        self._taint_cache = (self.taint_generation, ids, ordered)
        return ids, ordered
