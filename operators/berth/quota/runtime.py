"""Runtime quota: how much of what a parent has each child may use now, Koordinator's way.

Per resource, top-down. The root hands down the cluster's capacity; every parent hands
its own runtime to its children. Among siblings: when their mins add up to more than what
is handed down, each min is scaled down in proportion; then every child first gets its
demand up to its min (its whole min when it does not lend), and what is left is shared by
``shared-weight`` among the children that want more, each capped at its demand, with what
a capped child does not need shared again until nothing changes. Integer shares use the
largest-remainder method (ties by name), so nothing is lost to rounding. A child's demand
is its request (pods placed or waiting) capped at its max; a parent's request is the sum of
its children's demands.

Kueue's limits fit in the same arithmetic: a borrowing limit caps the demand at min + the
limit; a lending limit keeps min - the limit for the quota even when it is idle, as a quota
that does not lend keeps its whole min.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from berth.podresources import Resources
from berth.quota.tree import ROOT, QuotaTree


@dataclass(frozen=True)
class Share:
    """One sibling as the split of one resource sees it."""

    name: str
    min: int
    demand: int
    weight: int
    allow_lent: bool = True
    lending_limit: int | None = None  # None: lends all of its unused min

    def kept(self, floor: int) -> int:
        """What of its (scaled) min the quota keeps when it does not use it."""
        if not self.allow_lent:
            return floor
        if self.lending_limit is None:
            return 0
        return max(floor - self.lending_limit, 0)


def largest_remainder(amount: int, weights: Sequence[tuple[str, int]]) -> dict[str, int]:
    """``amount`` split in proportion to the weights, in integers that add up to it exactly
    (when any weight is positive); the leftover units go to the largest remainders."""
    total = sum(w for _, w in weights if w > 0)
    shares = {name: 0 for name, _ in weights}
    if amount <= 0 or total <= 0:
        return shares
    remainders: list[tuple[int, str]] = []
    for name, weight in weights:
        if weight <= 0:
            continue
        base, remainder = divmod(weight * amount, total)
        shares[name] = base
        remainders.append((remainder, name))
    left = amount - sum(shares.values())
    for _, name in sorted(remainders, key=lambda r: (-r[0], r[1]))[:left]:
        shares[name] += 1
    return shares


def scaled_mins(amount: int, mins: Mapping[str, int]) -> dict[str, int]:
    """Mins scaled down in proportion when they add up to more than ``amount``."""
    total = sum(mins.values())
    if total <= amount:
        return dict(mins)
    return {name: value * max(amount, 0) // total for name, value in mins.items()}


def split(amount: int, siblings: Sequence[Share]) -> dict[str, int]:
    """The runtime of each sibling out of ``amount`` (water-filling by shared weight)."""
    mins = scaled_mins(amount, {s.name: s.min for s in siblings})
    runtime: dict[str, int] = {}
    hungry: list[Share] = []
    for share in siblings:
        floor = mins[share.name]
        if share.demand > floor:
            runtime[share.name] = floor
            hungry.append(share)
        else:
            runtime[share.name] = max(share.demand, share.kept(floor))
    left = amount - sum(runtime.values())
    while left > 0 and hungry:
        deltas = largest_remainder(left, [(s.name, s.weight) for s in hungry])
        left = 0
        still: list[Share] = []
        for share in hungry:
            runtime[share.name] += deltas[share.name]
            if runtime[share.name] < share.demand:
                still.append(share)
            else:
                left += runtime[share.name] - share.demand
                runtime[share.name] = share.demand
        hungry = still
    return runtime


def tree_resources(tree: QuotaTree) -> frozenset[str]:
    """The resources runtime is computed for: those any tree quota's max names."""
    return frozenset(r for quota in tree.quotas.values() for r in quota.max)


def demands(tree: QuotaTree, requests: Mapping[str, Mapping[str, int]]) -> dict[str, Resources]:
    """Each quota's request capped at its max (and at min + its borrowing limit); a parent's
    request is its children's sum."""
    result: dict[str, Resources] = {}

    def visit(name: str) -> Resources:
        quota = tree.quotas[name]
        if quota.is_parent:
            request: Resources = {}
            for child in tree.children.get(name, ()):
                for resource, value in visit(child).items():
                    request[resource] = request.get(resource, 0) + value
        else:
            request = dict(requests.get(name, {}))
        capped = dict(request)
        for resource, value in request.items():
            if resource in quota.max:
                value = min(value, quota.max[resource])
            if resource in quota.borrowing_limit:
                value = min(value, quota.min.get(resource, 0) + quota.borrowing_limit[resource])
            capped[resource] = value
        result[name] = capped
        return capped

    for child in tree.children.get(ROOT, ()):
        visit(child)
    return result


def runtime_quotas(
    tree: QuotaTree, requests: Mapping[str, Mapping[str, int]], total: Mapping[str, int]
) -> dict[str, Resources]:
    """The runtime of every tree quota, per resource any quota's max names, given each leaf
    quota's request and what the root hands down (the cluster's capacity for the tree)."""
    demand = demands(tree, requests)
    runtime: dict[str, Resources] = {name: {} for name in tree.quotas}
    for resource in sorted(tree_resources(tree)):
        pending = [(ROOT, total.get(resource, 0))]
        while pending:
            parent, amount = pending.pop()
            children = tree.children.get(parent, ())
            shares = split(
                amount,
                [
                    Share(
                        name,
                        tree.quotas[name].min.get(resource, 0),
                        demand[name].get(resource, 0),
                        tree.quotas[name].weight(resource),
                        tree.quotas[name].allow_lent,
                        tree.quotas[name].lending_limit.get(resource),
                    )
                    for name in children
                ],
            )
            for name, value in shares.items():
                runtime[name][resource] = value
                if tree.children.get(name):
                    pending.append((name, value))
    return runtime
