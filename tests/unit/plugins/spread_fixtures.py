"""Shared builders for the pod-placement plugin tests: labelled nodes, spread constraints,
pod affinity terms, and one plugin's scores on named nodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from berth.scheduler.framework.interface import CycleState
from tests.unit.scheduler_fixtures import Env, Json, info, node

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def zoned(name: str, zone: str | None, **kwargs: Any) -> Json:
    """A node with its hostname label and, if given, a zone."""
    labels = {HOSTNAME: name, **({ZONE: zone} if zone else {}), **kwargs.pop("labels", {})}
    return node(name, labels=labels, **kwargs)


def spread(
    key: str,
    max_skew: int = 1,
    *,
    hard: bool = True,
    match: dict[str, str] | None = None,
    **extra: Any,
) -> Json:
    out: Json = {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": match or {"app": "web"}},
    }
    out.update(extra)
    return out


def term(key: str, match: dict[str, str], **extra: Any) -> Json:
    return {"topologyKey": key, "labelSelector": {"matchLabels": match}, **extra}


def pod_affinity(
    *,
    required: list[Json] = (),  # type: ignore[assignment]
    anti: list[Json] = (),  # type: ignore[assignment]
    preferred: list[tuple[int, Json]] = (),  # type: ignore[assignment]
    preferred_anti: list[tuple[int, Json]] = (),  # type: ignore[assignment]
) -> Json:
    def weighted(items: list[tuple[int, Json]]) -> list[Json]:
        return [{"weight": w, "podAffinityTerm": t} for w, t in items]

    out: Json = {}
    if required or preferred:
        out["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(required),
            "preferredDuringSchedulingIgnoredDuringExecution": weighted(list(preferred)),
        }
    if anti or preferred_anti:
        out["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(anti),
            "preferredDuringSchedulingIgnoredDuringExecution": weighted(list(preferred_anti)),
        }
    return out


def scores(env: Env, plugin: str, raw: Json, *names: str) -> list[int]:
    nodes = env.view.nodes
    rows = np.array([nodes.index[n] for n in names], dtype=np.int64)
    result = env.plugin(plugin).score(CycleState(), info(raw), nodes, rows)
    return [int(s) for s in result]
