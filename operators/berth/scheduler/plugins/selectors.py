"""Matching node selector terms against the node table's label columns."""

from __future__ import annotations

import re

import numpy as np

from berth.api.meta import NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm
from berth.scheduler.cache.nodetable import Mask, NodeTable

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _requirement(nodes: NodeTable, req: NodeSelectorRequirement) -> Mask:
    codes, vocabulary = nodes.label_codes(req.key)
    values = req.values or []
    op = req.operator
    if op in (NodeSelectorOperator.IN, NodeSelectorOperator.NOT_IN):
        wanted = [vocabulary[v] for v in values if v in vocabulary]
        found = np.isin(codes, wanted) if wanted else np.zeros(nodes.size, dtype=bool)
        return found if op is NodeSelectorOperator.IN else ~found
    if op is NodeSelectorOperator.EXISTS:
        return codes >= 0
    if op is NodeSelectorOperator.DOES_NOT_EXIST:
        return codes < 0
    # Gt / Lt: exactly one integer value; labels that are not integers never match.
    bound = go_int(values[0]) if len(values) == 1 else None
    if bound is None:
        return np.zeros(nodes.size, dtype=bool)
    numbers = np.full(len(vocabulary), np.nan)
    for text, code in vocabulary.items():
        number = go_int(text)
        if number is not None:
            numbers[code] = number
    per_row = np.where(
        codes >= 0, numbers[np.maximum(codes, 0)] if len(numbers) else np.nan, np.nan
    )
    with np.errstate(invalid="ignore"):
        return per_row > bound if op is NodeSelectorOperator.GT else per_row < bound


def go_int(text: str) -> int | None:
    """An integer as Go's strconv.ParseInt reads it (no spaces, no underscores)."""
    return int(text) if _INTEGER.fullmatch(text) else None


def _field(nodes: NodeTable, req: NodeSelectorRequirement) -> Mask:
    """matchFields supports metadata.name with In / NotIn, as in Kubernetes."""
    found = np.zeros(nodes.size, dtype=bool)
    if req.key != "metadata.name":
        return found
    for name in req.values or ():
        row = nodes.index.get(name)
        if row is not None:
            found[row] = True
    if req.operator is NodeSelectorOperator.IN:
        return found
    if req.operator is NodeSelectorOperator.NOT_IN:
        return ~found
    return np.zeros(nodes.size, dtype=bool)


def term_matches(nodes: NodeTable, term: NodeSelectorTerm) -> Mask:
    """Rows matching every requirement of the term; an empty term matches nothing."""
    expressions = term.match_expressions or []
    fields = term.match_fields or []
    if not expressions and not fields:
        return np.zeros(nodes.size, dtype=bool)
    result = np.ones(nodes.size, dtype=bool)
    for req in expressions:
        result &= _requirement(nodes, req)
    for req in fields:
        result &= _field(nodes, req)
    return result


def labels_match(nodes: NodeTable, selector: dict[str, str]) -> Mask:
    """Rows whose labels include every key=value of a nodeSelector."""
    result = np.ones(nodes.size, dtype=bool)
    for key, value in selector.items():
        codes, vocabulary = nodes.label_codes(key)
        code = vocabulary.get(value)
        if code is None:
            return np.zeros(nodes.size, dtype=bool)
        result &= codes == code
    return result
