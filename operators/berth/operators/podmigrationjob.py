"""PodMigrationJob operator: arbitration, reservation, eviction, following the replacement.

The handlers only mark jobs; the operators' worker (:mod:`berth.operators.worker`) takes
marked and due jobs one at a time, and for each this module reads what is true now (job,
pod, reservation, replacement), asks :func:`berth.migration.steps.decide` for the next step
and carries out at most one action through the one write path (:class:`ApiWriter`). One job
at a time keeps arbitration's counts exact: every count is read from the jobs themselves
after the previous write.

Nothing lives only in memory (except the eviction rate bucket and retry times): a restart
reads the same facts and takes the same step. Every write carries the resourceVersion it
was decided from; a 409 means the job changed meanwhile and its watch event brings it back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import kopf
import orjson
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi, SchedulingV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from berth import log
from berth.api.podmigrationjob import (
    TERMINAL_PHASES,
    PodMigrationJob,
    PodMigrationJobConditionType,
    PodMigrationJobPhase,
    PodMigrationJobReason,
)
from berth.api.reservation import GROUP, VERSION, Reservation
from berth.kube.client import api_client, succeeded
from berth.kube.events import record
from berth.kube.write import POD, POD_MIGRATION_JOB, RESERVATION, ApiWriter, api_message
from berth.migration.arbitration import Passed, Workload, hold, passed_annotations, passed_of
from berth.migration.args import MigrationControllerArgs
from berth.migration.filters import controller_of, refusal
from berth.migration.metrics import MigrationMetrics
from berth.migration.ratelimit import TokenBucket
from berth.migration.reservation import JOB_LABEL, owned_by, reservation_for
from berth.migration.steps import (
    RETRY_EVICTION,
    Action,
    Facts,
    decide,
    eviction_refused,
    eviction_requested,
    forbidden,
    held,
    reservation_created,
    reservation_not_created,
    started,
)
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker
from berth.reservation.lifecycle import Event

PLURAL: Final = "podmigrationjobs"
RESERVATIONS: Final = "reservations"
COMPONENT: Final = "berth-migration-operator"
LOOK_AGAIN: Final = timedelta(seconds=5)
"""How soon a running job whose step names no recheck is decided again."""
REPLICAS_PLURALS: Final = {
    ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "Deployment"): "deployments",
}
"""Controllers whose desired replicas are read from ``spec.replicas``; for others the
workload's current pods are its replicas."""

Json = dict[str, Any]
logger = log.get(__name__)


async def _read(call: Awaitable[Any]) -> Json | None:
    """The object a raw read returns, or ``None`` for 404."""
    try:
        body = await succeeded(call)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    found: Json = orjson.loads(body)
    return found


class Migrations:
    """Decides one job at a time for the :class:`Worker`, and carries out its step."""

    def __init__(
        self, api: ApiClient, args: MigrationControllerArgs, metrics: MigrationMetrics | None
    ) -> None:
        self.api = api
        self.args = args
        self.metrics = metrics
        self.custom: Any = CustomObjectsApi(api)
        self.core: Any = CoreV1Api(api)
        self.scheduling: Any = SchedulingV1Api(api)
        self.writer = ApiWriter(api)
        self.evictions = TokenBucket(args.evict_qps, args.evict_burst)
        self._evict_after: dict[str, datetime] = {}
        self.worker = Worker("podmigrationjob", self.reconcile)

    # --- reading ---------------------------------------------------------------------------

    async def _job(self, name: str) -> PodMigrationJob | None:
        body = await _read(
            self.custom.get_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, _preload_content=False
            )
        )
        if body is None:
            return None
        try:
            return PodMigrationJob.from_dict(body)
        except ValidationError as err:
            logger.warning("job not readable; left as it is", name=name, error=str(err))
            return None

    async def _pod(self, job: PodMigrationJob) -> Json | None:
        ref = job.spec.pod_ref
        return await _read(
            self.core.read_namespaced_pod(ref.name, ref.namespace, _preload_content=False)
        )

    async def _reservation(self, job: PodMigrationJob) -> tuple[Reservation | None, bool]:
        options = job.spec.reservation_options
        ref = options.reservation_ref if options is not None else None
        if ref is None or not ref.name:
            return None, False
        body = await _read(
            self.custom.get_cluster_custom_object(
                GROUP, VERSION, RESERVATIONS, ref.name, _preload_content=False
            )
        )
        if body is None:
            return None, False
        return Reservation.from_dict(body), owned_by(body, job)

    async def _replacement(self, job: PodMigrationJob, reservation: Reservation) -> Json | None:
        """The pod of the job's namespace placed into the reservation, as its status's
        ``currentOwners`` names it (Koordinator's bound pod). Listing the namespace's pods
        on every look, as before, read thousands of pods a second under churn."""
        status = reservation.status
        for owner in (status.current_owners if status is not None else None) or ():
            if owner.namespace != job.spec.pod_ref.namespace or not owner.name:
                continue
            pod = await _read(
                self.core.read_namespaced_pod(owner.name, owner.namespace, _preload_content=False)
            )
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            if pod is not None and (not owner.uid or uid == owner.uid):
                return pod
        return None

    # --- one step --------------------------------------------------------------------------

    async def reconcile(self, name: str) -> datetime | None:
        """One step of the job; when to decide it again (``None``: it has ended)."""
        job = await self._job(name)
        if job is None:
            self._evict_after.pop(name, None)
            return None
        pod = await self._pod(job)
        reservation, owned = await self._reservation(job)
        replacement = None
        if (
            reservation is not None
            and job.condition(PodMigrationJobConditionType.EVICTION) is not None
        ):
            replacement = await self._replacement(job, reservation)
        now = self.worker.clock()
        decision = decide(Facts(job, now, pod, reservation, owned, replacement))
        if decision.status is not None:
            job = await self._write_status(job, decision.status, decision.events)
        sooner = None
        if decision.action == Action.ARBITRATE and pod is not None:
            await self._arbitrate(job, pod, now)
        elif decision.action == Action.CREATE_RESERVATION and pod is not None:
            await self._create_reservation(job, pod, now)
        elif decision.action == Action.EVICT and pod is not None:
            sooner = await self._evict(job, pod, reservation if owned else None, now)
        elif decision.action == Action.RELEASE and reservation is not None:
            await self._release(job, reservation)
        if job.phase in TERMINAL_PHASES:
            self._evict_after.pop(name, None)
            return None
        due = [now + (decision.recheck or LOOK_AGAIN)]
        deadline = job.deadline()
        if deadline is not None:
            due.append(max(deadline, now))
        if sooner is not None:
            due.append(sooner)
        return min(due)

    async def _write_status(
        self, job: PodMigrationJob, status: Json, events: list[Event]
    ) -> PodMigrationJob:
        meta = job.metadata
        before = job.status.to_dict() if job.status else {}
        # A merge patch of the whole status: lists (conditions) are replaced as they are, and
        # a field the new status drops (a reason that no longer holds) is deleted by null.
        patch: dict[str, Any] = {key: None for key in before if key not in status}
        patch.update(status)
        stored = await self.writer.patch_status(
            POD_MIGRATION_JOB, meta.name or "", patch, resource_version=meta.resource_version
        )
        updated = PodMigrationJob.from_dict(stored)
        pod = job.spec.pod_ref
        logger.info(
            "migration job status updated",
            name=meta.name,
            namespace=pod.namespace,
            pod=pod.name,
            phase=status.get("phase"),
            reason=status.get("reason"),
            message=status.get("message"),
        )
        self._count(job, updated)
        await record(self.writer, updated, events, component=COMPONENT)
        return updated

    def _count(self, before: PodMigrationJob, after: PodMigrationJob) -> None:
        if self.metrics is None or before.phase == after.phase:
            return
        mode = str(after.spec.mode)
        if after.phase == PodMigrationJobPhase.RUNNING:
            self.metrics.started.labels(mode=mode).inc()
        elif after.phase == PodMigrationJobPhase.SUCCEEDED:
            self.metrics.succeeded.labels(mode=mode).inc()
        elif after.phase == PodMigrationJobPhase.FAILED:
            reason = after.status.reason if after.status else None
            self.metrics.failed.labels(reason=reason or "Unknown").inc()

    # --- arbitration -----------------------------------------------------------------------

    async def _arbitrate(self, job: PodMigrationJob, pod: Json, now: datetime) -> None:
        if passed_of(job) is not None:
            # Passed before a restart, its phase not written yet.
            await self._write_status(job, started(job), [])
            return
        why = refusal(pod, self.args, await self._threshold_priority())
        if why is not None:
            status, event = forbidden(job, why)
            await self._write_status(job, status, [event])
            return
        meta = pod.get("metadata") or {}
        controller = controller_of(pod)
        candidate = Passed(
            job=job.metadata.name or "",
            at=now,
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            namespace=str(meta.get("namespace") or ""),
            workload=None if controller is None else str(controller.get("uid")),
            pod=str(meta.get("name") or ""),
        )
        passed, migrating = await self._passed_jobs()
        workload = None if controller is None else await self._workload(pod, controller)
        why = hold(candidate, workload, migrating, passed, self.args, now)
        if why is not None:
            waiting = held(job, why)
            if waiting is not None:
                await self._write_status(job, waiting, [Event("Throttled", why)])
            return
        patch = {
            "metadata": {
                "resourceVersion": job.metadata.resource_version,
                "annotations": passed_annotations(candidate),
            }
        }
        stored = await self.writer.patch(POD_MIGRATION_JOB, job.metadata.name or "", patch)
        job = PodMigrationJob.from_dict(stored)
        await self._write_status(job, started(job), [])

    async def _threshold_priority(self) -> int | None:
        threshold = self.args.priority_threshold
        if threshold is None or threshold.name is None:
            return None
        found = await _read(
            self.scheduling.read_priority_class(threshold.name, _preload_content=False)
        )
        return None if found is None else int(found.get("value") or 0)

    async def _passed_jobs(self) -> tuple[list[Passed], list[Passed]]:
        """Every passed job that exists, and those of them still running."""
        listed = await _read(
            self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, _preload_content=False)
        )
        passed: list[Passed] = []
        migrating: list[Passed] = []
        for item in (listed or {}).get("items") or ():
            try:
                other = PodMigrationJob.from_dict(item)
            except ValidationError:
                continue
            record = passed_of(other)
            if record is None:
                continue
            passed.append(record)
            if other.phase not in TERMINAL_PHASES:
                migrating.append(record)
        return passed, migrating

    async def _workload(self, pod: Json, controller: Mapping[str, Any]) -> Workload:
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        uid = str(controller.get("uid"))
        spec = (await self._controller(namespace, controller) or {}).get("spec") or {}
        # The pods its selector's labels name (a superset where it has expressions too),
        # not every pod of the namespace: thousands under churn, at each arbitration.
        labels = (spec.get("selector") or {}).get("matchLabels") or {}
        narrowed = {"label_selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}
        listed = await _read(
            self.core.list_namespaced_pod(
                namespace, _preload_content=False, **(narrowed if labels else {})
            )
        )
        mine = [
            p
            for p in (listed or {}).get("items") or ()
            if (c := controller_of(p)) is not None and c.get("uid") == uid
        ]
        unavailable = frozenset(str(p["metadata"]["name"]) for p in mine if not _available(p))
        replicas = spec.get("replicas")
        return Workload(
            uid=uid,
            kind=str(controller.get("kind")),
            name=str(controller.get("name")),
            replicas=len(mine) if replicas is None else int(replicas),
            unavailable=unavailable,
        )

    async def _controller(self, namespace: str, controller: Mapping[str, Any]) -> Json | None:
        """The pod's controller, when it is a kind whose replicas Berth reads."""
        group, _, version = str(controller.get("apiVersion")).rpartition("/")
        plural = REPLICAS_PLURALS.get((group, str(controller.get("kind"))))
        if plural is None:
            return None
        return await _read(
            self.custom.get_namespaced_custom_object(
                group, version, namespace, plural, controller.get("name"), _preload_content=False
            )
        )

    # --- actions ---------------------------------------------------------------------------

    async def _create_reservation(self, job: PodMigrationJob, pod: Json, now: datetime) -> None:
        body = reservation_for(job, pod)
        name = body["metadata"]["name"]
        try:
            made = await self.writer.create(RESERVATION, body)
        except ApiException as err:
            existing = None
            if err.status == 409:
                existing = await _read(
                    self.custom.get_cluster_custom_object(
                        GROUP, VERSION, RESERVATIONS, name, _preload_content=False
                    )
                )
            if existing is None or not owned_by(existing, job):
                # Reported, and tried again until the job's ttl runs out (as Koordinator).
                status, event = reservation_not_created(job, api_message(err), now)
                await self._write_status(job, status, [event])
                return
            made = existing  # made before a restart: adopted
        meta = made["metadata"]
        ref = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Reservation",
            "name": meta["name"],
            "uid": meta["uid"],
        }
        patch = {
            "metadata": {"resourceVersion": job.metadata.resource_version},
            "spec": {"reservationOptions": {"reservationRef": ref}},
        }
        stored = await self.writer.patch(POD_MIGRATION_JOB, job.metadata.name or "", patch)
        job = PodMigrationJob.from_dict(stored)
        status, event = reservation_created(job, meta["name"], now)
        await self._write_status(job, status, [event])

    async def _open(self, reservation: Reservation, open_: bool) -> None:
        """Let owner pods into the job's reservation (or close it again)."""
        if bool(reservation.spec.unschedulable) != open_:
            return
        patch = {"spec": {"unschedulable": not open_}}
        await self.writer.patch(RESERVATION, reservation.metadata.name or "", patch)
        reservation.spec.unschedulable = not open_

    async def _evict(
        self, job: PodMigrationJob, pod: Json, reservation: Reservation | None, now: datetime
    ) -> datetime | None:
        """Ask for the eviction; when to try again, if it must wait (a refusal, the rate)."""
        name = job.metadata.name or ""
        not_before = self._evict_after.get(name)
        if not_before is not None and now < not_before:
            return not_before
        wait = self.evictions.take(time.monotonic())
        if wait > 0:
            return now + timedelta(seconds=wait)
        meta = pod["metadata"]
        options = job.spec.delete_options.to_dict() if job.spec.delete_options else {}
        options["preconditions"] = {"uid": meta["uid"]}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "deleteOptions": options,
        }
        if reservation is not None:
            await self._open(reservation, True)
        # The first request is recorded before it is made, so a process killed in between
        # knows the pod may be going; a retry after a refusal is recorded once it succeeds.
        previous = job.condition(PodMigrationJobConditionType.EVICTION)
        retry = previous is not None and previous.reason == PodMigrationJobReason.FAILED_EVICT
        if not retry:
            status, event = eviction_requested(job, now)
            job = await self._write_status(job, status, [event])
        try:
            await self.writer.create_subresource(
                POD, meta["name"], "eviction", body, namespace=meta["namespace"]
            )
        except ApiException as err:
            if err.status == 404:
                return None  # gone meanwhile: the next step sees it
            # 429 is a PodDisruptionBudget saying no: reported, tried again, never deleted.
            if reservation is not None:
                await self._open(reservation, False)
            self._evict_after[name] = now + RETRY_EVICTION
            status, event = eviction_refused(job, api_message(err), now)
            if status != (job.status.to_dict() if job.status else {}):
                await self._write_status(job, status, [event])
            logger.info(
                "eviction refused",
                name=name,
                namespace=meta["namespace"],
                pod=meta["name"],
                status=err.status,
            )
            return self._evict_after[name]
        self._evict_after.pop(name, None)
        if retry:
            status, event = eviction_requested(job, now)
            await self._write_status(job, status, [event])
        return None

    async def _release(self, job: PodMigrationJob, reservation: Reservation) -> None:
        meta = reservation.metadata
        with contextlib.suppress(ApiException):
            await self.writer.delete(RESERVATION, meta.name or "", uid=meta.uid)
            logger.info("reservation released", name=job.metadata.name, reservation=meta.name)


def _available(pod: Json) -> bool:
    """Running and Ready, and not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


@kopf.on.startup(registry=REGISTRY)
async def start_migrations(memo: kopf.Memo, **_: Any) -> None:
    metrics: MigrationMetrics | None = memo.get("migration_metrics")
    args: MigrationControllerArgs = memo.get("migration_args") or MigrationControllerArgs()
    state = Migrations(api_client(memo.configuration), args, metrics)
    memo.migrations = state
    state.worker.start()
    logger.info("migration operator started")


@kopf.on.cleanup(registry=REGISTRY)
async def stop_migrations(memo: kopf.Memo, **_: Any) -> None:
    state: Migrations | None = memo.get("migrations")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def migration_job_event(name: str, memo: Any, **_: Any) -> None:
    memo.migrations.worker.mark(name)


@kopf.on.event(GROUP, VERSION, RESERVATIONS, labels={JOB_LABEL: kopf.PRESENT}, registry=REGISTRY)
async def migration_reservation_event(labels: kopf.Labels, memo: Any, **_: Any) -> None:
    memo.migrations.worker.mark(labels[JOB_LABEL])
