"""The checked-in CRDs are what the models generate, and what the API server will accept."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from berth.api import KINDS, by_kind
from berth.api.crdgen import HEADER, SchemaError, check, crd_manifest, main, openapi_schema, write
from berth.api.meta import KubeObject
from berth.api.quantity import MAX_QUANTITY_LENGTH, NON_NEGATIVE_QUANTITY_PATTERN
from berth.api.resource import CustomResource

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
KIND_IDS = [k.kind for k in KINDS]


def schema_of(crd: CustomResource) -> dict[str, Any]:
    manifest = crd_manifest(crd)
    schema = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (``.spec.owners[*].object``, ``.spec.min.*``)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from walk(node["items"], f"{path}[*]")


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The node at a path as :func:`walk` names them (``.zones[*].resources[*]``, ``.used.*``)."""
    node = schema
    for part in path.strip(".").split("."):
        name, items = (part[:-3], True) if part.endswith("[*]") else (part, False)
        if name in node.get("properties", {}):
            node = node["properties"][name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            raise KeyError(path)
        if items:
            node = node["items"]
    return node


# --- the files are generated ------------------------------------------------------------------


def test_crds_directory_is_up_to_date() -> None:
    problems = check(CRDS)
    assert problems == [], "run: python -m berth.api.crdgen --write crds/\n" + "\n".join(problems)


def test_kustomization_lists_exactly_the_crd_files() -> None:
    text = (CRDS / "kustomization.yaml").read_text(encoding="utf-8")
    assert text.startswith(HEADER)
    listed = yaml.safe_load(text)["resources"]
    assert sorted(listed) == sorted(f"{crd.crd_name}.yaml" for crd in KINDS)
    assert all((CRDS / name).is_file() for name in listed)


@pytest.mark.parametrize("crd", KINDS, ids=KIND_IDS)
def test_each_file_is_one_crd_with_the_header(crd: CustomResource) -> None:
    text = (CRDS / f"{crd.plural}.{crd.group}.yaml").read_text(encoding="utf-8")
    assert text.startswith(HEADER)
    docs = list(yaml.safe_load_all(text))
    assert len(docs) == 1
    assert docs[0] == crd_manifest(crd)


def test_check_fails_on_stale_missing_or_stray_files(tmp_path: Path) -> None:
    assert main(["--write", str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    first = tmp_path / f"{KINDS[0].crd_name}.yaml"
    first.write_text(first.read_text(encoding="utf-8").replace("rsv", "rsvx"), encoding="utf-8")
    assert main(["--check", str(tmp_path)]) == 1
    write(tmp_path)
    (tmp_path / f"{KINDS[1].crd_name}.yaml").unlink()
    assert main(["--check", str(tmp_path)]) == 1
    write(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: []\n", encoding="utf-8")
    assert main(["--check", str(tmp_path)]) == 1
    write(tmp_path)
    (tmp_path / "extra.yaml").write_text("{}", encoding="utf-8")
    assert any("not generated" in p for p in check(tmp_path))


# --- structural --------------------------------------------------------------------------------

INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


@pytest.mark.parametrize("crd", KINDS, ids=KIND_IDS)
def test_schema_is_structural(crd: CustomResource) -> None:
    schema = schema_of(crd)
    assert schema["type"] == "object"
    for path, node in walk(schema):
        where = path or "<root>"
        assert not {"$ref", "$defs", "title", "nullable", "oneOf", "allOf", "not"} & set(node), (
            where
        )
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == INT_OR_STRING, where
            assert "type" not in node, where
        else:
            assert "anyOf" not in node, where
            assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), where
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", where
        if "items" in node:
            assert node["type"] == "array", where
        if node.get("type") == "array":
            assert "items" in node, where
        assert node.get("additionalProperties") is not True, where
        if node.get("x-kubernetes-list-type") == "map":
            required = set(node["items"].get("required", []))
            assert set(node["x-kubernetes-list-map-keys"]) <= required, where
        if "enum" in node:
            assert node["type"] == "string", where
        if "default" in node:
            assert node.get("type") in ("object", "array", "string", "integer", "boolean"), where


WITH_QUANTITIES = [k for k in KINDS if k.kind != "PodMigrationJob"]


@pytest.mark.parametrize("crd", WITH_QUANTITIES, ids=[k.kind for k in WITH_QUANTITIES])
def test_quantities_are_int_or_string_and_non_negative(crd: CustomResource) -> None:
    quantities = [n for _, n in walk(schema_of(crd)) if n.get("x-kubernetes-int-or-string")]
    assert quantities
    for node in quantities:
        assert node["pattern"] == NON_NEGATIVE_QUANTITY_PATTERN
        assert node["minimum"] == 0
        assert node["maxLength"] == MAX_QUANTITY_LENGTH
        assert re.fullmatch(node["pattern"], "1500m")
        assert not re.fullmatch(node["pattern"], "-1")


KEPT_AS_WRITTEN = (
    ".spec.reservationOptions.template",
    ".spec.reservationOptions.preemptionOptions",
    ".spec.deleteOptions",
    ".status.preemptedPodsReservation",
)


def test_unknown_fields_are_kept_only_in_the_pod_template() -> None:
    for crd in KINDS:
        for path, node in walk(schema_of(crd)):
            if node.get("x-kubernetes-preserve-unknown-fields") and crd.kind == "PodMigrationJob":
                # Koordinator's schemaless parts: a Reservation template, DeleteOptions.
                assert path.startswith(KEPT_AS_WRITTEN), path
            elif node.get("x-kubernetes-preserve-unknown-fields"):
                assert crd.kind == "Reservation", path
                assert path.startswith(".spec.template"), path
    template = node_at(schema_of(by_kind("Reservation")), ".spec.template")
    preserved = [p for p, n in walk(template) if n.get("x-kubernetes-preserve-unknown-fields")]
    # Every modelled node of the template, not just its root: pruning works per node.
    assert {"", ".spec", ".metadata", ".spec.containers[*]", ".spec.containers[*].resources"} <= (
        set(preserved)
    )


FIELD = r"\.[A-Za-z][A-Za-z0-9]*"
PICK = r'\[\?\(@\.([A-Za-z]+)=="[^"]+"\)\]'


@pytest.mark.parametrize("crd", KINDS, ids=KIND_IDS)
def test_printer_columns_point_into_the_schema(crd: CustomResource) -> None:
    manifest = crd_manifest(crd)
    version = manifest["spec"]["versions"][0]
    columns = version["additionalPrinterColumns"]
    assert "Age" in [c["name"] for c in columns]
    schema = schema_of(crd)
    for column in columns:
        path = column["jsonPath"]
        # Plain fields, or one list entry picked by a key (a condition by its type).
        assert re.fullmatch(rf"({FIELD}|{FIELD}{PICK})+", path), path
        if path == ".metadata.creationTimestamp":
            continue
        for listed, key in re.findall(rf"((?:{FIELD})+){PICK}", path):
            assert key in node_at(schema, f"{listed}[*]")["properties"], path
        node = node_at(schema, re.sub(PICK, "[*]", path))
        if column["type"] == "date":
            assert node.get("format") == "date-time", path
        elif column["type"] == "integer":
            assert node["type"] == "integer", path


def test_printer_columns_asked_for() -> None:
    columns = {
        crd.kind: [(c.name, c.json_path) for c in crd.printer_columns if c.priority == 0]
        for crd in KINDS
    }
    assert columns["Reservation"][:4] == [
        ("Phase", ".status.phase"),
        ("Node", ".status.nodeName"),
        ("CPU", ".status.allocatable.cpu"),
        ("Memory", ".status.allocatable.memory"),
    ]
    assert {p for _, p in columns["ElasticQuota"]} >= {
        ".status.used.cpu",
        ".spec.max.cpu",
        ".status.used.memory",
        ".spec.max.memory",
    }
    assert (".status.updateTime") in {p for _, p in columns["NodeMetric"]}
    assert columns["ElasticQuota"][0] == (
        "Active",
        '.status.conditions[?(@.type=="Active")].status',
    )
    assert {p for _, p in columns["NodeMetric"]} >= {
        ".status.nodeMetric.nodeUsage.resources.cpu",
        ".status.nodeMetric.nodeUsage.resources.memory",
    }
    assert columns["PodGroup"][:6] == [
        ("Phase", ".status.phase"),
        ("MinMember", ".spec.minMember"),
        ("Running", ".status.running"),
        ("Succeeded", ".status.succeeded"),
        ("Failed", ".status.failed"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert columns["NodeResourceTopology"][0] == (
        "Policy",
        '.attributes[?(@.name=="topologyManagerPolicy")].value',
    )


# --- serving details ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "group", "version", "plural", "scope", "short_names"),
    [
        (
            "Reservation",
            "scheduling.koordinator.sh",
            "v1alpha1",
            "reservations",
            "Cluster",
            ["rsv"],
        ),
        (
            "ElasticQuota",
            "scheduling.sigs.k8s.io",
            "v1alpha1",
            "elasticquotas",
            "Namespaced",
            ["eq", "eqs"],
        ),
        ("NodeMetric", "slo.koordinator.sh", "v1alpha1", "nodemetrics", "Cluster", None),
        (
            "NodeResourceTopology",
            "topology.node.k8s.io",
            "v1alpha2",
            "noderesourcetopologies",
            "Cluster",
            ["nrt", "node-res-topo"],
        ),
        ("PodGroup", "scheduling.x-k8s.io", "v1alpha1", "podgroups", "Namespaced", ["pg", "pgs"]),
    ],
)
def test_names_and_scope(
    kind: str, group: str, version: str, plural: str, scope: str, short_names: list[str] | None
) -> None:
    manifest = crd_manifest(by_kind(kind))
    assert manifest["metadata"]["name"] == f"{plural}.{group}"
    spec = manifest["spec"]
    assert (spec["group"], spec["scope"]) == (group, scope)
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"].get("shortNames") == short_names
    [served] = spec["versions"]
    assert (served["name"], served["served"], served["storage"]) == (version, True, True)
    assert served["subresources"] == {"status": {}}


@pytest.mark.parametrize("crd", KINDS, ids=KIND_IDS)
def test_api_approval_annotation_for_k8s_io_groups(crd: CustomResource) -> None:
    annotations = crd_manifest(crd)["metadata"].get("annotations", {})
    if crd.group.endswith(".k8s.io"):
        assert annotations["api-approved.kubernetes.io"].startswith("unapproved")
    else:
        assert "api-approved.kubernetes.io" not in annotations


def rules(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = node.get("x-kubernetes-validations", [])
    assert isinstance(found, list)
    return found


def test_elastic_quota_min_le_max_rule() -> None:
    spec = node_at(schema_of(by_kind("ElasticQuota")), ".spec")
    [rule] = rules(spec)
    assert "quantity(string(self.min[k]))" in rule["rule"]
    assert "compareTo" in rule["rule"]
    assert rule["message"].startswith("min must not exceed max for any resource named in both")
    assert rule["messageExpression"].startswith(f"'{rule['message']}; it does for ' + ")
    # CEL iterates over min and parses quantities: the cost estimate needs bounded sizes.
    for side in ("min", "max"):
        assert spec["properties"][side]["maxProperties"] == 128
        assert spec["properties"][side]["additionalProperties"]["maxLength"] == 64


def test_reservation_rules_and_defaults() -> None:
    schema = schema_of(by_kind("Reservation"))
    spec = node_at(schema, ".spec")
    assert schema["required"] == ["spec"]
    assert spec["required"] == ["template", "owners"]
    assert [r["rule"] for r in rules(spec)] == ["!(has(self.ttl) && has(self.expires))"]
    assert "mutually exclusive" in rules(spec)[0]["message"]
    owners = spec["properties"]["owners"]
    assert owners["minItems"] == 1
    assert "at least one owner" in rules(owners)[0]["message"]
    assert "object, controller or labelSelector" in rules(owners["items"])[0]["message"]
    props = spec["properties"]
    assert props["allocateOnce"]["default"] is True
    assert props["allocatePolicy"] == {
        **props["allocatePolicy"],
        "enum": ["Aligned", "Restricted"],
        "default": "Aligned",
    }
    # ttl must have no schema default (it would collide with expires under the CEL rule).
    assert "default" not in props["ttl"]
    assert props["ttl"]["pattern"]
    assert props["expires"]["format"] == "date-time"
    assert "default" not in props["preAllocation"]
    assert node_at(schema, ".status.phase")["enum"] == [
        "Pending",
        "Available",
        "Waiting",
        "Succeeded",
        "Failed",
    ]
    conditions = node_at(schema, ".status.conditions")
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastProbeTime",
        "lastTransitionTime",
        "observedGeneration",
    }


def test_node_metric_defaults() -> None:
    spec = node_at(schema_of(by_kind("NodeMetric")), ".spec")
    assert spec["default"] == {}
    policy = spec["properties"]["metricCollectPolicy"]
    assert policy["default"] == {}
    props = policy["properties"]
    assert props["aggregateDurationSeconds"]["default"] == 300
    assert props["reportIntervalSeconds"]["default"] == 60
    assert props["reportIntervalSeconds"]["minimum"] == 1
    assert props["nodeAggregatePolicy"]["default"] == {}
    assert props["nodeAggregatePolicy"]["properties"]["durations"]["default"] == [
        "5m",
        "10m",
        "30m",
    ]
    assert props["nodeMemoryCollectPolicy"]["default"] == "usageWithoutPageCache"
    assert props["nodeMemoryCollectPolicy"]["enum"] == [
        "usageWithoutPageCache",
        "usageWithHotPageCache",
        "usageWithPageCache",
    ]


def test_only_marked_fields_have_defaults() -> None:
    defaulted = {
        (crd.kind, path)
        for crd in KINDS
        for path, node in walk(schema_of(crd))
        if "default" in node
    }
    assert defaulted == {
        ("Reservation", ".spec.allocateOnce"),
        ("Reservation", ".spec.allocatePolicy"),
        ("PodMigrationJob", ".spec.ttl"),
        ("PodMigrationJob", ".spec.mode"),
        ("NodeMetric", ".spec"),
        ("NodeMetric", ".spec.metricCollectPolicy"),
        ("NodeMetric", ".spec.metricCollectPolicy.aggregateDurationSeconds"),
        ("NodeMetric", ".spec.metricCollectPolicy.reportIntervalSeconds"),
        ("NodeMetric", ".spec.metricCollectPolicy.nodeAggregatePolicy"),
        ("NodeMetric", ".spec.metricCollectPolicy.nodeAggregatePolicy.durations"),
        ("NodeMetric", ".spec.metricCollectPolicy.nodeMemoryCollectPolicy"),
    }


def test_wire_field_names() -> None:
    """The names users already write, as Koordinator, scheduler-plugins and NRT spell them."""
    rsv = schema_of(by_kind("Reservation"))
    assert set(node_at(rsv, ".spec")["properties"]) == {
        "template",
        "owners",
        "ttl",
        "expires",
        "preAllocation",
        "allocateOnce",
        "allocatePolicy",
        "unschedulable",
        "taints",
    }
    assert set(node_at(rsv, ".spec.owners[*]")["properties"]) == {
        "object",
        "controller",
        "labelSelector",
    }
    assert "namespace" in node_at(rsv, ".spec.owners[*].controller")["properties"]
    assert set(node_at(rsv, ".status")["properties"]) == {
        "phase",
        "conditions",
        "nodeName",
        "allocatable",
        "allocated",
        "currentOwners",
    }
    eq = schema_of(by_kind("ElasticQuota"))
    assert set(node_at(eq, ".spec")["properties"]) == {"min", "max"}
    # used as upstream; conditions say whether a quota governs its namespace (issue 5).
    assert set(node_at(eq, ".status")["properties"]) == {
        "used",
        "conditions",
        "request",
        "runtime",
        "borrowed",
        "lent",
    }
    nm = schema_of(by_kind("NodeMetric"))
    assert set(node_at(nm, ".status")["properties"]) == {
        "updateTime",
        "nodeMetric",
        "podsMetric",
        "hostApplicationMetric",
        "prodReclaimableMetric",
        "prodPeakMetric",
    }
    assert set(node_at(nm, ".status.nodeMetric")["properties"]) == {
        "nodeUsage",
        "aggregatedNodeUsages",
        "systemUsage",
        "aggregatedSystemUsages",
        "numaUsages",
    }
    assert "numaNodeID" in node_at(nm, ".status.nodeMetric.numaUsages[*]")["properties"]
    assert (
        "resources"
        in node_at(nm, ".status.nodeMetric.aggregatedNodeUsages[*].usage.*")["properties"]
    )
    assert set(node_at(nm, ".status.podsMetric[*]")["properties"]) == {
        "namespace",
        "name",
        "podUsage",
        "priority",
        "qos",
    }
    nrt = schema_of(by_kind("NodeResourceTopology"))
    assert set(nrt["properties"]) == {
        "apiVersion",
        "kind",
        "metadata",
        "topologyPolicies",
        "zones",
        "attributes",
    }
    assert nrt["required"] == ["zones"]
    assert set(node_at(nrt, ".zones[*]")["properties"]) == {
        "name",
        "type",
        "parent",
        "costs",
        "attributes",
        "resources",
    }
    resource = node_at(nrt, ".zones[*].resources[*]")
    assert resource["required"] == ["name", "capacity", "allocatable", "available"]
    pg = schema_of(by_kind("PodGroup"))
    assert set(node_at(pg, ".spec")["properties"]) == {
        "minMember",
        "minResources",
        "scheduleTimeoutSeconds",
    }
    assert node_at(pg, ".spec.minMember")["minimum"] == 1
    # scheduler-plugins' status, and Berth's conditions saying why a gang waits.
    assert set(node_at(pg, ".status")["properties"]) == {
        "phase",
        "occupiedBy",
        "running",
        "succeeded",
        "failed",
        "scheduleStartTime",
        "conditions",
    }


# --- the generator refuses what it cannot express ----------------------------------------------


class _Union(KubeObject):
    api_version: str = "x/v1"
    kind: str = "X"
    value: int | str


class _Untyped(BaseModel):
    value: dict[str, Any]


class _Tree(BaseModel):
    children: list[_Tree] | None = None


def test_generator_rejects_non_structural_models() -> None:
    with pytest.raises(SchemaError, match="int-or-string"):
        openapi_schema(_Union)
    with pytest.raises(SchemaError, match="recursive"):
        openapi_schema(_Tree)
    # A free-form map can only be kept as unknown content (the test above limits where).
    schema = openapi_schema(_Untyped)
    assert schema["properties"]["value"]["x-kubernetes-preserve-unknown-fields"] is True
