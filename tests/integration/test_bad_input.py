"""Bad input, case by case: each gets a clear error (an API rejection, a condition, an
event, or a start-up message naming the problem) and the components keep running.

Covered elsewhere and counted in the table of docs/operations.md: a reservation whose
template requests nothing, pins a node that does not exist, or is bigger than any node
(test_reservation_scheduling); invalid colocation-config JSON (test_nodemetric_operator);
min > max in a quota (test_crds).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth.run import run_command
from tests.integration.cluster import Nodes, Pods, config_for, pod_body, running
from tests.support import eventually

Json = dict[str, Any]
EQ = ("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas")
RSV = ("scheduling.koordinator.sh", "v1alpha1", "reservations")
NM = ("slo.koordinator.sh", "v1alpha1", "nodemetrics")
NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")


def quota(spec: Json) -> Json:
    return {
        "apiVersion": f"{EQ[0]}/{EQ[1]}",
        "kind": "ElasticQuota",
        "metadata": {"name": "q"},
        "spec": spec,
    }


def reservation(**spec: Any) -> Json:
    base: Json = {
        "template": {
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        },
        "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}],
    }
    base.update(spec)
    base = {k: v for k, v in base.items() if v is not None}
    return {
        "apiVersion": f"{RSV[0]}/{RSV[1]}",
        "kind": "Reservation",
        "metadata": {"name": "r"},
        "spec": base,
    }


def metric(policy: Json) -> Json:
    return {
        "apiVersion": f"{NM[0]}/{NM[1]}",
        "kind": "NodeMetric",
        "metadata": {"name": "m"},
        "spec": {"metricCollectPolicy": policy},
    }


def topology(zones: Any) -> Json:
    body: Json = {
        "apiVersion": f"{NRT[0]}/{NRT[1]}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "t"},
    }
    if zones is not None:
        body["zones"] = zones
    return body


def zone(available: str) -> Json:
    return {
        "name": "node-0",
        "type": "Node",
        "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": available}],
    }


REJECTED: list[tuple[str, tuple[str, str, str], Json, str]] = [
    ("quota negative min", EQ, quota({"min": {"cpu": "-1"}}), "should match"),
    ("quota not a quantity", EQ, quota({"max": {"memory": "lots"}}), "should match"),
    (
        "quota min above max",
        EQ,
        quota({"min": {"cpu": "3"}, "max": {"cpu": "2"}}),
        "min must not exceed max",
    ),
    (
        "quota min above max in other units",
        EQ,
        quota({"min": {"memory": "2Gi"}, "max": {"memory": "1500Mi"}}),
        "it does for memory",
    ),
    (
        "quota with 129 resources",
        EQ,
        quota({"max": {f"example.com/r{i}": "1" for i in range(129)}}),
        "must have at most 128",
    ),
    ("quota spec not an object", EQ, quota("big"), "must be of type object"),  # type: ignore[arg-type]
    ("reservation without owners", RSV, reservation(owners=[]), "at least one owner is required"),
    (
        "reservation owner with nothing set",
        RSV,
        reservation(owners=[{}]),
        "each owner must set at least one of",
    ),
    (
        "reservation with ttl and expires",
        RSV,
        reservation(ttl="1h", expires="2030-01-01T00:00:00Z"),
        "mutually exclusive",
    ),
    ("reservation ttl not a duration", RSV, reservation(ttl="banana"), "ttl"),
    (
        "reservation unknown allocatePolicy",
        RSV,
        reservation(allocatePolicy="Greedy"),
        "supported values",
    ),
    ("reservation without template", RSV, reservation(template=None), "template: Required value"),
    (
        "reservation negative request",
        RSV,
        reservation(
            template={
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "-1"}}}]}
            }
        ),
        "should match",
    ),
    ("reservation bad expires", RSV, reservation(expires="tomorrow"), "expires"),
    (
        "nodemetric zero report interval",
        NM,
        metric({"reportIntervalSeconds": 0}),
        "reportIntervalSeconds",
    ),
    (
        "nodemetric duplicate durations",
        NM,
        metric({"nodeAggregatePolicy": {"durations": ["5m", "5m"]}}),
        "Duplicate value",
    ),
    (
        "nodemetric unknown memory policy",
        NM,
        metric({"nodeMemoryCollectPolicy": "bogus"}),
        "supported values",
    ),
    ("topology without zones", NRT, topology(None), "zones: Required value"),
    ("topology zone with a bad quantity", NRT, topology([zone("four")]), "should match"),
]


@pytest.mark.parametrize(("case", "kind", "body", "says"), REJECTED, ids=[c[0] for c in REJECTED])
async def test_the_api_rejects_it_with_a_clear_message(
    api: ApiClient,
    crds: None,
    namespace: str,
    case: str,
    kind: tuple[str, str, str],
    body: Json,
    says: str,
) -> None:
    custom = CustomObjectsApi(api)
    create = (
        custom.create_namespaced_custom_object(
            kind[0], kind[1], namespace, kind[2], body, dry_run="All"
        )
        if kind == EQ
        else custom.create_cluster_custom_object(*kind, body, dry_run="All")
    )
    with pytest.raises(ApiException) as caught:
        await create
    assert caught.value.status == 422, caught.value.body
    message = json.loads(caught.value.body)["message"]
    assert says in message, message


async def test_an_enormous_template_is_refused_by_the_api_server(
    api: ApiClient, crds: None
) -> None:
    """A 2 MB template: over what the API server stores in one object (etcd's 1.5 MiB)."""
    env = [{"name": f"V{i}", "value": "x" * 1000} for i in range(2000)]
    body = reservation(
        template={
            "spec": {
                "containers": [{"name": "c", "env": env, "resources": {"requests": {"cpu": "1"}}}]
            }
        }
    )
    body["metadata"]["name"] = f"enormous-{uuid.uuid4().hex[:8]}"
    custom = CustomObjectsApi(api)
    try:
        with pytest.raises(ApiException) as caught:
            await custom.create_cluster_custom_object(*RSV, body)
    finally:
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(*RSV, body["metadata"]["name"])
    body_text = caught.value.body
    text = body_text.decode() if isinstance(body_text, bytes) else str(body_text)
    assert "too large" in text.lower(), (caught.value.status, text[:300])


def short(namespace: str) -> str:
    return "bi-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


async def test_bad_annotations_are_explained_and_scheduling_goes_on(
    api: ApiClient, crds: None, namespace: str
) -> None:
    group = short(namespace)
    nodes = Nodes(api, group)
    try:
        node = await nodes.add("a", labels={"berth.test/group": group})
        await CoreV1Api(api).patch_node(
            node,
            {
                "metadata": {
                    "annotations": {"scheduling.koordinator.sh/usage-thresholds": "{cpu: 30"}
                }
            },
        )
        with contextlib.suppress(ApiException):  # a NodeMetric operator may have made it
            await CustomObjectsApi(api).create_cluster_custom_object(
                *NM,
                {
                    "apiVersion": f"{NM[0]}/{NM[1]}",
                    "kind": "NodeMetric",
                    "metadata": {"name": node},
                },
            )
        await CustomObjectsApi(api).patch_cluster_custom_object_status(
            *NM,
            node,
            {
                "status": {
                    "updateTime": "2099-01-01T00:00:00Z",
                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": "0", "memory": "0"}}},
                }
            },
            _content_type="application/merge-patch+json",
        )
        pods = Pods(api, namespace)
        config = config_for(
            group,
            {
                "plugins": {
                    "multiPoint": {
                        "enabled": [{"name": "LoadAwareScheduling"}, {"name": "Reservation"}]
                    }
                }
            },
        )
        async with running(api, config):
            affine = pod_body("affine", group, cpu="100m", nodeSelector={"berth.test/group": group})
            affine["metadata"]["annotations"] = {
                "scheduling.koordinator.sh/reservation-affinity": "{not json"
            }
            await pods.create(affine)
            message = await pods.wait_event("affine", "FailedScheduling")
            assert "reservation-affinity is not JSON" in message
            # The malformed thresholds annotation: a warning on the node, defaults apply.
            await pods.create(
                pod_body("fine", group, cpu="100m", nodeSelector={"berth.test/group": group})
            )
            assert await pods.wait_bound("fine") == node

            async def warned() -> bool:
                events = await CoreV1Api(api).list_namespaced_event(
                    "default", field_selector=f"involvedObject.name={node}"
                )
                return any(e.reason == "InvalidUsageThresholds" for e in events.items)

            await eventually(warned)
    finally:
        with contextlib.suppress(ApiException):
            await CustomObjectsApi(api).delete_cluster_custom_object(*NM, node)
        await nodes.delete_all()


async def test_a_ten_thousand_owner_reservation_is_placed_and_matched(
    api: ApiClient, crds: None, namespace: str
) -> None:
    group = short(namespace)
    nodes = Nodes(api, group)
    name = f"{group}-many"
    custom = CustomObjectsApi(api)
    try:
        await nodes.add("a", labels={"berth.test/group": group})
        owners = [{"object": {"namespace": namespace, "name": f"pod-{i}"}} for i in range(10_000)]
        body = reservation(
            owners=owners,
            template={
                "spec": {
                    "schedulerName": group,
                    "nodeSelector": {"berth.test/group": group},
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        )
        body["metadata"]["name"] = name
        await custom.create_cluster_custom_object(*RSV, body)
        pods = Pods(api, namespace)
        config = config_for(
            group, {"plugins": {"multiPoint": {"enabled": [{"name": "Reservation"}]}}}
        )
        async with running(api, config):

            async def available() -> bool:
                obj = await custom.get_cluster_custom_object(*RSV, name)
                return bool((obj.get("status") or {}).get("phase") == "Available")

            await eventually(available)
            await pods.create(
                pod_body("pod-9999", group, cpu="1", nodeSelector={"berth.test/group": group})
            )
            await pods.wait_bound("pod-9999")
            annotations = (await pods.get("pod-9999")).metadata.annotations or {}
            assert (
                json.loads(annotations["scheduling.koordinator.sh/reservation-allocated"])["name"]
                == name
            )
    finally:
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(*RSV, name)
        await nodes.delete_all()


BAD_CONFIGS: list[tuple[str, Any, str]] = [
    (
        "unknown plugin",
        {
            "profiles": [
                {
                    "schedulerName": "x",
                    "plugins": {"filter": {"enabled": [{"name": "NodeResourcesFitt"}]}},
                }
            ]
        },
        "unknown plugin 'NodeResourcesFitt'",
    ),
    (
        "threshold over 100",
        {
            "profiles": [
                {
                    "schedulerName": "x",
                    "plugins": {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]}},
                    "pluginConfig": [
                        {"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 150}}}
                    ],
                }
            ]
        },
        "not a percentage",
    ),
    (
        "unknown NUMA scoring strategy",
        {
            "profiles": [
                {
                    "schedulerName": "x",
                    "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
                    "pluginConfig": [
                        {
                            "name": "NodeResourceTopologyMatch",
                            "args": {"scoringStrategy": {"type": "Random"}},
                        }
                    ],
                }
            ]
        },
        "is not one of",
    ),
    ("not YAML", "profiles: [", "scheduler"),
    # Decoded strictly, as kube-scheduler decodes it: each is named with its path.
    ("extenders", {"extenders": [{"urlPrefix": "http://x"}]}, "extenders: Berth calls no"),
    (
        "misspelt top-level field",
        {"percentageOfNodeToScore": 50},
        "percentageOfNodeToScore: unknown field; did you mean percentageOfNodesToScore?",
    ),
    (
        "misspelt extension point",
        {"profiles": [{"plugins": {"prefilter": {"enabled": [{"name": "NodeAffinity"}]}}}]},
        "profiles[0].plugins.prefilter: unknown field; did you mean preFilter?",
    ),
    (
        "enable for enabled",
        {"profiles": [{"plugins": {"filter": {"enable": [{"name": "NodeAffinity"}]}}}]},
        "profiles[0].plugins.filter.enable: unknown field; did you mean enabled?",
    ),
    (
        "misspelt CapacityScheduling argument",
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {"name": "CapacityScheduling", "args": {"defaultQuotaGroupMaxx": {}}}
                    ]
                }
            ]
        },
        "args.defaultQuotaGroupMaxx: unknown field of CapacitySchedulingArgs",
    ),
    (
        "misspelt DefaultPreemption argument",
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {"name": "DefaultPreemption", "args": {"minCandidateNodesPercent": 5}}
                    ]
                }
            ]
        },
        "args.minCandidateNodesPercent: unknown field of DefaultPreemptionArgs",
    ),
    (
        "a second pluginConfig entry",
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {}},
                        {"name": "NodeResourcesFit", "args": {}},
                    ]
                }
            ]
        },
        "pluginConfig[1]: a second entry for NodeResourcesFit",
    ),
]


@pytest.mark.parametrize(("case", "config", "says"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_bad_configuration_stops_berth_run_with_a_message(
    kubeconfig_path: str, tmp_path: Path, case: str, config: Any, says: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    result = subprocess.run(
        run_command(kubeconfig_path, str(path), log_level="info"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert says in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_bad_garbage_collection_period_stops_berth_run(
    kubeconfig_path: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("leaderElection: {leaderElect: false}\n")
    result = subprocess.run(
        run_command(kubeconfig_path, str(path), operators=True, scheduler=False, log_level="info"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "BERTH_RESERVATION_GC_PERIOD": "soon"},
    )
    assert result.returncode != 0
    assert "BERTH_RESERVATION_GC_PERIOD" in result.stdout + result.stderr
