"""The models read what users of Koordinator and scheduler-plugins write, and write it back."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from berth.api import KINDS, ElasticQuota, NodeMetric, NodeResourceTopology, Reservation, by_kind
from berth.api.meta import (
    ConditionStatus,
    LabelSelector,
    PodTemplateSpec,
    Taint,
    TaintEffect,
    Toleration,
)
from berth.api.nodemetric import NodeMemoryCollectPolicy, NodeMetricCollectPolicy
from berth.api.noderesourcetopology import ZoneType
from berth.api.reservation import (
    DEFAULT_TTL,
    AllocatePolicy,
    ReservationConditionType,
    ReservationPhase,
    ReservationReason,
    ReservationSpec,
)

# Koordinator's documented example, plus the unknown-to-Berth pod fields real templates carry.
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
          valueFrom:
            configMapKeyRef: {name: stress, key: mode}
        resources:
          limits:
            cpu: 500m
            memory: 1Gi
          requests:
            cpu: 500m
            memory: 1Gi
          claims:
          - name: gpu
        volumeMounts:
        - name: data
          mountPath: /data
      restartPolicy: Always
      schedulerName: koord-scheduler
      securityContext:
        runAsNonRoot: true
      volumes:
      - name: data
        emptyDir: {}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
  owners:
  - object:
      name: pod-demo-0
      namespace: default
  ttl: 1h
"""

RESERVATION_FULL = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reserve-web
  labels:
    team: web
  creationTimestamp: "2024-05-01T10:00:00Z"
  uid: 8c4ae2b8-0000-4000-8000-000000000001
  resourceVersion: "1234"
  managedFields:
  - manager: kubectl
    operation: Update
spec:
  template:
    spec:
      nodeName: worker-2
      priorityClassName: high
      priority: 1000
      nodeSelector:
        disktype: ssd
      tolerations:
      - key: dedicated
        operator: Equal
        value: web
        effect: NoSchedule
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: topology.kubernetes.io/zone
                operator: In
                values: [zone-a]
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 10
            preference:
              matchExpressions:
              - key: gpu
                operator: DoesNotExist
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {app: web}
            topologyKey: kubernetes.io/hostname
      initContainers:
      - name: init
        image: busybox
        resources:
          requests: {cpu: "2", memory: 512Mi}
      containers:
      - name: web
        image: nginx
        ports:
        - containerPort: 8080
          hostPort: 80
          hostIP: 0.0.0.0
          protocol: TCP
        resources:
          requests: {cpu: 1500m, memory: 2Gi, nvidia.com/gpu: 1}
      overhead: {cpu: 100m}
  owners:
  - controller:
      apiVersion: apps/v1
      kind: ReplicaSet
      name: web-7d9f
      namespace: web
      controller: true
  - labelSelector:
      matchLabels: {app: web}
      matchExpressions:
      - key: tier
        operator: In
        values: [frontend]
  expires: "2024-05-02T10:00:00Z"
  preAllocation: true
  allocateOnce: false
  allocatePolicy: Restricted
  unschedulable: false
  taints:
  - key: reserved-for
    value: web
    effect: NoSchedule
status:
  phase: Available
  nodeName: worker-2
  allocatable: {cpu: 1500m, memory: 2Gi}
  allocated: {cpu: 500m, memory: 1Gi}
  currentOwners:
  - namespace: web
    name: web-7d9f-abcde
    uid: 0d1c1b5e-0000-4000-8000-000000000002
  conditions:
  - type: Scheduled
    status: "True"
    reason: Scheduled
    lastProbeTime: "2024-05-01T10:00:05Z"
    lastTransitionTime: "2024-05-01T10:00:05Z"
  - type: Ready
    status: "True"
    reason: Available
    message: Reservation is available
    lastProbeTime: "2024-05-01T10:00:05Z"
    lastTransitionTime: "2024-05-01T10:00:05Z"
"""

# scheduler-plugins' capacity-scheduling example.
ELASTIC_QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota1
  namespace: quota1
spec:
  max:
    cpu: 20
    memory: 40Gi
    nvidia.com/gpu: 2
  min:
    cpu: 10
    memory: 20Gi
    nvidia.com/gpu: 1
status:
  used:
    cpu: 2500m
    memory: 6Gi
"""

# As koordlet reports it.
NODE_METRIC = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata:
  name: worker-1
spec:
  metricCollectPolicy:
    aggregateDurationSeconds: 300
    reportIntervalSeconds: 60
    nodeAggregatePolicy:
      durations: [5m0s, 10m0s, 30m0s]
    nodeMemoryCollectPolicy: usageWithHotPageCache
status:
  updateTime: "2024-05-01T12:00:00Z"
  nodeMetric:
    nodeUsage:
      resources: {cpu: 1235m, memory: 3412Mi}
    systemUsage:
      resources: {cpu: 210m, memory: 812Mi}
    aggregatedNodeUsages:
    - duration: 5m0s
      usage:
        avg: {resources: {cpu: 1100m, memory: 3300Mi}}
        p50: {resources: {cpu: 1000m, memory: 3290Mi}}
        p90: {resources: {cpu: 1800m, memory: 3400Mi}}
        p95: {resources: {cpu: 1900m, memory: 3410Mi}}
        p99: {resources: {cpu: 2200m, memory: 3420Mi}}
  podsMetric:
  - namespace: default
    name: nginx-1
    podUsage:
      resources: {cpu: 12m, memory: 20Mi}
    priority: koord-prod
    qos: LS
"""

# As the NFD topology-updater writes it.
NODE_RESOURCE_TOPOLOGY = """
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata:
  name: worker-1
topologyPolicies: [SingleNUMANodeContainerLevel]
attributes:
- name: topologyManagerPolicy
  value: single-numa-node
- name: topologyManagerScope
  value: container
- name: nodeTopologyPodsFingerprint
  value: pfp0v001ef46db3751d8e999
zones:
- name: node-0
  type: Node
  costs:
  - {name: node-0, value: 10}
  - {name: node-1, value: 20}
  resources:
  - {name: cpu, capacity: "16", allocatable: "14", available: "10"}
  - {name: memory, capacity: 32Gi, allocatable: 30Gi, available: 12Gi}
  - {name: example.com/nic, capacity: 4, allocatable: 4, available: 3}
- name: node-1
  type: Node
  parent: socket-0
  attributes:
  - {name: cpu-model, value: xeon}
  costs:
  - {name: node-0, value: 20}
  - {name: node-1, value: 10}
  resources:
  - {name: cpu, capacity: "16", allocatable: "16", available: "16"}
"""


def load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def stringify_quantities(node: Any, keys: set[str]) -> Any:
    """What the wire form of YAML numbers under quantity keys looks like (strings)."""
    if isinstance(node, dict):
        return {
            k: str(v) if k in keys and isinstance(v, int) else stringify_quantities(v, keys)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [stringify_quantities(v, keys) for v in node]
    return node


# --- Reservation -------------------------------------------------------------------------------


def test_koordinator_example_round_trips_with_defaults_added() -> None:
    data = load(RESERVATION)
    rsv = Reservation.from_dict(data)
    expected = copy.deepcopy(data)
    expected["spec"]["allocateOnce"] = True
    expected["spec"]["allocatePolicy"] = "Aligned"
    assert rsv.to_dict() == expected
    assert Reservation.from_dict(rsv.to_dict()) == rsv


def test_unknown_pod_template_fields_are_preserved() -> None:
    rsv = Reservation.from_dict(load(RESERVATION))
    template = rsv.spec.template.to_dict()
    container = template["spec"]["containers"][0]
    assert container["args"] == ["-c", "1"]
    assert container["env"][0]["valueFrom"]["configMapKeyRef"] == {"name": "stress", "key": "mode"}
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert template["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert template["spec"]["securityContext"] == {"runAsNonRoot": True}
    assert template["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert template["metadata"]["namespace"] == "default"
    # ... while the modelled fields are typed.
    spec = rsv.spec.template.spec
    assert spec.containers[0].resources is not None
    requests = spec.containers[0].resources.requests or {}
    assert requests["memory"].value == 1024**3
    assert spec.scheduler_name == "koord-scheduler"


def test_full_reservation_round_trips_exactly() -> None:
    data = load(RESERVATION_FULL)
    rsv = Reservation.from_dict(data)
    assert rsv.to_dict() == stringify_quantities(data, {"nvidia.com/gpu"})
    # metadata fields Berth does not model (managedFields) are kept as well.
    assert rsv.metadata.model_extra == {
        "managedFields": [{"manager": "kubectl", "operation": "Update"}]
    }


def test_full_reservation_typed_access() -> None:
    rsv = Reservation.from_dict(load(RESERVATION_FULL))
    spec = rsv.spec
    assert spec.allocate_policy is AllocatePolicy.RESTRICTED
    assert spec.allocate_once is False
    assert spec.pre_allocation is True
    assert spec.owners[0].controller is not None
    assert spec.owners[0].controller.namespace == "web"
    assert spec.owners[0].controller.uid is None
    assert spec.owners[1].label_selector is not None
    assert spec.owners[1].label_selector.matches({"app": "web", "tier": "frontend"})
    assert spec.taints == [Taint(key="reserved-for", value="web", effect=TaintEffect.NO_SCHEDULE)]
    pod = spec.template.spec
    assert pod.node_name == "worker-2"
    assert pod.priority == 1000
    assert pod.overhead == {"cpu": "100m"}
    assert pod.init_containers is not None
    assert pod.containers[0].ports is not None
    assert pod.containers[0].ports[0].host_port == 80
    assert pod.containers[0].ports[0].host_ip == "0.0.0.0"
    assert pod.affinity is not None
    node_affinity = pod.affinity.node_affinity
    assert node_affinity is not None
    required = node_affinity.required_during_scheduling_ignored_during_execution
    assert required is not None
    assert required.node_selector_terms[0].match_expressions is not None
    assert required.node_selector_terms[0].match_expressions[0].values == ["zone-a"]
    assert rsv.phase is ReservationPhase.AVAILABLE
    assert rsv.status is not None
    assert rsv.status.allocatable is not None
    assert rsv.status.allocatable["cpu"].milli() == 1500
    conditions = rsv.status.conditions or []
    assert [c.type for c in conditions] == [
        ReservationConditionType.SCHEDULED,
        ReservationConditionType.READY,
    ]
    assert conditions[1].reason == ReservationReason.AVAILABLE
    assert conditions[1].status is ConditionStatus.TRUE
    assert conditions[1].last_probe_time == datetime(2024, 5, 1, 10, 0, 5, tzinfo=UTC)


def test_snake_case_and_camel_case_both_accepted() -> None:
    spec = {
        "template": {"spec": {"containers": []}},
        "owners": [{"label_selector": {"match_labels": {"app": "x"}}}],
        "allocate_once": False,
    }
    camel = {
        "template": {"spec": {"containers": []}},
        "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}],
        "allocateOnce": False,
    }
    assert ReservationSpec.model_validate(spec) == ReservationSpec.model_validate(camel)
    assert ReservationSpec.model_validate(spec).to_dict()["owners"] == camel["owners"]


def test_fields_berth_does_not_serve_are_dropped_outside_the_template() -> None:
    """Like the API server's pruning: only the pod template keeps unknown fields."""
    data = load(RESERVATION)
    data["spec"]["preAllocationPolicy"] = {"mode": "Cluster"}
    data["unknownTopLevel"] = 1
    out = Reservation.from_dict(data).to_dict()
    assert "preAllocationPolicy" not in out["spec"]
    assert "unknownTopLevel" not in out


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"owners": []}, "at least 1 item"),
        ({"owners": None}, "owners"),
        ({"template": None}, "template"),
        ({"allocatePolicy": "Greedy"}, "Aligned"),
        ({"ttl": "1 day"}, "malformed"),
        ({"taints": [{"key": "a", "effect": "Sometimes"}]}, "NoSchedule"),
    ],
)
def test_bad_reservations_do_not_parse(change: dict[str, Any], error: str) -> None:
    data = load(RESERVATION)
    for key, value in change.items():
        if value is None:
            del data["spec"][key]
        else:
            data["spec"][key] = value
    with pytest.raises(ValidationError, match=error):
        Reservation.from_dict(data)


def test_unknown_phase_does_not_parse() -> None:
    data = load(RESERVATION)
    data["status"] = {"phase": "Running"}
    with pytest.raises(ValidationError, match="Pending"):
        Reservation.from_dict(data)


def _reservation(**spec: Any) -> Reservation:
    return Reservation.model_validate(
        {
            "metadata": {"name": "r", "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"template": {}, "owners": [{"object": {"name": "p"}}], **spec},
        }
    )


CREATED = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


def test_ttl_defaults_to_24h_in_the_model_not_the_wire() -> None:
    rsv = _reservation()
    assert rsv.spec.ttl is None
    assert "ttl" not in rsv.to_dict()["spec"]
    assert rsv.spec.effective_ttl() == DEFAULT_TTL == timedelta(hours=24)
    assert rsv.expiry_time() == CREATED + timedelta(hours=24)
    assert not rsv.is_expired(CREATED + timedelta(hours=23, minutes=59))
    assert rsv.is_expired(CREATED + timedelta(hours=24))


def test_zero_ttl_never_expires() -> None:
    for zero in ("0s", "0", "0h0m"):
        rsv = _reservation(ttl=zero)
        assert rsv.spec.effective_ttl() is None
        assert rsv.expiry_time() is None
        assert not rsv.is_expired(CREATED + timedelta(days=3650))


def test_explicit_ttl_and_expires() -> None:
    assert _reservation(ttl="1h30m").expiry_time() == CREATED + timedelta(minutes=90)
    expires = _reservation(expires="2024-05-01T11:00:00+02:00")
    assert expires.spec.effective_ttl() is None
    assert expires.expiry_time() == datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    assert expires.to_dict()["spec"]["expires"] == "2024-05-01T09:00:00Z"
    # Objects from Koordinator may carry both (its CRD defaults ttl): expires wins, as there.
    both = _reservation(ttl="24h", expires="2024-05-01T12:00:00Z")
    assert both.expiry_time() == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_expiry_needs_a_creation_time() -> None:
    rsv = Reservation.model_validate({"spec": {"template": {}, "owners": [{"object": {}}]}})
    with pytest.raises(ValueError, match="creationTimestamp"):
        rsv.expiry_time()


def test_naive_times_are_utc_and_offsets_are_converted() -> None:
    naive = _reservation(expires=datetime(2024, 5, 1, 12, 0))
    assert naive.spec.expires == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    offset = _reservation(expires=datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=8))))
    assert offset.to_dict()["spec"]["expires"] == "2024-05-01T04:00:00Z"


def test_building_a_reservation_in_python() -> None:
    rsv = Reservation(
        metadata={"name": "r1"},
        spec=ReservationSpec(
            template=PodTemplateSpec.model_validate(
                {"spec": {"containers": [{"resources": {"requests": {"cpu": 2}}}]}}
            ),
            owners=[{"object": {"namespace": "ns", "name": "p"}}],
        ),
    )
    assert rsv.to_dict() == {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r1"},
        "spec": {
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}},
            "owners": [{"object": {"namespace": "ns", "name": "p"}}],
            "allocateOnce": True,
            "allocatePolicy": "Aligned",
        },
    }


# --- ElasticQuota ------------------------------------------------------------------------------


def test_scheduler_plugins_example_round_trips() -> None:
    data = load(ELASTIC_QUOTA)
    eq = ElasticQuota.from_dict(data)
    assert eq.to_dict() == stringify_quantities(data, {"cpu", "nvidia.com/gpu"})
    assert eq.spec.min_of("memory") == 20 * 1024**3
    assert eq.spec.max_of("cpu") == 20
    assert eq.spec.min_of("ephemeral-storage") == 0  # not listed: zero
    assert eq.spec.max_of("ephemeral-storage") is None  # not listed: unlimited
    assert eq.status is not None
    assert eq.status.used is not None
    assert eq.status.used["cpu"].value == Decimal("2.5")


def test_elastic_quota_without_spec() -> None:
    eq = ElasticQuota.model_validate({"metadata": {"name": "q", "namespace": "ns"}})
    assert eq.spec.max_of("cpu") is None
    assert eq.to_dict()["spec"] == {}


def test_elastic_quota_rejects_negative_and_malformed() -> None:
    with pytest.raises(ValidationError, match="negative"):
        ElasticQuota.model_validate({"spec": {"max": {"cpu": "-1"}}})
    with pytest.raises(ValidationError, match="malformed"):
        ElasticQuota.model_validate({"spec": {"min": {"cpu": "12xyz"}}})


# --- NodeMetric --------------------------------------------------------------------------------


def test_koordlet_node_metric_round_trips() -> None:
    data = load(NODE_METRIC)
    nm = NodeMetric.from_dict(data)
    assert nm.to_dict() == data
    assert nm.spec.metric_collect_policy.node_memory_collect_policy is (
        NodeMemoryCollectPolicy.USAGE_WITH_HOT_PAGE_CACHE
    )
    assert nm.status is not None
    assert nm.status.update_time == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert nm.status.node_metric is not None
    usages = nm.status.node_metric.aggregated_node_usages or []
    assert (usages[0].usage or {})["p95"].resources == {"cpu": "1900m", "memory": "3410Mi"}
    pods = nm.status.pods_metric or []
    assert (pods[0].priority, pods[0].qos) == ("koord-prod", "LS")


def test_node_metric_policy_defaults() -> None:
    expected = {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }
    bare = NodeMetric.model_validate({"metadata": {"name": "n"}})
    assert bare.to_dict()["spec"] == {"metricCollectPolicy": expected}
    partial = NodeMetric.model_validate(
        {"spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30}}}
    )
    assert partial.to_dict()["spec"]["metricCollectPolicy"] == {
        **expected,
        "reportIntervalSeconds": 30,
    }
    policy = NodeMetricCollectPolicy()
    assert policy.report_interval() == timedelta(seconds=60)
    assert policy.aggregation_windows() == [timedelta(minutes=m) for m in (5, 10, 30)]


@pytest.mark.parametrize(
    "policy",
    [
        {"nodeMemoryCollectPolicy": "usageWithCache"},
        {"reportIntervalSeconds": -5},
        {"aggregateDurationSeconds": 0},
        {"nodeAggregatePolicy": {"durations": ["5 minutes"]}},
    ],
)
def test_bad_collect_policies_do_not_parse(policy: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        NodeMetric.model_validate({"spec": {"metricCollectPolicy": policy}})


# --- NodeResourceTopology ----------------------------------------------------------------------


def test_topology_updater_object_round_trips() -> None:
    data = load(NODE_RESOURCE_TOPOLOGY)
    nrt = NodeResourceTopology.from_dict(data)
    assert nrt.to_dict() == stringify_quantities(data, {"capacity", "allocatable", "available"})
    assert nrt.topology_manager_policy == "single-numa-node"
    assert nrt.topology_manager_scope == "container"
    assert nrt.pods_fingerprint == "pfp0v001ef46db3751d8e999"
    assert nrt.attribute("missing") is None
    zone = nrt.zones[0]
    assert zone.type == ZoneType.NODE
    memory = zone.resource("memory")
    assert memory is not None
    assert memory.available.value == 12 * 1024**3
    assert zone.resource("gpu") is None
    assert nrt.zones[1].parent == "socket-0"


def test_zones_are_top_level_not_under_spec() -> None:
    data = load(NODE_RESOURCE_TOPOLOGY)
    data["spec"] = {"zones": data.pop("zones")}
    with pytest.raises(ValidationError, match="zones"):
        NodeResourceTopology.from_dict(data)


def test_zone_needs_a_name() -> None:
    data = load(NODE_RESOURCE_TOPOLOGY)
    del data["zones"][0]["name"]
    with pytest.raises(ValidationError, match="name"):
        NodeResourceTopology.from_dict(data)


# --- shared shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
    ],
)
def test_label_selector(selector: dict[str, Any], labels: dict[str, str], selected: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is selected


TAINT = Taint(key="dedicated", value="web", effect=TaintEffect.NO_SCHEDULE)


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "web"}, True),  # Equal is the default; any effect
        ({"key": "dedicated", "operator": "Equal", "value": "db"}, False),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "dedicated", "operator": "Sometimes", "value": "web"}, False),
    ],
)
def test_toleration(toleration: dict[str, Any], tolerated: bool) -> None:
    assert Toleration.model_validate(toleration).tolerates(TAINT) is tolerated


def test_registry_lists_the_kinds() -> None:
    assert [k.kind for k in KINDS] == [
        "Reservation",
        "ElasticQuota",
        "NodeMetric",
        "NodeResourceTopology",
        "PodMigrationJob",
        "PodGroup",
    ]
    assert by_kind("rsv").model is Reservation
    assert by_kind("ElasticQuota").plural == "elasticquotas"
    assert by_kind("nrt").api_version == "topology.node.k8s.io/v1alpha2"
    assert by_kind("nodemetrics").crd_name == "nodemetrics.slo.koordinator.sh"
    with pytest.raises(KeyError):
        by_kind("Pod")
    for crd in KINDS:
        obj = crd.model.model_validate(
            {
                "spec": {"template": {}, "owners": [{"object": {}}], "podRef": {}},
                "zones": [],
            }
        )
        assert obj.api_version == crd.api_version
        assert obj.kind == crd.kind
