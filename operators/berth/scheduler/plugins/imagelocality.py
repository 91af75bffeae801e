"""ImageLocality: prefer nodes that already have the pod's container images.

kube-scheduler's score: per container image on the node (``status.images``), its size
times the share of nodes that have it; the sum is clamped to [23 MiB, 1000 MiB per
container] and scaled to 0..100. The per-node image index is rebuilt only when a node
object changes.
"""

from __future__ import annotations

import numpy as np

from berth.scheduler.cache.nodetable import Ints, NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import MAX_NODE_SCORE, CycleState, Plugin

MIB = 1024 * 1024
MIN_THRESHOLD = 23 * MIB
MAX_CONTAINER_THRESHOLD = 1000 * MIB


def image_index(nodes: NodeTable) -> dict[str, dict[int, int]]:
    """Image name -> row -> size in bytes, from the nodes' ``status.images``."""
    index: dict[str, dict[int, int]] = {}
    for row in nodes.rows():
        node = nodes.nodes[row] or {}
        for image in (node.get("status") or {}).get("images") or ():
            size = int(image.get("sizeBytes") or 0)
            for name in image.get("names") or ():
                index.setdefault(name, {})[row] = size
    return index


class ImageLocality(Plugin):
    name = "ImageLocality"

    _index: dict[str, dict[int, int]] | None = None
    # The node table's node_generation the index was built at: any node object added,
    # replaced or removed since makes it stale (not per cycle: a check over every node
    # for each pod was a loop over all of them).
    _built_at: tuple[int, int] = (-1, -1)

    def _images(self, nodes: NodeTable) -> dict[str, dict[int, int]]:
        built_at = (id(nodes), nodes.node_generation)
        if self._index is None or built_at != self._built_at:
            self._index, self._built_at = image_index(nodes), built_at
        return self._index

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: Ints) -> Ints:
        containers = len((pod.raw.get("spec") or {}).get("initContainers") or ()) + len(
            (pod.raw.get("spec") or {}).get("containers") or ()
        )
        index = self._images(nodes)
        total = np.zeros(len(rows), dtype=np.int64)
        all_nodes = max(nodes.count, 1)
        for image in pod.images:
            having = index.get(image)
            if not having:
                continue
            spread = len(having) / all_nodes
            sizes = np.array([int(having.get(int(r), 0) * spread) for r in rows], dtype=np.int64)
            total += sizes
        high = MAX_CONTAINER_THRESHOLD * containers
        clamped = np.clip(total, MIN_THRESHOLD, max(high, MIN_THRESHOLD))
        if high <= MIN_THRESHOLD:
            return np.zeros(len(rows), dtype=np.int64)
        result: Ints = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (high - MIN_THRESHOLD)
        return result
