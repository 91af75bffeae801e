"""Every write Berth makes to the API server, through one request path keyed by kind.

A caller names a :class:`Kind` and an object; :class:`ApiWriter` builds the request. The
two refusals that mean "the object is not as you read it" come back typed, so callers
branch on them instead of on status numbers: :class:`NotFound` (404, gone) and
:class:`Conflict` (409, changed since the ``resourceVersion`` or ``uid`` the write names,
or already there for a create). Both are :class:`Stale`: the object's next watch event
says what it is now, so a controller waits for it rather than retrying. Every other error
status is the client's ``ApiException``; all three keep ``status`` and ``body``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import orjson
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from berth.api import elasticquota, nodemetric, podmigrationjob, reservation
from berth.api.resource import CustomResource
from berth.kube.client import succeeded

__all__ = [
    "ELASTIC_QUOTA",
    "EVENT",
    "MERGE",
    "NODE",
    "NODE_METRIC",
    "POD",
    "POD_MIGRATION_JOB",
    "RESERVATION",
    "STRATEGIC",
    "WORKLOAD_POD_GROUP",
    "ApiWriter",
    "Conflict",
    "Kind",
    "NotFound",
    "Stale",
]

JSON: Final = "application/json"
MERGE: Final = "application/merge-patch+json"
"""RFC 7386 merge patch: maps merge, lists are replaced, null removes a key."""
STRATEGIC: Final = "application/strategic-merge-patch+json"
"""Built-in kinds only: lists with a merge key (a pod's conditions by type) are merged."""
AUTH: Final = ["BearerToken"]


@dataclass(frozen=True)
class Kind:
    """Where objects of a kind live in the API: enough to build their paths."""

    group: str
    """Empty for the core group (``/api/v1``)."""
    version: str
    plural: str
    namespaced: bool

    @classmethod
    def of(cls, crd: CustomResource) -> Kind:
        return cls(crd.group, crd.version, crd.plural, crd.namespaced)

    def path(
        self, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The collection's path, or the object's, or one of its subresources'."""
        parts = ["api", self.version] if not self.group else ["apis", self.group, self.version]
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} are namespaced: a namespace is needed")
            parts += ["namespaces", namespace]
        elif namespace:
            raise ValueError(f"{self.plural} are cluster-scoped: no namespace")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            parts.append(subresource)
        return "/" + "/".join(quote(part, safe="") for part in parts)


POD: Final = Kind("", "v1", "pods", namespaced=True)
NODE: Final = Kind("", "v1", "nodes", namespaced=False)
EVENT: Final = Kind("", "v1", "events", namespaced=True)
RESERVATION: Final = Kind.of(reservation.CRD)
ELASTIC_QUOTA: Final = Kind.of(elasticquota.CRD)
NODE_METRIC: Final = Kind.of(nodemetric.CRD)
POD_MIGRATION_JOB: Final = Kind.of(podmigrationjob.CRD)
WORKLOAD_POD_GROUP: Final = Kind("scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True)
"""kube-scheduler 1.36's PodGroup (built in, behind the GenericWorkload feature gate)."""


class Stale(ApiException):
    """The object is not as the writer read it; its next watch event says what it is."""


class NotFound(Stale):
    """404: the object (or its namespace) is gone."""


class Conflict(Stale):
    """409: changed since the version the write named, or already there (create)."""


def _typed(err: ApiException) -> ApiException:
    """The same refusal, as :class:`NotFound` or :class:`Conflict` when it is one."""
    cls = {404: NotFound, 409: Conflict}.get(err.status)
    if cls is None:
        return err
    typed = cls(status=err.status, reason=err.reason)
    typed.body = err.body
    return typed


class ApiWriter:
    """Creates, patches and deletes objects of any :class:`Kind` through one API client."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def create(
        self, kind: Kind, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """The object as the API server stored it (its uid, resourceVersion, defaults)."""
        created: dict[str, Any] = orjson.loads(await self._send("POST", kind.path(namespace), body))
        return created

    async def create_subresource(
        self,
        kind: Kind,
        name: str,
        subresource: str,
        body: dict[str, Any],
        *,
        namespace: str | None = None,
    ) -> None:
        """POST to a subresource that takes a new object: a pod's binding or eviction."""
        await self._send("POST", kind.path(namespace, name, subresource), body)

    async def patch(
        self,
        kind: Kind,
        name: str,
        body: dict[str, Any],
        *,
        namespace: str | None = None,
        content_type: str = MERGE,
    ) -> dict[str, Any]:
        """The object as the API server stored it after the patch."""
        patched: dict[str, Any] = orjson.loads(
            await self._send("PATCH", kind.path(namespace, name), body, content_type)
        )
        return patched

    async def patch_status(
        self,
        kind: Kind,
        name: str,
        status: dict[str, Any],
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        content_type: str = MERGE,
    ) -> dict[str, Any]:
        """Patch the status subresource with ``status``; the object as stored after it.

        With ``resource_version``, the API server refuses (:class:`Conflict`) a write to an
        object changed since that version: the decision was made from an older state.
        """
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        path = kind.path(namespace, name, "status")
        patched: dict[str, Any] = orjson.loads(await self._send("PATCH", path, body, content_type))
        return patched

    async def delete(
        self,
        kind: Kind,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Delete the object; with ``uid`` or ``resource_version``, only that very one."""
        preconditions = {
            key: value
            for key, value in (("uid", uid), ("resourceVersion", resource_version))
            if value is not None
        }
        body = {"preconditions": preconditions} if preconditions else None
        await self._send("DELETE", kind.path(namespace, name), body)

    async def exists(self, kind: Kind, name: str, *, namespace: str | None = None) -> bool:
        """Whether the object exists now: a read, for a decision an index may lag behind."""
        return await self.read(kind, name, namespace=namespace) is not None

    async def read(
        self, kind: Kind, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object as it is now, or None when there is none."""
        try:
            body: dict[str, Any] = orjson.loads(
                await self._send("GET", kind.path(namespace, name), None)
            )
        except NotFound:
            return None
        return body

    async def _send(
        self, method: str, path: str, body: dict[str, Any] | None, content_type: str = JSON
    ) -> bytes:
        """The one request path: raw, so a large response is never decoded into models."""
        call = self.api.call_api(
            path,
            method,
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=AUTH,
            _preload_content=False,
        )
        try:
            return await succeeded(call)
        except ApiException as err:
            typed = _typed(err)
            if typed is err:
                raise
            raise typed from None


def api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or b"{}").get("message") or err.reason)
    except (TypeError, ValueError):
        return str(err.reason)
