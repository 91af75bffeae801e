"""The generated CRDs against a real kube-apiserver: valid objects are stored (with the
server's defaults) and read back by the models; invalid ones are refused with a clear 422."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.api import ElasticQuota, NodeMetric, NodeResourceTopology, Reservation, by_kind
from berth.api.meta import ConditionStatus
from berth.api.nodemetric import NodeMemoryCollectPolicy
from berth.api.reservation import (
    AllocatePolicy,
    ReservationConditionType,
    ReservationPhase,
    ReservationReason,
)
from berth.api.resource import CustomResource

pytestmark = pytest.mark.usefixtures("crds")

# The client would send a JSON patch for a dict body; these are merge patches.
MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}

RESERVATION = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-demo
spec:
  template:
    metadata:
      namespace: default
      labels:
        app: demo
    spec:
      containers:
      - args: ["-c", "1"]
        command: ["stress"]
        image: polinux/stress
        imagePullPolicy: Always
        name: stress
        env:
        - name: MODE
          value: cpu
        resources:
          limits:
            cpu: 500m
            memory: 1Gi
          requests:
            cpu: 500m
            memory: 1Gi
      restartPolicy: Always
      schedulerName: koord-scheduler
      tolerations:
      - key: dedicated
        operator: Exists
        tolerationSeconds: 30
      volumes:
      - name: data
        emptyDir: {}
  owners:
  - object:
      name: pod-demo-0
      namespace: default
  - controller:
      apiVersion: apps/v1
      kind: ReplicaSet
      name: web-7d9f
      namespace: default
  - labelSelector:
      matchLabels:
        app: demo
"""

ELASTIC_QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota1
spec:
  max:
    cpu: 20
    memory: 40Gi
    nvidia.com/gpu: 2
  min:
    cpu: 10
    memory: 20Gi
    nvidia.com/gpu: 1
"""

NODE_METRIC = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata:
  name: worker-1
spec:
  metricCollectPolicy:
    reportIntervalSeconds: 30
"""

NODE_RESOURCE_TOPOLOGY = """
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata:
  name: worker-1
topologyPolicies: [SingleNUMANodeContainerLevel]
attributes:
- {name: topologyManagerPolicy, value: single-numa-node}
- {name: topologyManagerScope, value: pod}
zones:
- name: node-0
  type: Node
  costs:
  - {name: node-0, value: 10}
  - {name: node-1, value: 20}
  resources:
  - {name: cpu, capacity: "16", allocatable: "14", available: "10"}
  - {name: memory, capacity: 32Gi, allocatable: 30Gi, available: 12Gi}
- name: node-1
  type: Node
  resources:
  - {name: cpu, capacity: 16, allocatable: 16, available: 16}
"""

BASES = {
    "Reservation": RESERVATION,
    "ElasticQuota": ELASTIC_QUOTA,
    "NodeMetric": NODE_METRIC,
    "NodeResourceTopology": NODE_RESOURCE_TOPOLOGY,
}


class Cluster:
    """Creates, reads and patches objects of Berth's kinds; deletes what it created.

    A namespace (the ``namespace`` fixture) is made only for namespaced kinds: most of these
    kinds are cluster-scoped, and a test that does not need a namespace should not wait for one.
    """

    def __init__(self, api: ApiClient, request: pytest.FixtureRequest) -> None:
        self.objects = CustomObjectsApi(api)
        self.request = request
        self.created: list[tuple[CustomResource, str]] = []
        self._namespace: str | None = None

    @property
    def namespace(self) -> str:
        if self._namespace is None:
            namespace = self.request.getfixturevalue("namespace")
            assert isinstance(namespace, str)
            self._namespace = namespace
        return self._namespace

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        crd = by_kind(body["kind"])
        body = copy.deepcopy(body)
        body["metadata"]["name"] = f"{body['metadata'].get('name', 'x')}-{uuid.uuid4().hex[:8]}"
        if crd.namespaced:
            stored = await self.objects.create_namespaced_custom_object(
                crd.group, crd.version, self.namespace, crd.plural, body
            )
        else:
            stored = await self.objects.create_cluster_custom_object(
                crd.group, crd.version, crd.plural, body
            )
        assert isinstance(stored, dict)
        self.created.append((crd, stored["metadata"]["name"]))
        return stored

    async def get(self, kind: str, name: str) -> dict[str, Any]:
        crd = by_kind(kind)
        if crd.namespaced:
            got = await self.objects.get_namespaced_custom_object(
                crd.group, crd.version, self.namespace, crd.plural, name
            )
        else:
            got = await self.objects.get_cluster_custom_object(
                crd.group, crd.version, crd.plural, name
            )
        assert isinstance(got, dict)
        return got

    async def patch_status(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch through the status subresource (``body`` is the whole patch)."""
        crd = by_kind(kind)
        if crd.namespaced:
            patched = await self.objects.patch_namespaced_custom_object_status(
                crd.group, crd.version, self.namespace, crd.plural, name, body, **MERGE_PATCH
            )
        else:
            patched = await self.objects.patch_cluster_custom_object_status(
                crd.group, crd.version, crd.plural, name, body, **MERGE_PATCH
            )
        assert isinstance(patched, dict)
        return patched

    async def delete_created(self) -> None:
        for crd, name in reversed(self.created):
            try:
                if crd.namespaced:
                    await self.objects.delete_namespaced_custom_object(
                        crd.group, crd.version, self.namespace, crd.plural, name
                    )
                else:
                    await self.objects.delete_cluster_custom_object(
                        crd.group, crd.version, crd.plural, name
                    )
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
async def cluster(api: ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    client = Cluster(api, request)
    try:
        yield client
    finally:
        await client.delete_created()


def base(kind: str) -> dict[str, Any]:
    data = yaml.safe_load(BASES[kind])
    assert isinstance(data, dict)
    return data


def message_of(error: ApiException) -> str:
    """The API server's Status message, which lists every field error."""
    body = error.body.decode() if isinstance(error.body, bytes) else str(error.body)
    try:
        return str(json.loads(body).get("message", body))
    except json.JSONDecodeError:
        return body


# --- valid objects -----------------------------------------------------------------------------


async def test_reservation_is_stored_with_defaults_and_its_template_intact(
    cluster: Cluster,
) -> None:
    body = base("Reservation")
    body["spec"]["notAField"] = "pruned"
    body["status"] = {"phase": "Available"}  # ignored on create: status is a subresource
    stored = await cluster.create(body)

    rsv = Reservation.from_dict(stored)
    assert rsv.spec.allocate_once is True
    assert rsv.spec.allocate_policy is AllocatePolicy.ALIGNED
    assert rsv.spec.ttl is None  # the 24h default is not a schema default ...
    assert rsv.spec.effective_ttl() is not None  # ... it is the model's
    assert rsv.expiry_time() is not None
    assert rsv.status is None
    assert "notAField" not in stored["spec"]
    # The user's pod template comes back as written, unknown fields and all.
    assert stored["spec"]["template"] == body["spec"]["template"]
    assert len(rsv.spec.owners) == 3
    assert rsv.spec.owners[1].controller is not None
    assert rsv.spec.owners[1].controller.namespace == "default"


async def test_reservation_status_subresource(cluster: Cluster) -> None:
    stored = await cluster.create(base("Reservation"))
    name = stored["metadata"]["name"]
    status = {
        "phase": "Available",
        "nodeName": "worker-1",
        "allocatable": {"cpu": "500m", "memory": "1Gi"},
        "allocated": {"cpu": 0, "memory": 0},
        "currentOwners": [{"namespace": "default", "name": "pod-demo-0", "uid": "u-1"}],
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "lastProbeTime": "2024-05-01T10:00:05Z",
                "lastTransitionTime": "2024-05-01T10:00:05Z",
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "message": "reserved on worker-1",
                "lastTransitionTime": "2024-05-01T10:00:05Z",
            },
        ],
    }
    await cluster.patch_status("Reservation", name, {"status": status})

    rsv = Reservation.from_dict(await cluster.get("Reservation", name))
    assert rsv.phase is ReservationPhase.AVAILABLE
    assert rsv.status is not None
    assert rsv.status.node_name == "worker-1"
    assert rsv.status.allocatable is not None
    assert rsv.status.allocatable["memory"].value == 1024**3
    assert rsv.status.allocated == {"cpu": "0", "memory": "0"}
    assert rsv.status.current_owners is not None
    assert rsv.status.current_owners[0].uid == "u-1"
    ready = (rsv.status.conditions or [])[1]
    assert ready.type == ReservationConditionType.READY
    assert ready.status is ConditionStatus.TRUE
    assert ready.reason == ReservationReason.AVAILABLE
    # Writing the status does not touch the spec.
    assert rsv.spec.allocate_once is True

    # A status patch cannot change the spec either.
    await cluster.patch_status(
        "Reservation",
        name,
        {"spec": {"allocateOnce": False}, "status": {"phase": "Succeeded"}},
    )
    again = Reservation.from_dict(await cluster.get("Reservation", name))
    assert again.phase is ReservationPhase.SUCCEEDED
    assert again.spec.allocate_once is True


async def test_reservation_printer_columns(api: ApiClient, cluster: Cluster) -> None:
    stored = await cluster.create(base("Reservation"))
    name = stored["metadata"]["name"]
    await cluster.patch_status(
        "Reservation",
        name,
        {
            "status": {
                "phase": "Available",
                "nodeName": "worker-1",
                "allocatable": {"cpu": "500m", "memory": "1Gi"},
            }
        },
    )
    crd = by_kind("Reservation")
    table = await api.call_api(
        f"/apis/{crd.group}/{crd.version}/{crd.plural}/{name}",
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
        response_types_map={200: "object"},
        _return_http_data_only=True,
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    cells = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert cells["Phase"] == "Available"
    assert cells["Node"] == "worker-1"
    assert cells["CPU"] == "500m"
    assert cells["Memory"] == "1Gi"
    assert cells["Age"]


async def test_elastic_quota_round_trip_and_status(cluster: Cluster) -> None:
    stored = await cluster.create(base("ElasticQuota"))
    eq = ElasticQuota.from_dict(stored)
    assert eq.metadata.namespace == cluster.namespace
    assert eq.spec.min_of("memory") == 20 * 1024**3
    assert eq.spec.max_of("nvidia.com/gpu") == 2
    name = stored["metadata"]["name"]
    await cluster.patch_status(
        "ElasticQuota", name, {"status": {"used": {"cpu": "2500m", "memory": "6Gi"}}}
    )
    again = ElasticQuota.from_dict(await cluster.get("ElasticQuota", name))
    assert again.status is not None
    assert again.status.used == {"cpu": "2500m", "memory": "6Gi"}


async def test_node_metric_gets_the_collect_policy_defaults(cluster: Cluster) -> None:
    partial = NodeMetric.from_dict(await cluster.create(base("NodeMetric")))
    policy = partial.spec.metric_collect_policy
    assert policy.report_interval_seconds == 30  # as written
    assert policy.aggregate_duration_seconds == 300
    assert policy.node_aggregate_policy.durations == ["5m", "10m", "30m"]
    assert policy.node_memory_collect_policy is NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE

    # No spec at all: the server fills in the whole policy.
    bare = await cluster.create(
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": "n"},
        }
    )
    assert bare["spec"] == {
        "metricCollectPolicy": {
            "aggregateDurationSeconds": 300,
            "reportIntervalSeconds": 60,
            "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
            "nodeMemoryCollectPolicy": "usageWithoutPageCache",
        }
    }


async def test_node_metric_status_as_an_agent_reports_it(cluster: Cluster) -> None:
    stored = await cluster.create(base("NodeMetric"))
    name = stored["metadata"]["name"]
    status = {
        "updateTime": "2024-05-01T12:00:00Z",
        "nodeMetric": {
            "nodeUsage": {"resources": {"cpu": "1235m", "memory": "3412Mi"}},
            "systemUsage": {"resources": {"cpu": "210m", "memory": "812Mi"}},
            "aggregatedNodeUsages": [
                {
                    "duration": "5m0s",
                    "usage": {
                        "avg": {"resources": {"cpu": "1100m", "memory": "3300Mi"}},
                        "p99": {"resources": {"cpu": "2200m", "memory": "3420Mi"}},
                    },
                }
            ],
        },
        "podsMetric": [
            {
                "namespace": "default",
                "name": "nginx-1",
                "podUsage": {"resources": {"cpu": "12m", "memory": "20Mi"}},
                "priority": "koord-prod",
                "qos": "LS",
            }
        ],
    }
    await cluster.patch_status("NodeMetric", name, {"status": status})
    nm = NodeMetric.from_dict(await cluster.get("NodeMetric", name))
    assert nm.status is not None
    assert nm.to_dict()["status"] == status
    assert nm.status.node_metric is not None
    assert nm.status.node_metric.node_usage is not None
    assert (nm.status.node_metric.node_usage.resources or {})["cpu"].milli() == 1235


async def test_node_resource_topology_round_trip(cluster: Cluster) -> None:
    body = base("NodeResourceTopology")
    stored = await cluster.create(body)
    nrt = NodeResourceTopology.from_dict(stored)
    assert nrt.topology_manager_policy == "single-numa-node"
    assert nrt.topology_manager_scope == "pod"
    assert [z.name for z in nrt.zones] == ["node-0", "node-1"]
    memory = nrt.zones[0].resource("memory")
    assert memory is not None
    assert memory.available.value == 12 * 1024**3
    assert stored["zones"] == body["zones"]
    assert stored["topologyPolicies"] == ["SingleNUMANodeContainerLevel"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to an object: set (or, with ``...``, delete) the value at a dotted path."""

    def apply(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if value is ...:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return apply


@pytest.mark.parametrize(
    ("kind", "changes"),
    [
        pytest.param(
            "ElasticQuota",
            [_set("spec.min", {"memory": "1Gi"}), _set("spec.max", {"memory": "1024Mi"})],
            id="eq-min-equals-max-in-other-units",
        ),
        pytest.param(
            "ElasticQuota",
            [_set("spec.min", {"cpu": 4, "pods": 10}), _set("spec.max", {"cpu": "4000m"})],
            id="eq-resource-only-in-min",
        ),
        pytest.param("ElasticQuota", [_set("spec", {})], id="eq-empty-spec"),
        pytest.param("Reservation", [_set("spec.ttl", "0s")], id="rsv-ttl-0s"),
        pytest.param("Reservation", [_set("spec.ttl", "1h30m")], id="rsv-ttl"),
        pytest.param(
            "Reservation", [_set("spec.expires", "2030-01-01T00:00:00Z")], id="rsv-expires"
        ),
        pytest.param(
            "Reservation",
            [_set("spec.allocatePolicy", "Restricted"), _set("spec.allocateOnce", False)],
            id="rsv-restricted",
        ),
        pytest.param(
            "Reservation",
            [
                _set("spec.template.spec.nodeName", "worker-2"),
                _set("spec.taints", [{"key": "k", "value": "v", "effect": "NoSchedule"}]),
                _set("spec.preAllocation", True),
            ],
            id="rsv-pinned-tainted-preallocated",
        ),
        pytest.param(
            "NodeMetric",
            [_set("spec.metricCollectPolicy.nodeMemoryCollectPolicy", "usageWithPageCache")],
            id="nm-page-cache",
        ),
        pytest.param("NodeResourceTopology", [_set("zones", [])], id="nrt-no-zones"),
    ],
)
async def test_accepted(
    cluster: Cluster, kind: str, changes: list[Callable[[dict[str, Any]], None]]
) -> None:
    """Edge cases users legitimately write: the validation must not refuse them."""
    body = base(kind)
    for change in changes:
        change(body)
    stored = await cluster.create(body)
    assert stored["kind"] == kind  # created: a refusal raises
    by_kind(kind).model.from_dict(stored)  # and Berth reads back what was stored


# --- invalid objects ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """An object (or a status) the API server must refuse, and what its message must say."""

    kind: str
    changes: tuple[Callable[[dict[str, Any]], None], ...]
    fragments: tuple[str, ...]
    status: dict[str, Any] | None = field(default=None)
    """When set, the object is created valid and this status patch must be refused."""


BAD = {
    "eq-min-gt-max-cpu": Bad(
        "ElasticQuota",
        (_set("spec.min.cpu", 10), _set("spec.max.cpu", 5)),
        ("spec: Invalid value", "min must not exceed max", "it does for cpu"),
    ),
    "eq-min-gt-max-different-units": Bad(
        "ElasticQuota",
        (_set("spec.min.memory", "2Gi"), _set("spec.max.memory", "1500Mi")),
        ("spec: Invalid value", "min must not exceed max", "it does for memory"),
    ),
    "eq-min-gt-max-int-vs-milli": Bad(
        "ElasticQuota",
        (_set("spec.min.cpu", 4), _set("spec.max.cpu", "3500m")),
        ("min must not exceed max", "it does for cpu"),
    ),
    "eq-negative-quantity": Bad(
        "ElasticQuota", (_set("spec.max.cpu", "-1"),), ("spec.max.cpu", "should match")
    ),
    "eq-negative-integer": Bad(
        "ElasticQuota",
        (_set("spec.min.memory", -1),),
        ("spec.min.memory", "should be greater than or equal to 0"),
    ),
    "eq-malformed-quantity": Bad(
        "ElasticQuota", (_set("spec.min.cpu", "12xyz"),), ("spec.min.cpu", "should match")
    ),
    "eq-too-many-resources": Bad(
        "ElasticQuota",
        (_set("spec.min", {f"example.com/r{i}": 1 for i in range(129)}),),
        ("spec.min", "Too many"),
    ),
    "rsv-ttl-with-expires": Bad(
        "Reservation",
        (_set("spec.ttl", "1h"), _set("spec.expires", "2030-01-01T00:00:00Z")),
        ("ttl and expires are mutually exclusive",),
    ),
    "rsv-no-owners": Bad("Reservation", (_set("spec.owners", ...),), ("spec.owners: Required",)),
    "rsv-empty-owners": Bad(
        "Reservation", (_set("spec.owners", []),), ("at least one owner is required",)
    ),
    "rsv-empty-owner-entry": Bad(
        "Reservation",
        (_set("spec.owners", [{}]),),
        ("each owner must set at least one of object, controller or labelSelector",),
    ),
    "rsv-bad-allocate-policy": Bad(
        "Reservation",
        (_set("spec.allocatePolicy", "Greedy"),),
        ("spec.allocatePolicy", 'Unsupported value: "Greedy"'),
    ),
    "rsv-malformed-ttl": Bad(
        "Reservation", (_set("spec.ttl", "1 day"),), ("spec.ttl", "should match")
    ),
    "rsv-negative-ttl": Bad("Reservation", (_set("spec.ttl", "-1h"),), ("spec.ttl",)),
    "rsv-malformed-expires": Bad(
        "Reservation", (_set("spec.expires", "tomorrow"),), ("spec.expires",)
    ),
    "rsv-missing-template": Bad(
        "Reservation", (_set("spec.template", ...),), ("spec.template: Required",)
    ),
    "rsv-missing-spec": Bad("Reservation", (_set("spec", ...),), ("spec: Required",)),
    "rsv-bad-template-quantity": Bad(
        "Reservation",
        (_set("spec.template.spec.containers.0.resources.requests.cpu", "1.5 cores"),),
        ("spec.template.spec.containers[0].resources.requests.cpu", "should match"),
    ),
    "rsv-bad-taint-effect": Bad(
        "Reservation",
        (_set("spec.taints", [{"key": "k", "effect": "Sometimes"}]),),
        ('Unsupported value: "Sometimes"',),
    ),
    "rsv-unknown-status-phase": Bad(
        "Reservation", (), ("status.phase", 'Unsupported value: "Running"'), {"phase": "Running"}
    ),
    "rsv-bad-condition-status": Bad(
        "Reservation",
        (),
        ('Unsupported value: "Yes"',),
        {"conditions": [{"type": "Ready", "status": "Yes"}]},
    ),
    "rsv-negative-allocatable": Bad(
        "Reservation",
        (),
        ("status.allocatable.cpu", "should match"),
        {"allocatable": {"cpu": "-500m"}},
    ),
    "nm-unknown-memory-collect-policy": Bad(
        "NodeMetric",
        (_set("spec.metricCollectPolicy.nodeMemoryCollectPolicy", "usageWithCache"),),
        ("nodeMemoryCollectPolicy", 'Unsupported value: "usageWithCache"'),
    ),
    "nm-negative-report-interval": Bad(
        "NodeMetric",
        (_set("spec.metricCollectPolicy.reportIntervalSeconds", -5),),
        ("reportIntervalSeconds", "should be greater than or equal to 1"),
    ),
    "nm-malformed-aggregation-window": Bad(
        "NodeMetric",
        (_set("spec.metricCollectPolicy.nodeAggregatePolicy", {"durations": ["5 minutes"]}),),
        ("durations[0]", "should match"),
    ),
    "nrt-zone-without-name": Bad(
        "NodeResourceTopology", (_set("zones.0.name", ...),), ("zones[0].name: Required",)
    ),
    "nrt-duplicate-zone": Bad(
        "NodeResourceTopology", (_set("zones.1.name", "node-0"),), ("zones[1]", "Duplicate value")
    ),
    "nrt-negative-available": Bad(
        "NodeResourceTopology",
        (_set("zones.0.resources.0.available", "-2"),),
        ("zones[0].resources[0].available", "should match"),
    ),
    "nrt-missing-zones": Bad("NodeResourceTopology", (_set("zones", ...),), ("zones: Required",)),
}


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
async def test_refused(cluster: Cluster, bad: Bad) -> None:
    """Each bad object (or status) is refused with 422 and a message saying what is wrong."""
    body = base(bad.kind)
    for change in bad.changes:
        change(body)
    if bad.status is None:
        with pytest.raises(ApiException) as refused:
            await cluster.create(body)
    else:
        name = (await cluster.create(body))["metadata"]["name"]
        with pytest.raises(ApiException) as refused:
            await cluster.patch_status(bad.kind, name, {"status": bad.status})
    assert refused.value.status == 422, message_of(refused.value)
    message = message_of(refused.value)
    for fragment in bad.fragments:
        assert fragment in message
