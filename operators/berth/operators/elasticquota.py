"""ElasticQuota operator: ``status.used`` follows the namespace's pods.

Stateless and idempotent: every pod or quota event marks its namespace; the operators'
worker (:mod:`berth.operators.worker`) recomputes it from two Kopf indices (counted pods'
requests, quotas by namespace) with :func:`berth.quota.status.desired` and patches a
quota's status only when it differs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient

from berth import log
from berth.api.elasticquota import GROUP, VERSION
from berth.kube.client import api_client
from berth.kube.write import ELASTIC_QUOTA, ApiWriter
from berth.operators.registry import REGISTRY
from berth.operators.worker import Worker
from berth.quota.status import PodRequests, QuotaSeen, desired, quota_seen
from berth.quota.usage import requests_if_counted

PLURAL = "elasticquotas"

logger = log.get(__name__)


@kopf.index("pods", registry=REGISTRY)
def quota_pods(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, PodRequests]:
    requests = requests_if_counted(body)
    if requests is None or namespace is None:
        return {}
    return {namespace: PodRequests(name, requests)}


@kopf.index(GROUP, VERSION, PLURAL, registry=REGISTRY)
def quotas(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[str, QuotaSeen]:
    if namespace is None:
        return {}
    return {namespace: quota_seen(name, body)}


class Quotas:
    """Decides one namespace's quotas at a time for the :class:`Worker`."""

    def __init__(
        self,
        api: ApiClient,
        seen: kopf.Index[str, QuotaSeen],
        pods: kopf.Index[str, PodRequests],
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.seen = seen
        self.pods = pods
        self.worker = Worker("elasticquota", self.reconcile, key_field="namespace")

    async def reconcile(self, namespace: str) -> datetime | None:
        for name, status in desired(
            namespace, self.seen.get(namespace, ()), self.pods.get(namespace, ())
        ).items():
            await self.writer.patch_status(ELASTIC_QUOTA, name, status, namespace=namespace)
            logger.info("quota status updated", namespace=namespace, name=name, status=status)
        return None


@kopf.on.startup(registry=REGISTRY)
async def start_quotas(memo: kopf.Memo, **kwargs: Any) -> None:
    """Kopf hands the (still filling) indices to startup handlers; they stay live views."""
    state = Quotas(api_client(memo.configuration), kwargs["quotas"], kwargs["quota_pods"])
    memo.elasticquotas = state
    state.worker.start()


@kopf.on.cleanup(registry=REGISTRY)
async def stop_quotas(memo: kopf.Memo, **_: Any) -> None:
    state: Quotas | None = memo.get("elasticquotas")
    if state is not None:
        await state.worker.stop()
        await state.api.close()


@kopf.on.event("pods", registry=REGISTRY)
async def pod_changed(namespace: str | None, memo: Any, **_: Any) -> None:
    if namespace is not None:
        memo.elasticquotas.worker.mark(namespace)


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def quota_changed(namespace: str | None, memo: Any, **_: Any) -> None:
    if namespace is not None:
        memo.elasticquotas.worker.mark(namespace)
