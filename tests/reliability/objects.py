"""Raw API objects as the reliability judges read them: resource amounts (the Kubernetes
client library's quantity parser, no Berth code), a pod's requests, and where it stands."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

TERMINAL = {"Succeeded", "Failed"}

Amounts = dict[str, Decimal]
Obj = dict[str, Any]


def amounts(resources: Mapping[str, Any] | None) -> Amounts:
    return {k: Decimal(str(parse_quantity(str(v)))) for k, v in (resources or {}).items()}


def _add(into: Amounts, other: Mapping[str, Decimal], sign: int = 1) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Decimal(0)) + sign * v


def _over(used: Mapping[str, Decimal], limit: Mapping[str, Decimal]) -> list[str]:
    """The resources ``used`` has more of than ``limit`` names (unnamed: unlimited)."""
    return [k for k, v in used.items() if k in limit and v > limit[k]]


def _fits(wanted: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> bool:
    return all(v <= free.get(k, Decimal(0)) for k, v in wanted.items() if v > 0)


def requests_of(spec: Mapping[str, Any]) -> Amounts:
    """Containers summed, the largest init container if bigger, plus overhead."""

    def one(container: Mapping[str, Any]) -> Amounts:
        resources = container.get("resources") or {}
        out = amounts(resources.get("limits"))
        out.update(amounts(resources.get("requests")))
        return out

    total: Amounts = {}
    for container in spec.get("containers") or ():
        _add(total, one(container))
    for container in spec.get("initContainers") or ():
        for k, v in one(container).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    _add(total, amounts(spec.get("overhead")))
    return total


def demand(spec: Mapping[str, Any]) -> Amounts:
    """What a pod takes of a node: its requests and one pod slot."""
    return {**requests_of(spec), "pods": Decimal(1)}


def clock(seconds: float) -> str:
    """A moment of the run as a time of day, to the millisecond: it matches Berth's log."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S.%f")[:-3]


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def written_by(obj: Mapping[str, Any]) -> float | None:
    """A moment by which this version of the object was written, from the API server's own
    record: every field change moves its manager's ``managedFields`` time (whole seconds),
    so a change this version shows was made before the latest of them plus a second. A
    watch event read late by a busy checker would otherwise date a change seconds late."""
    times = [
        at
        for entry in (obj.get("metadata") or {}).get("managedFields") or ()
        if (at := epoch(entry.get("time"))) is not None
    ]
    return max(times) + 1 if times else None


def bound_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod was bound (its PodScheduled condition, one-second resolution)."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return epoch(condition.get("lastTransitionTime"))
    return None


def duration_seconds(text: str) -> float:
    """A duration as the API writes one (``90s``, ``5m``, ``1h30m``), in seconds."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in text:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
    return total


def key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta["name"]


def holds(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL
    )


def pending(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in TERMINAL
        and not spec.get("schedulingGates")
    )


def _plus(a: Mapping[str, Decimal], b: Mapping[str, Decimal], sign: int = 1) -> Amounts:
    out = dict(a)
    _add(out, b, sign)
    return out
