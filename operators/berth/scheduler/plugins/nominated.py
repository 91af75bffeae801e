"""Filtering with the nominated pods on a node, for plugins that count pods.

kube-scheduler runs a node's filters twice when pods of at least the incoming pod's
priority are nominated to it (preemptors waiting for their victims to leave): once with
those pods added through the PreFilter extensions, then without; the node passes only if
both pass, and the first failure is the one reported. Anti-affinity and spread counts
change with the pods added, so their plugins check those rows again here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import Reason, Verdict

# (row, the pods nominated to it) -> the plugin's verdict with those pods counted.
WithPods = Callable[[int, list[PodInfo]], Verdict]


def with_nominated(plain: Verdict, nominated: dict[int, list[PodInfo]], check: WithPods) -> Verdict:
    """``plain`` (without nominated pods), with each row holding nominated pods failing as
    it fails once they are counted, if it does."""
    passed = plain.passed.copy()
    reasons = [Reason(r.rows.copy(), r.message, r.resolvable) for r in plain.reasons]
    for row, pods in nominated.items():
        if row >= len(passed):
            continue
        counted = check(row, pods)
        if counted.passed[row]:
            continue
        passed[row] = False
        for reason in reasons:
            reason.rows[row] = False
        for reason in counted.reasons:
            if reason.rows[row]:
                only = np.zeros(len(passed), dtype=bool)
                only[row] = True
                reasons.append(Reason(only, reason.message, reason.resolvable))
    return Verdict(passed, tuple(r for r in reasons if r.rows.any()))
