"""PodGroup operator: a gang's status follows its member pods.

Stateless and idempotent: a pod labelled ``scheduling.x-k8s.io/pod-group`` or a PodGroup
changing marks the group (namespace/name); the worker recomputes its status from two Kopf
indices (members by group, groups by key) with :func:`berth.gang.status.desired` and
patches only what differs. Members are counted in the PodGroup's own namespace.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient

from berth import log
from berth.api.podgroup import CRD, GROUP, POD_GROUP_LABEL, VERSION
from berth.gang.status import MemberSeen, desired, member_seen
from berth.kube.client import api_client
from berth.kube.write import ApiWriter, Kind, NotFound
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker, wall_clock

POD_GROUP = Kind.of(CRD)

logger = log.get(__name__)


def _key(namespace: str | None, labels: Any) -> str | None:
    name = (labels or {}).get(POD_GROUP_LABEL)
    return f"{namespace}/{name}" if namespace and name else None


@kopf.index("pods", registry=REGISTRY)
async def pod_group_members(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[str, MemberSeen]:
    key = _key(namespace, labels)
    return {} if key is None else {key: member_seen(body)}


@kopf.index(GROUP, VERSION, CRD.plural, registry=REGISTRY)
async def pod_groups(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {f"{namespace}/{name}": dict(body)}


class PodGroups:
    """Decides one PodGroup's status at a time for the :class:`Worker`."""

    def __init__(
        self,
        api: ApiClient,
        groups: kopf.Index[str, dict[str, Any]],
        members: kopf.Index[str, MemberSeen],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.groups = groups
        self.members = members
        self.worker = Worker("podgroup", self.reconcile)

    async def reconcile(self, key: str) -> datetime | None:
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
    state = PodGroups(
        api_client(memo.configuration), kwargs["pod_groups"], kwargs["pod_group_members"]
    )
    memo.pod_groups = state
    state.worker.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_pod_groups(memo: kopf.Memo, **_: Any) -> None:
    state: PodGroups | None = memo.get("pod_groups")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event("pods", labels={POD_GROUP_LABEL: kopf.PRESENT}, registry=REGISTRY)
async def member_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    key = _key(namespace, labels)
    if key is not None:
        memo.pod_groups.worker.mark(key)


@kopf.on.event(GROUP, VERSION, CRD.plural, registry=REGISTRY)
async def pod_group_changed(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    memo.pod_groups.worker.mark(f"{namespace}/{name}")
