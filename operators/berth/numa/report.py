"""When a NodeResourceTopology was last reported by its topology updater.

Anyone may write the object: ``kubectl label`` or an annotation by another controller
bumps its resourceVersion and adds a ``managedFields`` entry with a fresh time, but says
nothing about the node's zones. Only a change of what the updater writes is a report: the
zones, the attributes (policy, scope, pods fingerprint and its method), the deprecated
``topologyPolicies`` and the legacy fingerprint annotation. Its time is the write time of
the ``managedFields`` entries that own those fields (seconds resolution, so a pod placed
in the same second as the report still counts as pending: the safe side). Without such an
entry (an object whose managedFields were stripped) the time the change was seen is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from berth.api.noderesourcetopology import FINGERPRINT_ANNOTATION

__all__ = ["REPORT_FIELDS", "Report", "follow", "report_content", "updater_write_time"]

REPORT_FIELDS = ("zones", "attributes", "topologyPolicies")
_OWNED = tuple(f"f:{field}" for field in REPORT_FIELDS)
_ANNOTATION = f"f:{FINGERPRINT_ANNOTATION}"


@dataclass(frozen=True)
class Report:
    """What the updater last reported (canonical JSON) and when it wrote it (epoch s)."""

    content: bytes
    at: float


def report_content(obj: Mapping[str, Any]) -> bytes:
    """The updater's fields of the object, canonically serialized for comparison."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    fields = {field: obj.get(field) for field in REPORT_FIELDS}
    fields[FINGERPRINT_ANNOTATION] = annotations.get(FINGERPRINT_ANNOTATION)
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def _owns_report_fields(fields: Mapping[str, Any]) -> bool:
    if any(key in fields for key in _OWNED):
        return True
    annotations = (fields.get("f:metadata") or {}).get("f:annotations") or {}
    return _ANNOTATION in annotations


def updater_write_time(obj: Mapping[str, Any]) -> float | None:
    """The latest write time of the managers owning the updater's fields, if recorded."""
    times = [
        datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")).timestamp()
        for entry in (obj.get("metadata") or {}).get("managedFields") or ()
        if entry.get("time") and _owns_report_fields(entry.get("fieldsV1") or {})
    ]
    return max(times) if times else None


def follow(previous: Report | None, obj: Mapping[str, Any], seen_at: float) -> Report:
    """The report after a write of ``obj`` seen at ``seen_at``: the previous one when the
    updater's fields did not change, else a new report at the updater's write time."""
    content = report_content(obj)
    if previous is not None and previous.content == content:
        return previous
    written = updater_write_time(obj)
    at = seen_at if written is None else written
    return Report(content, at if previous is None else max(at, previous.at))
