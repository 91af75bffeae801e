"""Load-aware placement judged from the NodeMetric reports and the pods' bindings, with no
Berth code.

The churn plays the nodes' agents (node_load.py): every few seconds it writes each
steady node's report, and now and then it makes one node hot for a while. The installed
profile's LoadAwareScheduling refuses a node whose latest report's cpu usage, rounded to a
whole percent of allocatable, is above its threshold (65), and one whose report expired:

- ``bound while hot``: no pod is bound to a node whose reports said hot from ``LAG``
  before the binding until after it (every report in between too). ``updateTime`` and
  the binding's ``PodScheduled`` time have one-second resolution; ``LAG`` is the
  checker's slack for a watch to carry a change plus that second.

``loaded`` is the same rule for a pod still waiting (the liveness checks): a node hot or
expired in the latest look takes no pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tests.reliability.objects import Obj, amounts, bound_at, epoch, key

CPU_THRESHOLD = 65  # percent: the installed LoadAwareScheduling's usageThresholds
EXPIRATION_SECONDS = 180.0  # nodeMetricExpirationSeconds' default
LAG = 6.0
STALE = 60.0  # a binding with no report after it by then is not judged
LOW_NODE_LOAD = "berth.dev/descheduler"  # the label on the jobs the balancer makes


def report(metric: Mapping[str, Any] | None) -> tuple[float, Decimal] | None:
    """A NodeMetric's latest report: when, and the node's cpu usage (cores); None before
    its agent has written one."""
    status = (metric or {}).get("status") or {}
    when = epoch(status.get("updateTime"))
    usage = ((status.get("nodeMetric") or {}).get("nodeUsage") or {}).get("resources")
    if when is None or usage is None:
        return None
    return when, amounts(usage).get("cpu", Decimal(0))


def hot(cpu: Decimal, node: Mapping[str, Any], threshold: int = CPU_THRESHOLD) -> bool:
    """Usage above ``threshold`` percent of the node's allocatable cpu, rounded to a whole
    percent as the scheduler rounds it."""
    total = amounts((node.get("status") or {}).get("allocatable")).get("cpu", Decimal(0))
    if total <= 0:
        return False
    percent = (100 * cpu / total).to_integral_value(rounding="ROUND_HALF_UP")
    return percent > threshold


def loaded(
    metric: Mapping[str, Any] | None,
    node: Mapping[str, Any],
    now: float,
    threshold: int = CPU_THRESHOLD,
) -> bool:
    """Whether the scheduler refuses the node for load: a report hot or expired."""
    seen = report(metric)
    if seen is None:
        return False
    when, cpu = seen
    return now - when >= EXPIRATION_SECONDS or hot(cpu, node, threshold)


@dataclass
class LoadJudge:
    """Every report the looks see, per node; each binding on a reported node judged once
    a report after it has been seen (or the node is gone: then it is not judged)."""

    scheduler: str
    threshold: int = CPU_THRESHOLD
    counts: Counter[str] = field(default_factory=Counter)
    _reports: dict[str, dict[float, bool]] = field(default_factory=dict)  # node -> when -> hot
    _waiting: dict[str, tuple[Obj, str, float]] = field(default_factory=dict)  # by pod uid
    _seen: set[str] = field(default_factory=set)  # pods bound, by uid
    _jobs: set[str] = field(default_factory=set)  # the balancer's, by name

    def check(
        self,
        now: float,
        metrics: Mapping[str, Obj],
        nodes: Mapping[str, Obj],
        pods: Iterable[Obj],
        jobs: Iterable[Obj] = (),
    ) -> list[str]:
        for name, metric in metrics.items():
            seen = report(metric)
            if seen is None or name not in nodes:
                continue
            history = self._reports.setdefault(name, {})
            if seen[0] not in history:
                history[seen[0]] = hot(seen[1], nodes[name], self.threshold)
                self.counts["hot reports seen"] += history[seen[0]]
        for pod in pods:
            spec = pod.get("spec") or {}
            uid = pod["metadata"]["uid"]
            node = spec.get("nodeName")
            if not node or uid in self._seen or spec.get("schedulerName") != self.scheduler:
                continue
            self._seen.add(uid)
            when = bound_at(pod)
            if node in self._reports and when is not None:
                self._waiting[uid] = (pod, node, when)
        for job in jobs:
            if LOW_NODE_LOAD in ((job.get("metadata") or {}).get("labels") or {}):
                self._jobs.add(job["metadata"]["name"])
        self.counts["jobs made by the balancer"] = len(self._jobs)
        found = []
        for uid, (pod, node, when) in list(self._waiting.items()):
            verdict = self._judge(node, when)
            if verdict is None:
                continue
            del self._waiting[uid]
            self.counts["bindings judged against reports"] += 1
            if verdict:
                found.append(
                    f"pod {key(pod)} bound to {node} while its NodeMetric said it was over "
                    f"{self.threshold}% cpu (from {LAG:.0f}s before the binding until after)"
                )
        for uid in [u for u, (_, _, at) in self._waiting.items() if at < now - STALE]:
            del self._waiting[uid]  # its node's reports stopped (its NodeMetric went)
        for name in [n for n in self._reports if n not in nodes]:
            del self._reports[name]
            for uid in [u for u, (_, n, _) in self._waiting.items() if n == name]:
                del self._waiting[uid]
        return found

    def _judge(self, node: str, when: float) -> bool | None:
        """True: hot throughout; False: not; None: no report after the binding yet."""
        history = sorted(self._reports.get(node, {}).items())
        if not any(at > when for at, _ in history):
            return None
        after = next(at for at, _ in history if at > when)
        before = [is_hot for at, is_hot in history if at <= when - LAG]
        between = [is_hot for at, is_hot in history if when - LAG < at <= after]
        return bool(before) and before[-1] and all(between)

    @property
    def judging(self) -> bool:
        return bool(self._waiting)
