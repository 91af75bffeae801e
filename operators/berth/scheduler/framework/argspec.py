"""Every field of every plugin's args that Berth accepts, and the upstream fields it refuses.

kube-scheduler decodes its configuration strictly: a field its args type lacks stops it at
start-up. Berth does the same, and names the upstream fields it does not honour with the
reason, so that no configuration loads with a setting silently dropped. Values are the
plugins' to check; this table only says which fields exist.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Field:
    """One field: honoured (its value the plugin's to check), or refused with ``refused``
    as the reason; ``fields`` are an object's fields, ``items`` those of a list's objects
    (neither: a scalar, or a map whose keys are free, such as resource names)."""

    refused: str = ""
    fields: Mapping[str, Field] | None = None
    items: Mapping[str, Field] | None = None


@dataclass(frozen=True)
class ArgsType:
    kind: str
    fields: Mapping[str, Field] = field(default_factory=dict)


LEAF = Field()
RESOURCE_SPEC = {"name": LEAF, "weight": LEAF}
REQUIREMENT = {"key": LEAF, "operator": LEAF, "values": LEAF}
TERM = {"matchExpressions": Field(items=REQUIREMENT), "matchFields": Field(items=REQUIREMENT)}
NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": Field(
        fields={"nodeSelectorTerms": Field(items=TERM)}
    ),
    "preferredDuringSchedulingIgnoredDuringExecution": Field(
        items={"weight": LEAF, "preference": Field(fields=TERM)}
    ),
}
SPREAD_CONSTRAINT = {
    "maxSkew": LEAF,
    "topologyKey": LEAF,
    "whenUnsatisfiable": LEAF,
    "labelSelector": Field(
        refused="a default constraint's selector is deduced for each pod (kube-scheduler "
        "refuses it too)"
    ),
    "minDomains": LEAF,
    "nodeAffinityPolicy": LEAF,
    "nodeTaintsPolicy": LEAF,
    "matchLabelKeys": LEAF,
}
PREEMPTION = {"minCandidateNodesPercentage": LEAF, "minCandidateNodesAbsolute": LEAF}
NO_REVOKE = (
    "Berth has no revoke controller: a pod reclaims when it needs the capacity "
    "(see overRuntimeCheckInterval)"
)
# Koordinator's ElasticQuotaArgs, and Berth's own overRuntimeCheckInterval (how often pods
# over their quota's runtime are looked for).
ELASTIC_QUOTA = {
    "overRuntimeCheckInterval": LEAF,
    "defaultQuotaGroupMax": LEAF,
    "systemQuotaGroupMax": LEAF,
    "enableRuntimeQuota": LEAF,
    "enableCheckParentQuota": LEAF,
    "enableMinQuotaScale": LEAF,
    "quotaGroupNamespace": LEAF,
    "delayEvictTime": Field(refused=NO_REVOKE),
    "revokePodInterval": Field(refused=NO_REVOKE),
    "monitorAllQuotas": Field(refused=NO_REVOKE),
    "disableDefaultQuotaPreemption": Field(
        refused="pods of no quota preempt and are preempted as without quotas "
        "(kube-scheduler's rules); Berth cannot switch that off"
    ),
    "enableQueueHint": Field(
        refused="Berth's queueing hints for quotas are always on and read the live quotas "
        "(no snapshot)"
    ),
    "quotaSnapshotUpdateInterval": Field(
        refused="Berth's queueing hints read the live quotas (no snapshot)"
    ),
    "hookPlugins": Field(refused="Koordinator's quota hook plugins are not implemented"),
}
ONE_ESTIMATOR = (
    "Berth estimates a pod the report misses by its requests and limits with "
    "estimatedScalingFactors, from its placement until the report includes it"
)
NO_RESERVATION_PREEMPTION = (
    "a Reservation never preempts in Berth (enablePreemption: false), so there are no "
    "candidates to size"
)

ARGS: dict[str, ArgsType] = {
    # kube-scheduler's plugins (k8s.io/kube-scheduler/config/v1).
    "PrioritySort": ArgsType("PrioritySortArgs"),
    "SchedulingGates": ArgsType("SchedulingGatesArgs"),
    "NodeUnschedulable": ArgsType("NodeUnschedulableArgs"),
    "NodeName": ArgsType("NodeNameArgs"),
    "TaintToleration": ArgsType("TaintTolerationArgs"),
    "NodeAffinity": ArgsType("NodeAffinityArgs", {"addedAffinity": Field(fields=NODE_AFFINITY)}),
    "NodePorts": ArgsType("NodePortsArgs"),
    "NodeResourcesFit": ArgsType(
        "NodeResourcesFitArgs",
        {
            "ignoredResources": LEAF,
            "ignoredResourceGroups": LEAF,
            "scoringStrategy": Field(
                fields={
                    "type": LEAF,
                    "resources": Field(items=RESOURCE_SPEC),
                    "requestedToCapacityRatio": Field(
                        refused="Berth scores with LeastAllocated or MostAllocated only"
                    ),
                }
            ),
        },
    ),
    "NodeResourcesBalancedAllocation": ArgsType(
        "NodeResourcesBalancedAllocationArgs", {"resources": Field(items=RESOURCE_SPEC)}
    ),
    "VolumeRestrictions": ArgsType("VolumeRestrictionsArgs"),
    "NodeVolumeLimits": ArgsType("NodeVolumeLimitsArgs"),
    "VolumeBinding": ArgsType(
        "VolumeBindingArgs",
        {
            "bindTimeoutSeconds": LEAF,
            "shape": Field(
                refused="Berth does not score nodes by storage capacity (StorageCapacityScoring)"
            ),
        },
    ),
    "VolumeZone": ArgsType("VolumeZoneArgs"),
    "PodTopologySpread": ArgsType(
        "PodTopologySpreadArgs",
        {"defaultingType": LEAF, "defaultConstraints": Field(items=SPREAD_CONSTRAINT)},
    ),
    "InterPodAffinity": ArgsType(
        "InterPodAffinityArgs",
        {"hardPodAffinityWeight": LEAF, "ignorePreferredTermsOfExistingPods": LEAF},
    ),
    "ImageLocality": ArgsType("ImageLocalityArgs"),
    "DefaultPreemption": ArgsType("DefaultPreemptionArgs", PREEMPTION),
    "DefaultBinder": ArgsType("DefaultBinderArgs"),
    # Berth's own.
    "PlacementFields": ArgsType("PlacementFieldsArgs"),
    # scheduler-plugins' (CapacityScheduling also reads Koordinator's ElasticQuotaArgs; its
    # kubeConfigPath is accepted, Berth connecting through clientConnection).
    "CapacityScheduling": ArgsType(
        "CapacitySchedulingArgs", {**PREEMPTION, "kubeConfigPath": LEAF, **ELASTIC_QUOTA}
    ),
    "Coscheduling": ArgsType(
        "CoschedulingArgs",
        {
            "permitWaitingTimeSeconds": LEAF,
            "podGroupBackoffSeconds": LEAF,
            "podGroupRejectPercentage": LEAF,
            **{
                name: Field(
                    refused="Koordinator's Coscheduling argument; Berth's Coscheduling is "
                    "scheduler-plugins' (docs/gang.md)"
                )
                for name in (
                    "defaultTimeout",
                    "controllerWorkers",
                    "skipCheckScheduleCycle",
                    "enablePreemption",
                    "awareNetworkTopology",
                    "defaultMatchPolicy",
                )
            },
        },
    ),
    "NodeResourceTopologyMatch": ArgsType(
        "NodeResourceTopologyMatchArgs",
        {
            "scoringStrategy": Field(
                fields={"type": LEAF, "resources": Field(items=RESOURCE_SPEC)}
            ),
            "cacheResyncPeriodSeconds": LEAF,
            "cache": Field(
                fields={
                    "foreignPodsDetect": LEAF,
                    "informerMode": LEAF,
                    "resyncMethod": Field(
                        refused="Berth's pending ledger compares each report's pods "
                        "fingerprint with the pods it knows"
                    ),
                    "resyncScope": Field(
                        refused="Berth's pending ledger compares each report's pods "
                        "fingerprint with the pods it knows"
                    ),
                }
            ),
            "discardReservedNodes": LEAF,
            "preemptionMode": LEAF,
        },
    ),
    # Koordinator's.
    "ElasticQuota": ArgsType("ElasticQuotaArgs", ELASTIC_QUOTA),
    "LoadAwareScheduling": ArgsType(
        "LoadAwareSchedulingArgs",
        {
            "filterExpiredNodeMetrics": LEAF,
            "nodeMetricExpirationSeconds": LEAF,
            "enableScheduleWhenNodeMetricsExpired": LEAF,
            "resourceWeights": LEAF,
            "dominantResourceWeight": LEAF,
            "usageThresholds": LEAF,
            "prodUsageThresholds": LEAF,
            "scoreAccordingProdUsage": LEAF,
            "estimatedScalingFactors": LEAF,
            "aggregated": Field(
                fields={
                    "usageThresholds": LEAF,
                    "usageAggregationType": LEAF,
                    "usageAggregatedDuration": LEAF,
                    "scoreAggregationType": LEAF,
                    "scoreAggregatedDuration": LEAF,
                }
            ),
            "estimator": Field(refused=ONE_ESTIMATOR),
            "estimatedSecondsAfterPodScheduled": Field(refused=ONE_ESTIMATOR),
            "estimatedSecondsAfterInitialized": Field(refused=ONE_ESTIMATOR),
            "allowCustomizeEstimation": Field(refused=ONE_ESTIMATOR),
            "prodUsageIncludeSys": Field(
                refused="Berth's prod usage is the prod pods' reported usage, without the system's"
            ),
            "supportedResources": Field(
                refused="Berth weighs and checks the resources named in resourceWeights and "
                "the thresholds"
            ),
        },
    ),
    "Reservation": ArgsType(
        "ReservationArgs",
        {
            "enablePreemption": LEAF,
            "minCandidateNodesPercentage": Field(refused=NO_RESERVATION_PREEMPTION),
            "minCandidateNodesAbsolute": Field(refused=NO_RESERVATION_PREEMPTION),
            "controllerWorkers": Field(
                refused="Berth's reservation controller is its operator, one worker per "
                "reservation event; nothing to size"
            ),
            "gcDurationSeconds": Field(
                refused="Berth's operator keeps an ended reservation for "
                "BERTH_RESERVATION_GC_PERIOD (its environment), not a scheduler setting"
            ),
            # Berth's: Story 1 of the design.
            "reservePreemptedCapacity": LEAF,
            "preemptionReservationTTL": LEAF,
        },
    ),
}


def args_problem(plugin: str, args: Mapping[str, Any], path: str) -> str:
    """The first field of ``args`` Berth does not accept, as ``path.field: why; what to
    do``, or "" when every field is accepted."""
    spec = ARGS.get(plugin)
    if spec is None:
        return ""
    return _problem(args, spec.fields, spec.kind, path)


def _problem(obj: Mapping[str, Any], fields: Mapping[str, Field], kind: str, path: str) -> str:
    for key, value in obj.items():
        where = f"{path}.{key}"
        found = fields.get(key)
        if found is None:
            return f"{where}: unknown field of {kind}; {suggestion(str(key), fields)}"
        if found.refused:
            return f"{where}: not supported: {found.refused}; remove it"
        if found.fields is not None and isinstance(value, Mapping):
            problem = _problem(value, found.fields, kind, where)
            if problem:
                return problem
        if found.items is not None and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    problem = _problem(item, found.items, kind, f"{where}[{i}]")
                    if problem:
                        return problem
    return ""


def suggestion(key: str, known: Mapping[str, Any] | frozenset[str], noun: str = "fields") -> str:
    """What to do about an unknown name: the closest known one, or the known ones."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]}?"
    if not known:
        return f"there are no {noun}; remove it"
    return f"known {noun}: {', '.join(sorted(known))}"
