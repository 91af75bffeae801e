"""``kubectl berth quota``, ``reservations`` and ``top nodes``: rows from API objects, and
the rows as kubectl-style columns. Pure: the objects come in as JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from berth.api.base import epoch_seconds
from berth.loadaware.args import LoadAwareArgs, ThresholdsAnnotationError, node_profile
from berth.podresources import CPU, MEMORY, resource_list
from berth.quota.usage import format_units

Json = Mapping[str, Any]
Row = dict[str, Any]
# The resources ``top nodes`` shows, as NodeMetric reports them.
SHOWN = (CPU, MEMORY)


def columns(rows: Sequence[Mapping[str, Any]], headers: Sequence[tuple[str, str]]) -> str:
    """Rows under upper-case headers, left-aligned, two spaces apart, as kubectl prints."""
    cells = [[title for _, title in headers]]
    cells += [["" if row.get(key) is None else str(row[key]) for key, _ in headers] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def quota_rows(quotas: Iterable[Json]) -> list[Row]:
    """One row per quota and resource it names: used, min and max."""
    rows = []
    for obj in sorted(quotas, key=_key):
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        minimum = resource_list(spec.get("min"))
        maximum = resource_list(spec.get("max"))
        used = resource_list((obj.get("status") or {}).get("used"))
        for resource in sorted(set(minimum) | set(maximum)):
            rows.append(
                {
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "resource": resource,
                    "used": format_units(resource, used.get(resource, 0)),
                    "min": format_units(resource, minimum.get(resource, 0)),
                    "max": format_units(resource, maximum[resource])
                    if resource in maximum
                    else "unlimited",
                }
            )
    return rows


QUOTA_HEADERS = (
    ("namespace", "NAMESPACE"),
    ("name", "NAME"),
    ("resource", "RESOURCE"),
    ("used", "USED"),
    ("min", "MIN"),
    ("max", "MAX"),
)


def reservation_rows(reservations: Iterable[Json], node: str | None = None) -> list[Row]:
    """What each reservation holds, where, for whom, and who uses it now."""
    rows = []
    for obj in sorted(reservations, key=_key):
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        placed = status.get("nodeName") or ""
        if node is not None and placed != node:
            continue
        rows.append(
            {
                "name": (obj.get("metadata") or {}).get("name"),
                "node": placed or "<none>",
                "phase": status.get("phase") or "Pending",
                "allocatable": _resources(status.get("allocatable")),
                "allocated": _resources(status.get("allocated")),
                "owners": ", ".join(_owner(o) for o in spec.get("owners") or ()) or "<none>",
                "current": ", ".join(
                    f"{o.get('namespace')}/{o.get('name')}"
                    for o in status.get("currentOwners") or ()
                )
                or "<none>",
            }
        )
    return rows


RESERVATION_HEADERS = (
    ("name", "NAME"),
    ("node", "NODE"),
    ("phase", "PHASE"),
    ("allocatable", "HOLDS"),
    ("allocated", "ALLOCATED"),
    ("owners", "FOR"),
    ("current", "USED BY"),
)


def _resources(values: Mapping[str, Any] | None) -> str:
    units = resource_list(values)
    return ",".join(f"{k}={format_units(k, v)}" for k, v in sorted(units.items())) or "-"


def _owner(owner: Json) -> str:
    """An owner entry in short: object, controller or label selector."""
    if owner.get("object"):
        ref = owner["object"]
        return f"pod {ref.get('namespace', '')}/{ref.get('name', '')}".replace(" /", " ")
    if owner.get("controller"):
        ref = owner["controller"]
        return f"{ref.get('kind', 'controller')} {ref.get('name', '')}"
    if owner.get("labelSelector"):
        labels = (owner["labelSelector"] or {}).get("matchLabels") or {}
        return "pods " + ",".join(f"{k}={v}" for k, v in labels.items())
    return "?"


def top_rows(
    metrics: Iterable[Json], nodes: Iterable[Json], args: LoadAwareArgs, now: float
) -> list[Row]:
    """Each node's reported usage as a percentage of allocatable, beside its thresholds."""
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
    rows = []
    for metric in sorted(metrics, key=_key):
        name = (metric.get("metadata") or {}).get("name") or ""
        node = by_name.get(name) or {}
        status = metric.get("status") or {}
        usage = resource_list(
            ((status.get("nodeMetric") or {}).get("nodeUsage") or {}).get("resources")
        )
        allocatable = resource_list((node.get("status") or {}).get("allocatable"))
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        try:
            thresholds = node_profile(annotations, args.node_profile()).usage
        except ThresholdsAnnotationError:
            thresholds = args.node_profile().usage
        row: Row = {"node": name}
        for resource in SHOWN:
            used = usage.get(resource, 0)
            total = allocatable.get(resource, 0)
            percent = round(100 * used / total) if total else None
            threshold = thresholds.get(resource) or None
            row[resource] = format_units(resource, used)
            row[f"{resource}%"] = "-" if percent is None else f"{percent}%"
            row[f"{resource}_threshold"] = f"{threshold}%" if threshold else "-"
            row[f"{resource}_over"] = bool(
                percent is not None and threshold and percent > threshold
            )
        updated = epoch_seconds(status.get("updateTime"))
        age = None if updated is None else max(0.0, now - updated)
        row["age"] = "never" if age is None else f"{age:.0f}s"
        expired = age is not None and age > args.node_metric_expiration_seconds
        row["state"] = (
            "no report"
            if age is None
            else "expired"
            if expired
            else "over threshold"
            if any(row[f"{r}_over"] for r in SHOWN)
            else "ok"
        )
        rows.append(row)
    return rows


TOP_HEADERS = (
    ("node", "NODE"),
    ("cpu", "CPU"),
    ("cpu%", "CPU%"),
    ("cpu_threshold", "CPU LIMIT"),
    ("memory", "MEMORY"),
    ("memory%", "MEMORY%"),
    ("memory_threshold", "MEMORY LIMIT"),
    ("age", "REPORTED"),
    ("state", "STATE"),
)


def _key(obj: Json) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")
