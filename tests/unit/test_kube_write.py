"""The write helper: the requests it builds for each kind, and the refusals it types.

The API client is real; only its ``call_api`` (the step that would open a connection) is
replaced by a recorder, which checks every call against the real signature first.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.api import elasticquota, nodemetric, podmigrationjob, reservation
from berth.kube.write import (
    ELASTIC_QUOTA,
    EVENT,
    MERGE,
    NODE,
    NODE_METRIC,
    POD,
    POD_MIGRATION_JOB,
    RESERVATION,
    STRATEGIC,
    ApiWriter,
    Conflict,
    Kind,
    NotFound,
    Stale,
)

REAL_CALL_API = inspect.signature(ApiClient.call_api)
RESERVATION_ARGS = (reservation.GROUP, reservation.VERSION)
ELASTIC_QUOTA_ARGS = (elasticquota.GROUP, elasticquota.VERSION)
NODE_METRIC_ARGS = (nodemetric.GROUP, nodemetric.VERSION)


@dataclass
class Response:
    """A raw response as the client hands it back with ``_preload_content=False``."""

    status: int
    body: bytes = b"{}"
    reason: str = "OK"
    released: bool = False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        self.released = True


@dataclass
class Recorder:
    responses: list[Response] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    handed_out: list[Response] = field(default_factory=list)

    async def call_api(self, *args: Any, **kwargs: Any) -> Response:
        bound = REAL_CALL_API.bind(None, *args, **kwargs)  # raises on what the client refuses
        self.calls.append(dict(bound.arguments))
        response = self.responses.pop(0) if self.responses else Response(200)
        self.handed_out.append(response)
        return response

    @property
    def last(self) -> dict[str, Any]:
        return self.calls[-1]


@pytest.fixture
async def api() -> AsyncIterator[tuple[ApiWriter, Recorder]]:
    client = ApiClient(Configuration(host="https://api.test"))
    recorder = Recorder()
    client.call_api = recorder.call_api  # type: ignore[method-assign]
    try:
        yield ApiWriter(client), recorder
    finally:
        await client.close()


def request(call: dict[str, Any]) -> tuple[str, str, str | None, Any]:
    headers = call["header_params"]
    assert headers["Accept"] == "application/json"
    assert call["auth_settings"] == ["BearerToken"]
    assert call["_preload_content"] is False
    return call["method"], call["resource_path"], headers.get("Content-Type"), call.get("body")


def test_kinds_of_berths_crds_come_from_their_definitions() -> None:
    assert Kind("scheduling.koordinator.sh", "v1alpha1", "reservations", False) == RESERVATION
    assert Kind("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", True) == ELASTIC_QUOTA
    assert Kind("slo.koordinator.sh", "v1alpha1", "nodemetrics", False) == NODE_METRIC
    for kind, crd in (
        (RESERVATION, reservation.CRD),
        (ELASTIC_QUOTA, elasticquota.CRD),
        (NODE_METRIC, nodemetric.CRD),
        (POD_MIGRATION_JOB, podmigrationjob.CRD),
    ):
        assert (kind.group, kind.version, kind.plural) == (crd.group, crd.version, crd.plural)


def test_paths_by_scope_and_subresource() -> None:
    assert POD.path("team", "web-0", "status") == "/api/v1/namespaces/team/pods/web-0/status"
    assert NODE.path(None, "n1") == "/api/v1/nodes/n1"
    assert EVENT.path("default") == "/api/v1/namespaces/default/events"
    assert (
        RESERVATION.path(None, "r1", "status")
        == "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1/status"
    )
    assert (
        ELASTIC_QUOTA.path("team", "q")
        == "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team/elasticquotas/q"
    )
    # Names are path segments: nothing in one can reach another path.
    assert NODE.path(None, "a/b?c") == "/api/v1/nodes/a%2Fb%3Fc"


def test_scope_is_checked() -> None:
    with pytest.raises(ValueError, match="namespaced"):
        POD.path(None, "web-0")
    with pytest.raises(ValueError, match="cluster-scoped"):
        RESERVATION.path("team", "r1")


async def test_patch_status_is_a_merge_patch_carrying_the_version_decided_from(
    api: tuple[ApiWriter, Recorder],
) -> None:
    writer, recorder = api
    await writer.patch_status(RESERVATION, "r1", {"phase": "Failed"}, resource_version="42")
    assert request(recorder.last) == (
        "PATCH",
        "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1/status",
        MERGE,
        {"metadata": {"resourceVersion": "42"}, "status": {"phase": "Failed"}},
    )
    await writer.patch_status(
        POD, "p", {"conditions": []}, namespace="team", content_type=STRATEGIC
    )
    assert request(recorder.last) == (
        "PATCH",
        "/api/v1/namespaces/team/pods/p/status",
        STRATEGIC,
        {"status": {"conditions": []}},
    )
    assert all(r.released for r in recorder.handed_out)


async def test_patch_create_and_subresources(api: tuple[ApiWriter, Recorder]) -> None:
    writer, recorder = api
    await writer.patch(NODE_METRIC, "n1", {"spec": {"x": 1}})
    assert request(recorder.last) == (
        "PATCH",
        "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/n1",
        MERGE,
        {"spec": {"x": 1}},
    )
    event = {"metadata": {"name": "e", "namespace": "team"}}
    await writer.create(EVENT, event, namespace="team")
    assert request(recorder.last) == (
        "POST",
        "/api/v1/namespaces/team/events",
        "application/json",
        event,
    )
    binding = {"kind": "Binding", "target": {"name": "n1"}}
    await writer.create_subresource(POD, "p", "binding", binding, namespace="team")
    assert request(recorder.last) == (
        "POST",
        "/api/v1/namespaces/team/pods/p/binding",
        "application/json",
        binding,
    )


async def test_patches_return_the_object_as_stored(api: tuple[ApiWriter, Recorder]) -> None:
    """A caller that goes on from its own write (the next step of a migration) needs the
    resourceVersion the write produced."""
    writer, recorder = api
    stored = {"metadata": {"name": "j", "resourceVersion": "8"}, "status": {"phase": "Running"}}
    recorder.responses = [Response(200, json.dumps(stored).encode())] * 2
    assert await writer.patch_status(POD_MIGRATION_JOB, "j", {"phase": "Running"}) == stored
    assert await writer.patch(POD_MIGRATION_JOB, "j", {"metadata": {}}) == stored


async def test_delete_names_only_the_preconditions_given(api: tuple[ApiWriter, Recorder]) -> None:
    writer, recorder = api
    await writer.delete(RESERVATION, "r1", uid="u", resource_version="7")
    method, path, _, body = request(recorder.last)
    assert (method, path) == ("DELETE", "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1")
    assert body == {"preconditions": {"uid": "u", "resourceVersion": "7"}}
    await writer.delete(POD, "p", namespace="team", uid="u")
    assert request(recorder.last)[3] == {"preconditions": {"uid": "u"}}
    await writer.delete(NODE_METRIC, "n1")
    assert request(recorder.last)[3] is None


async def test_404_is_not_found_and_409_is_conflict(api: tuple[ApiWriter, Recorder]) -> None:
    writer, recorder = api
    refusal = json.dumps({"kind": "Status", "message": "the object has been modified"}).encode()
    recorder.responses = [Response(409, refusal, "Conflict"), Response(404, b"{}", "Not Found")]
    with pytest.raises(Conflict) as conflict:
        await writer.patch_status(RESERVATION, "r1", {}, resource_version="1")
    with pytest.raises(NotFound) as gone:
        await writer.delete(NODE_METRIC, "n1")
    for err, status in ((conflict.value, 409), (gone.value, 404)):
        # Typed, and still the client's exception for callers that read status and body.
        assert isinstance(err, Stale)
        assert isinstance(err, ApiException)
        assert err.status == status
    assert conflict.value.body == refusal
    assert all(r.released for r in recorder.handed_out)


async def test_other_refusals_stay_plain_api_exceptions(api: tuple[ApiWriter, Recorder]) -> None:
    writer, recorder = api
    recorder.responses = [Response(422, b'{"message": "invalid"}', "Unprocessable Entity")]
    with pytest.raises(ApiException) as refused:
        await writer.create(EVENT, {}, namespace="team")
    assert not isinstance(refused.value, Stale)
    assert (refused.value.status, refused.value.body) == (422, b'{"message": "invalid"}')


async def test_exists_reads_and_takes_only_404_for_no(api: tuple[ApiWriter, Recorder]) -> None:
    writer, recorder = api
    recorder.responses = [Response(200), Response(404), Response(503, reason="Unavailable")]
    assert await writer.exists(NODE, "n1") is True
    assert request(recorder.last)[:2] == ("GET", "/api/v1/nodes/n1")
    assert await writer.exists(NODE, "n1") is False
    with pytest.raises(ApiException) as unavailable:
        await writer.exists(NODE, "n1")
    assert unavailable.value.status == 503


def generated_path(call: dict[str, Any]) -> str:
    path: str = call["resource_path"]
    for key, value in (call.get("path_params") or {}).items():
        path = path.replace("{" + key + "}", quote(str(value), safe=""))
    return path


async def test_requests_match_the_generated_clients(api: tuple[ApiWriter, Recorder]) -> None:
    """Each write the helper replaced goes out as the client's generated method sent it."""
    writer, recorder = api
    core: Any = CoreV1Api(writer.api)
    custom: Any = CustomObjectsApi(writer.api)
    body = {"x": 1}
    pairs: list[tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
        (
            lambda: core.patch_namespaced_pod_status(
                "p", "ns", {"status": body}, _content_type=STRATEGIC
            ),
            lambda: writer.patch_status(POD, "p", body, namespace="ns", content_type=STRATEGIC),
        ),
        (
            lambda: core.create_namespaced_pod_binding("p", "ns", body),
            lambda: writer.create_subresource(POD, "p", "binding", body, namespace="ns"),
        ),
        (
            lambda: core.create_namespaced_event("ns", body),
            lambda: writer.create(EVENT, body, namespace="ns"),
        ),
        (
            lambda: custom.patch_cluster_custom_object_status(
                *RESERVATION_ARGS,
                "reservations",
                "r",
                {"status": body, "metadata": {"resourceVersion": "9"}},
                _content_type=MERGE,
            ),
            lambda: writer.patch_status(RESERVATION, "r", body, resource_version="9"),
        ),
        (
            lambda: custom.patch_cluster_custom_object(
                *NODE_METRIC_ARGS, "nodemetrics", "n", body, _content_type=MERGE
            ),
            lambda: writer.patch(NODE_METRIC, "n", body),
        ),
        (
            lambda: core.patch_namespaced_pod("p", "ns", body, _content_type=MERGE),
            lambda: writer.patch(POD, "p", body, namespace="ns"),
        ),
        (
            lambda: core.create_namespaced_pod_eviction("p", "ns", body),
            lambda: writer.create_subresource(POD, "p", "eviction", body, namespace="ns"),
        ),
        (
            lambda: core.delete_namespaced_pod("p", "ns", body={"preconditions": {"uid": "u"}}),
            lambda: writer.delete(POD, "p", namespace="ns", uid="u"),
        ),
        (lambda: core.read_node("n"), lambda: writer.exists(NODE, "n")),
        (
            lambda: core.patch_namespaced_event("e", "ns", body, _content_type=MERGE),
            lambda: writer.patch(EVENT, "e", body, namespace="ns"),
        ),
        (
            lambda: custom.patch_namespaced_custom_object_status(
                *ELASTIC_QUOTA_ARGS,
                "ns",
                "elasticquotas",
                "q",
                {"status": body},
                _content_type=MERGE,
            ),
            lambda: writer.patch_status(ELASTIC_QUOTA, "q", body, namespace="ns"),
        ),
        (
            lambda: custom.create_cluster_custom_object(*NODE_METRIC_ARGS, "nodemetrics", body),
            lambda: writer.create(NODE_METRIC, body),
        ),
        (
            lambda: custom.delete_cluster_custom_object(*NODE_METRIC_ARGS, "nodemetrics", "n"),
            lambda: writer.delete(NODE_METRIC, "n"),
        ),
    ]
    for generated, helper in pairs:
        await generated()
        before = recorder.last
        await helper()
        after = recorder.last
        assert (after["method"], after["resource_path"]) == (
            before["method"],
            generated_path(before),
        )
        content_type = before["header_params"].get("Content-Type")
        if before["method"] == "PATCH":
            assert after["header_params"]["Content-Type"] == content_type
        assert after.get("body") == before.get("body")
