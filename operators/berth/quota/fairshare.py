"""The order between tree quotas waiting for the same capacity: lowest dominant share first.

Kueue's fair sharing orders workloads of competing queues by the dominant resource share of
their queue divided by its weight; Berth takes the share of a tree quota as its largest
used ÷ runtime over the resources its max names, divided by the ``berth.io/weight``
annotation (default 1). A quota using nothing has share 0; a quota using something with a
runtime of 0, or with weight 0, has an infinite share (it goes last). The queue orders by
priority first, as kube-scheduler's PrioritySort does, and by this share among pods of
equal priority; pods outside the tree have share 0, so a cluster without tree quotas keeps
its order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from berth.quota.tree import QuotaTree
from berth.quota.treeadmission import TreeState

INFINITE = float("inf")


def dominant_share(
    used: Mapping[str, int], runtime: Mapping[str, int], names: Iterable[str], weight: float
) -> float:
    """max over ``names`` of used ÷ runtime, divided by ``weight``."""
    share = 0.0
    for resource in names:
        value = used.get(resource, 0)
        if value <= 0:
            continue
        limit = runtime.get(resource, 0)
        share = max(share, value / limit if limit > 0 else INFINITE)
    if share == 0.0:
        return 0.0
    return share / weight if weight > 0 else INFINITE


def quota_share(tree: QuotaTree, state: TreeState, quota: str) -> float:
    """The dominant share of a tree quota (0 for a name the tree does not hold)."""
    node = tree.quotas.get(quota)
    if node is None:
        return 0.0
    return dominant_share(
        state.used.get(quota, {}), state.runtime.get(quota, {}), node.max, node.fair_weight
    )
