"""``kubectl berth quota tree`` (and ``berth quota tree``): the quota tree at a glance.

One line per quota and resource, indented under its parent from Koordinator's root: min
and max from the spec; request, runtime, used, borrowed and lent from the status the
operator writes. Koordinator's default and system quotas follow the tree quotas under the
root when they hold anything (or an ElasticQuota of their name is stored): their used and
request counted from the pods, their runtime their max, for the resources the tree shares.
Quotas the tree refuses follow, each with why. Pure: the ElasticQuotas, pods and the
scheduler's CapacityScheduling arguments come in as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from berth.kubectl.tables import columns
from berth.podresources import Resources
from berth.quota.runtime import tree_resources
from berth.quota.tree import OUTSIDE, ROOT, OutsideQuota, QuotaTree, build_tree, is_tree_quota
from berth.quota.treeadmission import tree_state
from berth.quota.treestatus import pod_seen, tree_pods
from berth.quota.usage import format_units

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


def _outside_rows(
    tree: QuotaTree, quota: OutsideQuota, used: Resources, request: Resources
) -> list[Row]:
    """The default or system quota's rows: for the resources its max or the tree names
    (all it uses when neither names any). Unless it is stored, none when it holds nothing
    of those, or when there are no tree quotas (a cluster that does not use the tree)."""
    names = quota.max.keys() | tree_resources(tree)
    if not names:
        names = {r for r, v in (*used.items(), *request.items()) if v}
    holds = any(used.get(r, 0) or request.get(r, 0) for r in names)
    if not quota.raw and not (holds and tree.quotas):
        return []

    def limit(resource: str) -> str:
        if resource in quota.max:
            return format_units(resource, quota.max[resource])
        return "unlimited"

    return [
        {
            "name": quota.name,
            "parent": ROOT,
            "depth": 1,
            "isParent": False,
            "namespace": quota.namespace,
            "resource": resource,
            "min": "0",
            "max": limit(resource),
            "request": format_units(resource, request.get(resource, 0)),
            "runtime": limit(resource),
            "used": format_units(resource, used.get(resource, 0)),
            "borrowed": UNSET,
            "lent": UNSET,
        }
        for resource in sorted(names)
    ]


def tree_rows(
    quotas: Iterable[Json],
    pods: Iterable[Json] = (),
    outside_max: Mapping[str, Resources] | None = None,
) -> tuple[list[Row], list[Row]]:
    """The tree quotas' rows, depth first from the root in name order, then the default
    and system quotas' (their used and request counted from ``pods``, their max from a
    stored ElasticQuota else ``outside_max``, the scheduler's arguments), and the refused
    quotas with why."""
    quotas = list(quotas)
    tree = build_tree([q for q in quotas if is_tree_quota(q)], outside_max)
    rows: list[Row] = []

    def walk(parent: str, depth: int) -> None:
        for child in sorted(tree.children.get(parent, ())):
            rows.extend(_quota_rows(tree, child, depth, parent))
            walk(child, depth + 1)

    walk(ROOT, 1)
    flat = {(q.get("metadata") or {}).get("namespace") for q in quotas if not is_tree_quota(q)}
    seen = [found for found in map(pod_seen, pods) if found is not None]
    counted, _ = tree_pods(tree, seen, {ns for ns in flat if ns})
    state = tree_state(tree, counted, {})
    for name in OUTSIDE:
        rows.extend(
            _outside_rows(
                tree,
                tree.outside[name],
                state.outside_used.get(name, {}),
                state.outside_request.get(name, {}),
            )
        )
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


def render(
    quotas: Iterable[Json],
    pods: Iterable[Json] = (),
    outside_max: Mapping[str, Resources] | None = None,
) -> str:
    """The tree as text: kubectl-style columns from the root down, then the refused
    quotas with why."""
    rows, refused = tree_rows(quotas, pods, outside_max)
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
