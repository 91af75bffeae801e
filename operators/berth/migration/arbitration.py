"""Arbitration: whether a job may start now, under the migration limits.

A job that passes is marked (Koordinator's ``passed-arbitration`` annotation, plus Berth's
record of when, from which node and of which workload), so the counts below come from the
jobs themselves and survive a restart. A job held back stays Pending and says which limit
holds it; it is tried again later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from berth.api.base import format_time
from berth.api.podmigrationjob import PodMigrationJob
from berth.migration.args import MigrationControllerArgs
from berth.migration.workload import max_migrating, max_unavailable, scaled

__all__ = [
    "PASSED_ANNOTATION",
    "RECORD_ANNOTATION",
    "Passed",
    "Workload",
    "hold",
    "passed_annotations",
    "passed_of",
]

PASSED_ANNOTATION: Final = "descheduler.koordinator.sh/passed-arbitration"
RECORD_ANNOTATION: Final = "berth.dev/arbitration"


@dataclass(frozen=True)
class Passed:
    """A job that passed arbitration: when, and what it counts against."""

    job: str
    at: datetime
    node: str
    namespace: str
    workload: str | None
    """The uid of the pod's controller."""
    pod: str
    """The migrating pod's name."""


@dataclass(frozen=True)
class Workload:
    """The pod's controller, as arbitration needs it."""

    uid: str
    kind: str
    name: str
    replicas: int
    """Desired replicas."""
    unavailable: frozenset[str]
    """Names of its pods that are not Running and Ready."""


def passed_annotations(record: Passed) -> dict[str, str]:
    """The annotations that mark a job as passed."""
    body = {
        "at": format_time(record.at),
        "node": record.node,
        "namespace": record.namespace,
        "workload": record.workload,
        "pod": record.pod,
    }
    return {PASSED_ANNOTATION: "true", RECORD_ANNOTATION: json.dumps(body, sort_keys=True)}


def passed_of(job: PodMigrationJob) -> Passed | None:
    """The job's arbitration record, or ``None`` if it has not passed."""
    annotations = job.metadata.annotations or {}
    if annotations.get(PASSED_ANNOTATION) != "true":
        return None
    try:
        body: Mapping[str, Any] = json.loads(annotations.get(RECORD_ANNOTATION) or "{}")
        at = datetime.fromisoformat(str(body["at"]).replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError):
        # Passed before Berth recorded it (e.g. by Koordinator): counts, with what is known.
        at = job.metadata.creation_timestamp or datetime.min
        body = {}
    return Passed(
        job=job.metadata.name or "",
        at=at,
        node=str(body.get("node") or ""),
        namespace=str(body.get("namespace") or job.spec.pod_ref.namespace or ""),
        workload=body.get("workload"),
        pod=str(body.get("pod") or job.spec.pod_ref.name or ""),
    )


def hold(
    candidate: Passed,
    workload: Workload | None,
    migrating: Iterable[Passed],
    passed_recently: Iterable[Passed],
    args: MigrationControllerArgs,
    now: datetime,
) -> str | None:
    """Why the candidate must wait, naming the limit; ``None`` when it may start.

    ``migrating`` are the other passed jobs still running; ``passed_recently`` every other
    passed job that still exists, for the per-workload rate limiter.
    """
    running = [p for p in migrating if p.job != candidate.job]
    limit = args.max_migrating_globally
    if limit is not None and len(running) >= limit:
        return f"maxMigratingGlobally {limit} reached: {len(running)} migrations are running"
    on_node = [p for p in running if p.node == candidate.node]
    limit = args.max_migrating_per_node
    if limit is not None and len(on_node) >= limit:
        return (
            f"maxMigratingPerNode {limit} reached on node {candidate.node}: "
            f"{len(on_node)} migrations are running from it"
        )
    in_namespace = [p for p in running if p.namespace == candidate.namespace]
    limit = args.max_migrating_per_namespace
    if limit is not None and len(in_namespace) >= limit:
        return (
            f"maxMigratingPerNamespace {limit} reached in namespace {candidate.namespace}: "
            f"{len(in_namespace)} migrations are running in it"
        )
    if workload is None:
        return None
    return _hold_for_workload(candidate, workload, running, passed_recently, args, now)


def _hold_for_workload(
    candidate: Passed,
    workload: Workload,
    running: list[Passed],
    passed_recently: Iterable[Passed],
    args: MigrationControllerArgs,
    now: datetime,
) -> str | None:
    what = f"{workload.kind} {candidate.namespace}/{workload.name}"
    most_migrating = max_migrating(workload.replicas, args.max_migrating_per_workload)
    most_unavailable = max_unavailable(workload.replicas, args.max_unavailable_per_workload)
    if not args.skip_check_expected_replicas and workload.replicas in (
        most_migrating,
        most_unavailable,
    ):
        return (
            f"{what} has {workload.replicas} replicas, as many as its maxMigrating "
            f"{most_migrating} or maxUnavailable {most_unavailable}: moving one could take "
            "it all down (see skipCheckExpectedReplicas)"
        )
    mine = [p for p in running if p.workload == workload.uid]
    if len(mine) + 1 > most_migrating:
        return (
            f"maxMigratingPerWorkload {most_migrating} reached for {what}: "
            f"{len(mine)} of its pods are migrating"
        )
    unavailable = set(workload.unavailable) | {p.pod for p in mine}
    if candidate.pod not in unavailable and len(unavailable) + 1 > most_unavailable:
        return (
            f"maxUnavailablePerWorkload {most_unavailable} reached for {what}: "
            f"{len(unavailable)} of its pods are unavailable or migrating"
        )
    limiter = args.object_limiters.get("workload")
    if limiter is None:
        return None
    window = limiter.window()
    configured = limiter.max_migrating
    allowed = scaled(configured, workload.replicas) if configured is not None else 0
    allowed = allowed or most_migrating  # 0 or unset: the workload's maxMigrating
    since = now - window
    recent = [
        p
        for p in passed_recently
        if p.workload == workload.uid and p.job != candidate.job and p.at > since
    ]
    if len(recent) >= allowed:
        return (
            f"the workload limiter allows {allowed} migrations of {what} per "
            f"{limiter.duration}: {len(recent)} started within it"
        )
    return None
