"""``kubectl berth quota tree`` (and ``berth quota tree``): the quota tree at a glance.

One line per quota and resource, indented under its parent from Koordinator's root: min
and max from the spec; request, runtime, used, borrowed and lent from the status the
operator writes. Quotas the tree refuses follow, each with why. Pure: the ElasticQuotas
come in as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from berth.kubectl.tables import columns
from berth.quota.tree import ROOT, QuotaTree, build_tree, is_tree_quota

Json = Mapping[str, Any]
Row = dict[str, Any]
FROM_STATUS: Final = ("request", "runtime", "used", "borrowed", "lent")
HEADERS: Final = (
    ("quota", "QUOTA"),
    ("namespace", "NAMESPACE"),
    ("resource", "RESOURCE"),
    ("min", "MIN"),
    ("max", "MAX"),
    ("request", "REQUEST"),
    ("runtime", "RUNTIME"),
    ("used", "USED"),
    ("borrowed", "BORROWED"),
    ("lent", "LENT"),
)
UNSET: Final = "-"


def _quota_rows(tree: QuotaTree, name: str, depth: int, parent: str) -> list[Row]:
    quota = tree.quotas[name]
    spec = quota.raw.get("spec") or {}
    status = quota.raw.get("status") or {}
    rows = []
    for resource in sorted((spec.get("max") or {}).keys() | (spec.get("min") or {}).keys()):
        row: Row = {
            "name": name,
            "parent": parent,
            "depth": depth,
            "isParent": quota.is_parent,
            "namespace": quota.namespace,
            "resource": resource,
            "min": str((spec.get("min") or {}).get(resource, "0")),
            "max": str((spec.get("max") or {}).get(resource, "unlimited")),
        }
        for field in FROM_STATUS:
            row[field] = str((status.get(field) or {}).get(resource, UNSET))
        rows.append(row)
    return rows


def tree_rows(quotas: Iterable[Json]) -> tuple[list[Row], list[Row]]:
    """The tree quotas' rows, depth first from the root in name order, and the refused
    quotas with why."""
    tree = build_tree([q for q in quotas if is_tree_quota(q)])
    rows: list[Row] = []

    def walk(parent: str, depth: int) -> None:
        for child in sorted(tree.children.get(parent, ())):
            rows.extend(_quota_rows(tree, child, depth, parent))
            walk(child, depth + 1)

    walk(ROOT, 1)
    refused = [
        {"namespace": namespace, "name": name, "reason": why}
        for (namespace, name), why in sorted(tree.refused.items())
    ]
    return rows, refused


def _branches(rows: list[Row]) -> list[tuple[str, bool]]:
    """Each row's QUOTA cell, the tree drawn with box characters (the name on a quota's
    first row only), and whether the row is its quota's first."""
    firsts = [i == 0 or rows[i - 1]["name"] != row["name"] for i, row in enumerate(rows)]
    quotas = [row for row, first in zip(rows, firsts, strict=True) if first]
    last: dict[str, bool] = {}
    for i, row in enumerate(quotas):
        later = [q for q in quotas[i + 1 :] if q["depth"] <= row["depth"]]
        last[row["name"]] = not later or later[0]["depth"] < row["depth"]
    cells = []
    ancestors: list[str] = []
    for row, first in zip(rows, firsts, strict=True):
        del ancestors[row["depth"] - 1 :]
        ancestors.append(row["name"])
        lead = "".join("   " if last[a] else "│  " for a in ancestors[:-1])
        if first:
            label = row["name"] + (" (parent)" if row["isParent"] else "")
            cells.append((lead + ("└─ " if last[row["name"]] else "├─ ") + label, True))
        else:
            cells.append((lead + ("   " if last[row["name"]] else "│  "), False))
    return cells


def render(quotas: Iterable[Json]) -> str:
    """The tree as text: kubectl-style columns from the root down, then the refused
    quotas with why."""
    rows, refused = tree_rows(quotas)
    if not rows and not refused:
        return "No ElasticQuotas in the quota tree (none has a Koordinator tree label)."
    lines = []
    if rows:
        shown: list[Row] = [{"quota": ROOT}]
        for row, (cell, first) in zip(rows, _branches(rows), strict=True):
            shown.append({**row, "quota": cell, "namespace": row["namespace"] if first else ""})
        lines.append(columns(shown, HEADERS))
    if refused:
        lines.append("Refused (not in the tree):")
        lines += [f"  {r['namespace']}/{r['name']}: {r['reason']}" for r in refused]
    return "\n".join(lines)
