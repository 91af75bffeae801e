"""PodGroup operator: a gang's status follows its member pods.

Stateless and idempotent: a PodGroup changing, or a pod labelled
``scheduling.x-k8s.io/pod-group`` changing what its group's status reads of it, marks the
group (namespace/name); the worker recomputes its status from two indices (members by
group, groups by key) with :func:`berth.gang.status.desired` and patches only what differs.
Members are counted in the PodGroup's own namespace. PodGroups are a Kopf index; pods come
from the informer the operators share (:mod:`berth.operators.cluster`), as Kopf's readiness
per object is quadratic at startup, and no group is decided before they are listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient

from berth import log
from berth.api.podgroup import CRD, GROUP, POD_GROUP_LABEL, VERSION
from berth.gang.status import MemberSeen, desired, member_seen
from berth.kube.client import api_client
from berth.kube.write import ApiWriter, Kind, NotFound
from berth.operators.cluster import UNLISTED_RETRY, Cluster
from berth.operators.index import Index
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker, wall_clock

POD_GROUP = Kind.of(CRD)

logger = log.get(__name__)


def pod_group_members(body: Mapping[str, Any]) -> dict[str, MemberSeen]:
    """A pod labelled with its group, under the group's key; nothing for any other pod."""
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    return {f"{namespace}/{name}": member_seen(body)} if namespace and name else {}


@kopf.index(GROUP, VERSION, CRD.plural, registry=REGISTRY)
async def pod_groups(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {f"{namespace}/{name}": dict(body)}


class PodGroups:
    """Decides one PodGroup's status at a time for the :class:`Worker`."""

    def __init__(
        self,
        api: ApiClient,
        groups: kopf.Index[str, dict[str, Any]],
        pods_listed: Callable[[], bool],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.groups = groups
        self.members = Index(pod_group_members)
        self.pods_listed = pods_listed
        self.worker = Worker("podgroup", self.reconcile)

    def member_changed(self, kind: str, body: dict[str, Any]) -> None:
        """Marks the groups whose members' phase, placement, owners or wait changed."""
        self.worker.mark_all(self.members.observe(kind, body))

    async def reconcile(self, key: str) -> datetime | None:
        if not self.pods_listed():
            return wall_clock() + UNLISTED_RETRY  # members not listed yet would count as none
        namespace, _, name = key.partition("/")
        for group in self.groups.get(key, ()):
            patch = desired(group, self.members.get(key, ()), wall_clock())
            if not patch:
                continue
            try:
                await self.writer.patch_status(POD_GROUP, name, patch, namespace=namespace)
            except NotFound:
                return None  # deleted meanwhile
            logger.info("podgroup status updated", namespace=namespace, name=name, status=patch)
        return None


@kopf.on.startup(registry=REGISTRY)
async def start_pod_groups(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views."""
    cluster: Cluster = memo.cluster
    state = PodGroups(api_client(memo.configuration), kwargs["pod_groups"], cluster.pods.listed)
    memo.pod_groups = state
    cluster.pods.subscribe(state.member_changed)
    state.worker.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_pod_groups(memo: kopf.Memo, **_: Any) -> None:
    state: PodGroups | None = memo.get("pod_groups")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event(GROUP, VERSION, CRD.plural, registry=REGISTRY)
async def pod_group_changed(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    memo.pod_groups.worker.mark(f"{namespace}/{name}")
