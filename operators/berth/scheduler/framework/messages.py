"""Why a pod was not scheduled, in kube-scheduler's words.

"0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {k: v}."
Each node counts once, under the first filter it failed; reasons are sorted as text; a
PreFilter rejection replaces the per-node reasons; PostFilter (preemption) adds its own.
"""

from __future__ import annotations

from berth.scheduler.framework.interface import Diagnosis

NO_NODES = "no nodes available to schedule pods"


class FitError(Exception):
    """No node fits the pod; ``message`` is kube-scheduler's "0/N nodes are available"."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(fit_message(diagnosis))
        self.diagnosis = diagnosis


def histogram_text(histogram: dict[str, int]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in histogram.items()))


def fit_message(diagnosis: Diagnosis, post_filter: str = "") -> str:
    if diagnosis.nodes == 0 and diagnosis.prefilter is None:
        return NO_NODES
    message = f"0/{diagnosis.nodes} nodes are available:"
    if diagnosis.prefilter is not None:
        message += f" {diagnosis.prefilter.message}."
    else:
        message += f" {histogram_text(diagnosis.histogram)}."
    if post_filter:
        message += f" {post_filter}"
    return message
