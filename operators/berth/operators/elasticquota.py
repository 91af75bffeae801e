"""ElasticQuota operator: ``status.used`` follows the namespace's pods.

Stateless and idempotent: every pod or quota event recomputes its namespace from two Kopf
indices (counted pods' requests, quotas by namespace) and patches a quota's status only when
it differs. One quota governs a namespace, the oldest; any other gets ``Active=False`` saying
which one governs, and is ignored by the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from berth import log
from berth.api.base import format_time
from berth.api.elasticquota import GROUP, VERSION
from berth.kube.client import api_client, succeeded
from berth.operators.registry import REGISTRY
from berth.quota.check import precedence
from berth.quota.usage import as_resource_list, requests_if_counted, used

PLURAL = "elasticquotas"
ACTIVE = "Active"
MERGE = "application/merge-patch+json"

logger = log.get(__name__)


@dataclass(frozen=True)
class QuotaSeen:
    """A quota as the index keeps it: enough to order, compute and compare."""

    name: str
    created: str
    named: frozenset[str]
    used: dict[str, str]
    active: tuple[str, str] | None  # (status, message) of the Active condition


@dataclass(frozen=True)
class PodRequests:
    name: str
    requests: dict[str, int]


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
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    active = next(
        (
            (c.get("status"), c.get("message"))
            for c in status.get("conditions") or ()
            if c.get("type") == ACTIVE
        ),
        None,
    )
    return {
        namespace: QuotaSeen(
            name=name,
            created=str(body.get("metadata", {}).get("creationTimestamp", "")),
            named=frozenset([*(spec.get("min") or {}), *(spec.get("max") or {})]),
            used=dict(status.get("used") or {}),
            active=active,
        )
    }


@kopf.on.startup(registry=REGISTRY)
async def connect(memo: kopf.Memo, **_: Any) -> None:
    memo.quota_api = api_client(memo.configuration)


@kopf.on.cleanup(registry=REGISTRY)
async def disconnect(memo: kopf.Memo, **_: Any) -> None:
    client: ApiClient | None = memo.get("quota_api")
    if client is not None:
        await client.close()


@kopf.on.event("pods", registry=REGISTRY)
async def pod_changed(namespace: str | None, memo: Any, **kwargs: Any) -> None:
    await _reconcile_namespace(namespace, memo, kwargs)


@kopf.on.event(GROUP, VERSION, PLURAL, registry=REGISTRY)
async def quota_changed(namespace: str | None, memo: Any, **kwargs: Any) -> None:
    await _reconcile_namespace(namespace, memo, kwargs)


async def _reconcile_namespace(namespace: str | None, memo: Any, kwargs: dict[str, Any]) -> None:
    """Kopf passes the indices by name (``quota_pods``, ``quotas``) with every event."""
    if namespace is None:
        return
    seen: kopf.Index[str, QuotaSeen] = kwargs["quotas"]
    pods: kopf.Index[str, PodRequests] = kwargs["quota_pods"]
    if namespace in seen:
        await reconcile(memo.quota_api, namespace, seen[namespace], pods.get(namespace, []))


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    now = format_time(datetime.now(UTC))
    return {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def desired(
    namespace: str, seen: Iterable[QuotaSeen], pods: Iterable[PodRequests]
) -> dict[str, dict[str, Any]]:
    """Status patches (by quota name) that bring the namespace's quotas up to date."""
    ordered = sorted(seen, key=lambda q: precedence(q.created, q.name))
    if not ordered:
        return {}
    governing, *others = ordered
    patches: dict[str, dict[str, Any]] = {}
    usage = as_resource_list(used((p.requests for p in pods), governing.named))
    message = f"governs namespace {namespace}"
    status: dict[str, Any] = {}
    if usage != governing.used:
        # A merge patch keeps keys it does not mention: resources no longer used go to null.
        gone: dict[str, str | None] = dict.fromkeys(governing.used.keys() - usage.keys())
        status["used"] = {**gone, **usage}
    if governing.active != ("True", message):
        status["conditions"] = [_condition("True", "Governing", message)]
    if status:
        patches[governing.name] = status
    for quota in others:
        message = (
            f"ignored: ElasticQuota {governing.name} already governs namespace {namespace} "
            "(one quota per namespace)"
        )
        if quota.active != ("False", message):
            patches[quota.name] = {
                "used": None,
                "conditions": [_condition("False", "DuplicateQuota", message)],
            }
    return patches


async def reconcile(
    client: ApiClient, namespace: str, seen: Iterable[QuotaSeen], pods: Iterable[PodRequests]
) -> None:
    api: Any = CustomObjectsApi(client)
    for name, status in desired(namespace, seen, pods).items():
        await succeeded(
            api.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type=MERGE,
                _preload_content=False,
            )
        )
        logger.info("quota status updated", namespace=namespace, name=name, status=status)
