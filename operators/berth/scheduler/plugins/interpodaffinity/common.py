"""Pairs (topology key, value) and the pods of the cluster the plugin walks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

import numpy as np

from berth.scheduler.nodetable import Mask, NodeTable
from berth.scheduler.podinfo import PodInfo
from berth.scheduler.podterms import AffinityTerm
from berth.scheduler.reservations import is_reservation

Pair = tuple[str, str]


def assigned_pods(nodes: NodeTable) -> Iterator[tuple[int, PodInfo]]:
    """Every pod counted on a node (terminating ones too, as kube-scheduler counts them)."""
    for row in nodes.rows():
        for pod in nodes.pods[row].values():
            if not is_reservation(pod):
                yield row, pod


def add_terms(
    counts: Counter[Pair],
    terms: tuple[AffinityTerm, ...],
    target: PodInfo,
    namespace_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
    delta: int,
) -> None:
    """Count ``delta`` on the node's pair for every term ``target`` matches."""
    for term in terms:
        value = node_labels.get(term.topology_key)
        if value is not None and term.matches(target.namespace, target.labels, namespace_labels):
            pair = (term.topology_key, value)
            counts[pair] += delta
            if counts[pair] == 0:
                del counts[pair]


def rows_in(counts: Counter[Pair], nodes: NodeTable) -> Mask:
    """Rows whose label value of some counted key has a positive count."""
    by_key: dict[str, list[str]] = {}
    for (key, value), count in counts.items():
        if count > 0:
            by_key.setdefault(key, []).append(value)
    hit: Mask = np.zeros(nodes.size, dtype=bool)
    for key, values in by_key.items():
        codes, vocabulary = nodes.label_codes(key)
        wanted = [vocabulary[v] for v in values if v in vocabulary]
        if wanted:
            hit |= np.isin(codes, wanted)
    return hit
