"""Strict configuration, as kube-scheduler decodes it: an unknown field at any level, a
repeated ``pluginConfig`` entry or a field Berth does not honour is refused in one line
that says where it is and what to do; every field of every args type is in a table here,
honoured (it loads, and its plugin reads it) or refused by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.scheduler.config import ConfigError, parse
from berth.scheduler.framework.argspec import ARGS, Field
from berth.scheduler.plugins.registry import DEFAULTS, PLUGINS, QUEUE_SORT
from tests.unit.scheduler_fixtures import Json, make_env


def profile_with(plugin: str, args: Json) -> Json:
    """A profile running ``plugin`` (enabled unless kube-scheduler runs it by default)."""
    default = plugin == QUEUE_SORT or any(ref.name == plugin for ref in DEFAULTS)
    plugins = {} if default else {"multiPoint": {"enabled": [{"name": plugin}]}}
    return {"plugins": plugins, "pluginConfig": [{"name": plugin, "args": args}]}


def refused(document: Json) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(document, "scheduler.yaml")
    return str(caught.value)


def in_profile(**profile: Any) -> Json:
    return {"profiles": [profile]}


def args_of(plugin: str, **args: Any) -> Json:
    return in_profile(pluginConfig=[{"name": plugin, "args": args}])


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"extenders": [{"urlPrefix": "http://extender:8888"}]},
            "extenders: Berth calls no scheduler extenders; remove them (an extender's work "
            "must be one of Berth's plugins)",
        ),
        (
            {"percentageOfNodeToScore": 50},
            "percentageOfNodeToScore: unknown field; did you mean percentageOfNodesToScore?",
        ),
        (
            in_profile(plugins={"prefilter": {"enabled": [{"name": "NodeAffinity"}]}}),
            "profiles[0].plugins.prefilter: unknown field; did you mean preFilter?",
        ),
        (
            in_profile(plugins={"filter": {"enable": [{"name": "NodeAffinity"}]}}),
            "profiles[0].plugins.filter.enable: unknown field; did you mean enabled?",
        ),
        (
            in_profile(plugins={"score": {"enabled": [{"name": "NodeAffinity", "wieght": 2}]}}),
            "profiles[0].plugins.score.enabled[0].wieght: unknown field; did you mean weight?",
        ),
        (
            in_profile(schedulerNmae="x"),
            "profiles[0].schedulerNmae: unknown field; did you mean schedulerName?",
        ),
        (
            args_of("CapacityScheduling", defaultQuotaGroupMaxx={"cpu": "10"}),
            "profiles[0].pluginConfig[0].args.defaultQuotaGroupMaxx: unknown field of "
            "CapacitySchedulingArgs; did you mean defaultQuotaGroupMax?",
        ),
        (
            args_of("DefaultPreemption", minCandidateNodesPercentag=5),
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentag: unknown field of "
            "DefaultPreemptionArgs; did you mean minCandidateNodesPercentage?",
        ),
        (
            in_profile(
                pluginConfig=[
                    {"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": 1}},
                    {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 1}},
                ]
            ),
            "profiles[0].pluginConfig[1]: a second entry for DefaultPreemption (the first is "
            "pluginConfig[0]); merge their args into one",
        ),
        (
            in_profile(pluginConfig=[{"name": "NodeNUMAResource", "args": {}}]),
            "profiles[0].pluginConfig[0].name: Berth has no plugin 'NodeNUMAResource'; known "
            "plugins: " + ", ".join(sorted(ARGS)),
        ),
        (
            {"leaderElection": {"resourceLock": "endpoints"}},
            'leaderElection.resourceLock: "endpoints" is not supported: Berth holds a '
            'Lease; remove it or set "leases"',
        ),
        (
            {"clientConnection": {"contentType": "application/vnd.kubernetes.protobuf"}},
            'clientConnection.contentType: "application/vnd.kubernetes.protobuf" is not '
            'supported: Berth talks JSON to the API server; remove it or set "application/json"',
        ),
        (
            {"enableProfiling": True},
            "enableProfiling: true is not supported: Berth serves no profiling endpoints; "
            "remove it or set false",
        ),
        (
            {"delayCacheUntilActive": False},
            "delayCacheUntilActive: false is not supported: Berth fills its caches only once "
            "it leads; remove it or set true",
        ),
        (
            {"metricsBindAddress": "0.0.0.0:10251"},
            "metricsBindAddress: not supported: Berth serves /healthz and /metrics on the "
            "address of `berth run --health-address`; remove it",
        ),
    ],
)
def test_what_kube_scheduler_refuses_or_berth_cannot_honour_is_named_in_one_line(
    document: Json, message: str
) -> None:
    assert refused(document) == f"scheduler.yaml: {message}"
    assert "\n" not in message


def test_kube_scheduler_fields_that_mean_nothing_more_here_load() -> None:
    config = parse(
        {
            "parallelism": 16,
            "delayCacheUntilActive": True,
            "enableProfiling": False,
            "enableContentionProfiling": False,
            "extenders": [],
            "leaderElection": {"resourceLock": "leases"},
            "clientConnection": {"contentType": "application/json"},
        }
    )
    assert config.parallelism == 16


# -- every field of every args type -------------------------------------------------------

# Koordinator's ElasticQuotaArgs Berth honours (CapacityScheduling reads them too).
ELASTIC_QUOTA_HONOURED = {
    "overRuntimeCheckInterval": "5s",
    "defaultQuotaGroupMax": {"cpu": "10"},
    "systemQuotaGroupMax": {"cpu": "2"},
    "enableRuntimeQuota": True,
    "enableCheckParentQuota": True,
    "enableMinQuotaScale": True,
    "quotaGroupNamespace": "koordinator-system",
}
# Every args type with a value for each field Berth honours: loading it runs each plugin's
# own checks of these values.
HONOURED: dict[str, Json] = {
    "PrioritySort": {},
    "SchedulingGates": {},
    "NodeUnschedulable": {},
    "NodeName": {},
    "TaintToleration": {},
    "NodeAffinity": {
        "addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                        ],
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                        ],
                    },
                }
            ],
        }
    },
    "NodePorts": {},
    "NodeResourcesFit": {
        "ignoredResources": ["example.com/foo"],
        "ignoredResourceGroups": ["example.org"],
        "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 2}]},
    },
    "NodeResourcesBalancedAllocation": {"resources": [{"name": "cpu", "weight": 1}]},
    "VolumeRestrictions": {},
    "NodeVolumeLimits": {},
    "VolumeBinding": {"bindTimeoutSeconds": 30},
    "VolumeZone": {},
    "PodTopologySpread": {
        "defaultingType": "List",
        "defaultConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "minDomains": 2,
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
                "matchLabelKeys": ["app"],
            }
        ],
    },
    "InterPodAffinity": {"hardPodAffinityWeight": 5, "ignorePreferredTermsOfExistingPods": True},
    "ImageLocality": {},
    "DefaultPreemption": {"minCandidateNodesPercentage": 20, "minCandidateNodesAbsolute": 10},
    "DefaultBinder": {},
    "PlacementFields": {},
    "CapacityScheduling": {
        "minCandidateNodesPercentage": 20,
        "minCandidateNodesAbsolute": 10,
        "kubeConfigPath": "/etc/kubernetes/scheduler.conf",
        **ELASTIC_QUOTA_HONOURED,
    },
    "ElasticQuota": ELASTIC_QUOTA_HONOURED,
    "Coscheduling": {
        "permitWaitingTimeSeconds": 60,
        "podGroupBackoffSeconds": 10,
        "podGroupRejectPercentage": 10,
    },
    "NodeResourceTopologyMatch": {
        "scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 1}]},
        "cacheResyncPeriodSeconds": 5,
        "cache": {"foreignPodsDetect": "All", "informerMode": "Shared"},
        "discardReservedNodes": False,
        "preemptionMode": "Disabled",
    },
    "LoadAwareScheduling": {
        "filterExpiredNodeMetrics": True,
        "nodeMetricExpirationSeconds": 300,
        "enableScheduleWhenNodeMetricsExpired": False,
        "resourceWeights": {"cpu": 1, "memory": 1},
        "dominantResourceWeight": 1,
        "usageThresholds": {"cpu": 65},
        "prodUsageThresholds": {"cpu": 55},
        "scoreAccordingProdUsage": True,
        "estimatedScalingFactors": {"cpu": 85},
        "aggregated": {
            "usageThresholds": {"cpu": 70},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": "5m",
            "scoreAggregationType": "p90",
            "scoreAggregatedDuration": "5m",
        },
    },
    "Reservation": {
        "enablePreemption": False,
        "reservePreemptedCapacity": True,
        "preemptionReservationTTL": "1m",
    },
}
ELASTIC_QUOTA_REFUSED = {
    "delayEvictTime": "120s",
    "revokePodInterval": "1s",
    "monitorAllQuotas": True,
    "disableDefaultQuotaPreemption": True,
    "enableQueueHint": True,
    "quotaSnapshotUpdateInterval": "1s",
    "hookPlugins": [{"key": "k"}],
}
# The upstream fields Berth refuses by name, with a value a user might write.
REFUSED: dict[str, dict[str, Any]] = {
    "NodeResourcesFit": {
        "scoringStrategy.requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]}
    },
    "VolumeBinding": {"shape": [{"utilization": 0, "score": 0}]},
    "PodTopologySpread": {"defaultConstraints[].labelSelector": {"matchLabels": {"app": "a"}}},
    "CapacityScheduling": ELASTIC_QUOTA_REFUSED,
    "ElasticQuota": ELASTIC_QUOTA_REFUSED,
    "NodeResourceTopologyMatch": {"cache.resyncMethod": "All", "cache.resyncScope": "All"},
    "LoadAwareScheduling": {
        "estimator": "default",
        "estimatedSecondsAfterPodScheduled": 60,
        "estimatedSecondsAfterInitialized": 60,
        "allowCustomizeEstimation": True,
        "prodUsageIncludeSys": True,
        "supportedResources": ["cpu"],
    },
    "Coscheduling": {
        "defaultTimeout": "600s",
        "controllerWorkers": 1,
        "skipCheckScheduleCycle": True,
        "enablePreemption": True,
        "awareNetworkTopology": True,
        "defaultMatchPolicy": "once-satisfied",
    },
    "Reservation": {
        "minCandidateNodesPercentage": 10,
        "minCandidateNodesAbsolute": 100,
        "controllerWorkers": 1,
        "gcDurationSeconds": 86400,
    },
}


def spec_paths(fields: dict[str, Field] | Any, prefix: str = "") -> dict[str, bool]:
    """Each field's path in the spec (``a.b``, ``a[].b`` in a list's objects): refused?"""
    found: dict[str, bool] = {}
    for name, spec in fields.items():
        path = f"{prefix}{name}"
        found[path] = bool(spec.refused)
        if spec.fields is not None:
            found.update(spec_paths(spec.fields, f"{path}."))
        if spec.items is not None:
            found.update(spec_paths(spec.items, f"{path}[]."))
    return found


def value_paths(value: Any, path: str, objects: set[str]) -> set[str]:
    """The paths in an args document, within the fields the spec gives fields to."""
    if path and path not in objects:
        return set()
    if isinstance(value, list):
        return set().union(
            *(value_paths(item, f"{path}[]", objects | {f"{path}[]"}) for item in value)
        )
    found: set[str] = set()
    for name, inner in value.items() if isinstance(value, dict) else ():
        child = f"{path}.{name}" if path else name
        found |= {child} | value_paths(inner, child, objects)
    return found


def objects_of(fields: Any, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, spec in fields.items():
        path = f"{prefix}{name}"
        if spec.fields is not None:
            found |= {path} | objects_of(spec.fields, f"{path}.")
        if spec.items is not None:
            found |= {path} | objects_of(spec.items, f"{path}[].")
    return found


def with_path(path: str, value: Any) -> Json:
    """Args setting one field (``a[].b``: in the one object of list ``a``)."""
    head, _, rest = path.partition(".")
    if not rest:
        return {head: value}
    if head.endswith("[]"):
        return {head[:-2]: [with_path(rest, value)]}
    return {head: with_path(rest, value)}


def test_every_plugin_has_its_args_type_in_the_table() -> None:
    assert set(ARGS) == set(PLUGINS) | {QUEUE_SORT} == set(HONOURED)
    assert set(REFUSED) <= set(ARGS)


@pytest.mark.parametrize("plugin", sorted(ARGS))
def test_every_field_is_honoured_or_refused_as_the_table_says(plugin: str) -> None:
    fields = ARGS[plugin].fields
    spec = spec_paths(fields)
    objects = objects_of(fields)
    honoured = value_paths(HONOURED[plugin], "", objects)
    assert honoured | set(REFUSED.get(plugin, {})) == set(spec)
    assert not any(spec[path] for path in honoured)
    assert all(spec[path] for path in REFUSED.get(plugin, {}))


@pytest.mark.parametrize("plugin", sorted(ARGS))
def test_the_honoured_fields_load_and_their_plugin_accepts_them(plugin: str) -> None:
    env = make_env(profile=profile_with(plugin, HONOURED[plugin]))
    if plugin != QUEUE_SORT:
        assert plugin in env.plugins.instances


@pytest.mark.parametrize(
    ("plugin", "path"), [(p, path) for p, fields in REFUSED.items() for path in fields]
)
def test_each_refused_field_is_named_with_the_reason(plugin: str, path: str) -> None:
    args = with_path(path, REFUSED[plugin][path])
    message = refused(in_profile(pluginConfig=[{"name": plugin, "args": args}]))
    shown = path.replace("[]", "[0]")
    assert message.startswith(f"scheduler.yaml: profiles[0].pluginConfig[0].args.{shown}: ")
    assert ": not supported: " in message
    assert message.endswith("; remove it")


@pytest.mark.parametrize("plugin", sorted(ARGS))
def test_a_field_no_args_type_has_is_refused_with_its_kind(plugin: str) -> None:
    message = refused(args_of(plugin, bogusField=1))
    assert message.startswith(
        f"scheduler.yaml: profiles[0].pluginConfig[0].args.bogusField: unknown field of "
        f"{ARGS[plugin].kind}; "
    )
