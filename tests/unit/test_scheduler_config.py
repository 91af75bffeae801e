"""The scheduler configuration: kube-scheduler's file shape, resolved into plugins at start-up.

Every problem a user can write must come back as a ``ConfigError`` naming what is wrong,
never a crash and never a failure mid-cycle. Defaults and merge rules follow
kube-scheduler (pkg/scheduler/apis/config/v1 defaults.go and default_plugins.go).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import BaseModel

from berth.scheduler.assembly import assemble
from berth.scheduler.config import (
    DEFAULT_SCHEDULER_NAME,
    ConfigError,
    Profile,
    SchedulerConfiguration,
    installed_text,
    load,
    parse,
)
from berth.scheduler.config import main as config_main
from berth.scheduler.framework.interface import EXTENSION_POINTS
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.plugins.noderesources import NodeResourcesFit
from berth.scheduler.plugins.registry import PLUGINS
from tests.support import REPO
from tests.unit.scheduler_fixtures import Json

# The capacity-scheduling example as users copy it from scheduler-plugins' documentation
# (seed 003), verbatim.
CAPACITY_SCHEDULING_EXAMPLE = """\
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig:   "REPLACE_ME_WITH_KUBE_CONFIG_PATH"
profiles:
- schedulerName: default-scheduler
  plugins:
    preFilter:
      enabled:
      - name: CapacityScheduling
    postFilter:
      enabled:
      - name: CapacityScheduling
      disabled:
      - name: "*"
    reserve:
      enabled:
      - name: CapacityScheduling
  pluginConfig:
  - name: CapacityScheduling
    args:
      kubeConfigPath: "REPLACE_ME_WITH_KUBE_CONFIG_PATH"
"""

DEFAULT_FILTERS = [
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
]
# kube-scheduler's default score weights (v1 getDefaultPlugins) for the plugins Berth has.
DEFAULT_WEIGHTS = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}


def resolve(profile: Profile) -> Framework:
    """The profile's framework, built as the scheduler builds it."""
    return assemble([profile]).profile().framework


def resolved(profile: Json | None = None) -> Framework:
    return resolve(parse({"profiles": [profile or {}]}).profiles[0])


def names(plugins: Framework, point: str) -> list[str]:
    return [p.name for p in plugins.at(point)]


def plugins_at(point: str, **sets: list[Json]) -> Json:
    """A profile with one extension point configured."""
    return {"plugins": {point: sets}}


def validate(document: Any) -> SchedulerConfiguration:
    """What the scheduler does at start-up: parse, then resolve every profile."""
    config = parse(document)
    for profile in config.profiles:
        resolve(profile)
    return config


# -- defaults ---------------------------------------------------------------------------


def test_no_file_runs_the_installed_profile() -> None:
    config = load(None)
    assert config.scheduler_names() == [DEFAULT_SCHEDULER_NAME] == ["berth-scheduler"]
    assert config == parse(yaml.safe_load(installed_text()))
    plugins = resolve(config.profiles[0])
    assert names(plugins, "postFilter") == ["CapacityScheduling"]
    assert names(plugins, "reserve") == ["VolumeBinding", "CapacityScheduling", "Reservation"]
    assert "LoadAwareScheduling" in names(plugins, "filter")
    # kube-scheduler's queue defaults: podInitialBackoffSeconds 1, podMaxBackoffSeconds 10.
    assert config.pod_initial_backoff_seconds == 1
    assert config.pod_max_backoff_seconds == 10
    assert (config.client_connection.qps, config.client_connection.burst) == (50, 100)
    assert config.leader_election.leader_elect is True


def test_the_manifest_cannot_drift_from_the_installed_profile(tmp_path: Path) -> None:
    manifest = REPO / "manifests" / "scheduler-config.yaml"
    assert config_main(["--check", str(manifest)]) == 0, (
        "run: python -m berth.scheduler.config --write manifests/scheduler-config.yaml"
    )
    configmap = yaml.safe_load(manifest.read_text())
    assert configmap["data"]["scheduler-config.yaml"] == installed_text()
    stale = tmp_path / "stale.yaml"
    stale.write_text(manifest.read_text().replace("weight: 5000", "weight: 50"))
    assert config_main(["--check", str(stale)]) == 1
    assert config_main(["--write", str(stale)]) == 0
    assert stale.read_text() == manifest.read_text()


def test_the_default_profile_without_a_file() -> None:
    config = SchedulerConfiguration()
    assert config.scheduler_names() == ["berth-scheduler"]
    assert config.percentage_of_nodes_to_score is None


def test_an_empty_document_is_the_defaults() -> None:
    assert parse({}).scheduler_names() == ["berth-scheduler"]


def test_an_empty_profile_list_gets_the_default_profile() -> None:
    # kube-scheduler's SetDefaults_KubeSchedulerConfiguration appends one default profile
    # when profiles is empty.
    assert parse({"profiles": []}).scheduler_names() == ["berth-scheduler"]


def test_default_plugins_in_kube_scheduler_order() -> None:
    plugins = resolved()
    assert names(plugins, "preEnqueue") == ["SchedulingGates"]
    assert names(plugins, "filter") == DEFAULT_FILTERS
    assert names(plugins, "score") == list(DEFAULT_WEIGHTS)
    assert plugins.weights == DEFAULT_WEIGHTS
    assert names(plugins, "postFilter") == ["DefaultPreemption"]
    assert names(plugins, "bind") == ["DefaultBinder"]


def test_a_plugin_is_one_instance_across_points() -> None:
    plugins = resolved()
    taint = plugins.instances["TaintToleration"]
    assert taint in plugins.at("filter")
    assert taint in plugins.at("score")


# -- the capacity-scheduling example ---------------------------------------------------------


def test_capacity_scheduling_example_loads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text(CAPACITY_SCHEDULING_EXAMPLE)
    config = load(path)
    assert config.scheduler_names() == ["default-scheduler"]
    assert config.leader_election.leader_elect is False
    plugins = resolve(config.profiles[0])
    assert names(plugins, "preFilter") == [
        "PlacementFields",
        "NodeAffinity",
        "NodePorts",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "CapacityScheduling",
    ]
    # postFilter's "*" drops DefaultPreemption: quota preemption replaces it.
    assert names(plugins, "postFilter") == ["CapacityScheduling"]
    assert names(plugins, "reserve") == ["VolumeBinding", "CapacityScheduling"]
    capacity = plugins.instances["CapacityScheduling"]
    assert plugins.at("preFilter")[-1] is capacity is plugins.at("reserve")[1]


# -- plugins Berth does not have ------------------------------------------------------------


@pytest.mark.parametrize("point", ["multiPoint", "filter", "score", "preFilter"])
def test_unknown_plugin_lists_the_known_ones(point: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolved(plugins_at(point, enabled=[{"name": "NodeResourcesFitt"}]))
    message = str(caught.value)
    assert "NodeResourcesFitt" in message
    for known in PLUGINS:
        assert known in message


@pytest.mark.parametrize("point", ["multiPoint", "filter", "score"])
def test_kube_scheduler_plugin_berth_lacks_is_a_clear_error(point: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolved(plugins_at(point, enabled=[{"name": "DynamicResources", "weight": 1}]))
    assert "DynamicResources" in str(caught.value)
    assert "not implemented" in str(caught.value)


@pytest.mark.parametrize("point", ["multiPoint", "filter", "score"])
def test_disabling_a_plugin_berth_lacks_is_accepted(point: str) -> None:
    # Common in real files (kube-scheduler's own default set includes it): disabling
    # DynamicResources asks for nothing Berth lacks.
    plugins = resolved(plugins_at(point, disabled=[{"name": "DynamicResources"}]))
    assert names(plugins, "filter") == DEFAULT_FILTERS


@pytest.mark.parametrize("point", ["multiPoint", "filter"])
def test_disabling_a_default_plugin_removes_it(point: str) -> None:
    plugins = resolved(plugins_at(point, disabled=[{"name": "PodTopologySpread"}]))
    assert names(plugins, "filter") == [f for f in DEFAULT_FILTERS if f != "PodTopologySpread"]


def test_plugin_without_the_point_is_an_error() -> None:
    with pytest.raises(ConfigError, match="NodeName"):
        resolved(plugins_at("score", enabled=[{"name": "NodeName"}]))


def test_queue_sort_other_than_priority_sort_is_an_error() -> None:
    assert resolved(plugins_at("queueSort", enabled=[{"name": "PrioritySort"}]))
    with pytest.raises(ConfigError, match="PrioritySort"):
        resolved(plugins_at("queueSort", enabled=[{"name": "NodeName"}]))
    # Coscheduling's queue sort is the group cycle's: only with the plugin enabled.
    with pytest.raises(ConfigError, match="Coscheduling does its queueSort work"):
        resolved(plugins_at("queueSort", enabled=[{"name": "Coscheduling"}]))


# -- merging ------------------------------------------------------------------------------


def test_disable_all_at_filter_removes_only_the_default_filters() -> None:
    plugins = resolved(plugins_at("filter", disabled=[{"name": "*"}]))
    assert names(plugins, "filter") == []
    assert plugins.weights == DEFAULT_WEIGHTS  # scoring untouched
    assert names(plugins, "bind") == ["DefaultBinder"]


def test_disable_all_then_enable_one_filter() -> None:
    plugins = resolved(
        plugins_at("filter", disabled=[{"name": "*"}], enabled=[{"name": "NodeResourcesFit"}])
    )
    assert names(plugins, "filter") == ["NodeResourcesFit"]


def test_disabling_one_default_keeps_the_order_of_the_rest() -> None:
    plugins = resolved(plugins_at("filter", disabled=[{"name": "TaintToleration"}]))
    assert names(plugins, "filter") == [p for p in DEFAULT_FILTERS if p != "TaintToleration"]
    assert "TaintToleration" in names(plugins, "score")


def test_multi_point_disable_removes_the_plugin_everywhere() -> None:
    plugins = resolved(plugins_at("multiPoint", disabled=[{"name": "TaintToleration"}]))
    assert "TaintToleration" not in names(plugins, "filter")
    assert "TaintToleration" not in plugins.weights


def test_multi_point_weight_override_keeps_the_place() -> None:
    plugins = resolved(plugins_at("multiPoint", enabled=[{"name": "NodeAffinity", "weight": 5}]))
    assert plugins.weights == {**DEFAULT_WEIGHTS, "NodeAffinity": 5}
    assert names(plugins, "filter") == DEFAULT_FILTERS
    assert names(plugins, "score") == list(DEFAULT_WEIGHTS)


def test_score_point_weight_override() -> None:
    plugins = resolved(
        plugins_at("score", enabled=[{"name": "NodeResourcesBalancedAllocation", "weight": 4}])
    )
    assert plugins.weights["NodeResourcesBalancedAllocation"] == 4


@pytest.mark.parametrize("point", ["multiPoint", "score"])
def test_default_enabled_again_without_weight_gets_weight_one(point: str) -> None:
    # kube-scheduler's mergePluginSet replaces the default entry by the custom one (whose
    # weight is unset), and the framework turns a zero weight into 1.
    plugins = resolved(plugins_at(point, enabled=[{"name": "TaintToleration"}]))
    assert plugins.weights["TaintToleration"] == 1


# -- invalid files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "word"),
    [
        (
            {"apiVersion": "kubescheduler.config.k8s.io/v2", "kind": "KubeSchedulerConfiguration"},
            "v2",
        ),
        ({"apiVersion": "v1", "kind": "KubeSchedulerConfiguration"}, "apiVersion"),
        ({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "SchedulerPolicy"}, "kind"),
        ([1, 2], "mapping"),
        ("just text", "mapping"),
    ],
    ids=["unknown-version", "core-v1", "wrong-kind", "list", "scalar"],
)
def test_not_a_kube_scheduler_configuration(document: Any, word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        parse(document)


@pytest.mark.parametrize(
    "version",
    ["kubescheduler.config.k8s.io/v1", "kubescheduler.config.k8s.io/v1beta3"],
)
def test_known_versions_are_accepted(version: str) -> None:
    document = {"apiVersion": version, "kind": "KubeSchedulerConfiguration"}
    assert parse(document).scheduler_names() == ["berth-scheduler"]


@pytest.mark.parametrize("value", [-1, 101, "half"])
@pytest.mark.parametrize("where", ["top", "profile"])
def test_invalid_percentage_of_nodes_to_score(value: Any, where: str) -> None:
    document: Json = {"percentageOfNodesToScore": value}
    if where == "profile":
        document = {"profiles": [{"schedulerName": "a", "percentageOfNodesToScore": value}]}
    with pytest.raises(ConfigError, match="percentageOfNodesToScore"):
        parse(document)


@pytest.mark.parametrize("value", [0, 1, 50, 100])
def test_valid_percentage_of_nodes_to_score(value: int) -> None:
    config = parse({"percentageOfNodesToScore": value, "profiles": [{"schedulerName": "a"}]})
    assert config.percentage_of_nodes_to_score == value


def test_repeated_scheduler_name() -> None:
    with pytest.raises(ConfigError, match="schedulerName"):
        parse({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]})


def test_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("profiles:\n- schedulerName: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.yaml")


def test_plugin_args_error_is_a_config_error() -> None:
    profile = {
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "bogus"}}}
        ]
    }
    with pytest.raises(ConfigError) as caught:
        resolved(profile)
    assert "NodeResourcesFit" in str(caught.value)
    assert "bogus" in str(caught.value)


def test_plugin_args_negative_weight_is_a_config_error() -> None:
    strategy = {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": -1}]}
    profile = {
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}]
    }
    with pytest.raises(ConfigError, match="NodeResourcesFit"):
        resolved(profile)


def test_most_allocated_is_accepted() -> None:
    profile = {
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ]
    }
    fit = resolved(profile).instances["NodeResourcesFit"]
    assert isinstance(fit, NodeResourcesFit)
    assert fit.strategy == "MostAllocated"


def test_the_installed_configuration_enables_quotas_and_load_awareness() -> None:
    """manifests/scheduler-config.yaml: what `kubectl apply -k manifests` gives the scheduler."""
    configmap = yaml.safe_load((REPO / "manifests" / "scheduler-config.yaml").read_text())
    config = parse(yaml.safe_load(configmap["data"]["scheduler-config.yaml"]))
    plugins = resolve(config.profiles[0])
    assert names(plugins, "postFilter") == ["CapacityScheduling"]
    assert "CapacityScheduling" in names(plugins, "preFilter")
    assert names(plugins, "reserve") == ["VolumeBinding", "CapacityScheduling", "Reservation"]
    assert "LoadAwareScheduling" in names(plugins, "filter")
    assert "LoadAwareScheduling" in names(plugins, "score")
    assert "NodeResourceTopologyMatch" in names(plugins, "filter")
    assert "Reservation" in names(plugins, "preBind")
    assert plugins.weights["Reservation"] == 5000


# -- upstream configurations --------------------------------------------------------------

COMPAT = REPO / "docs" / "examples" / "config-compat"
COMPAT_FILES = sorted(p.name for p in COMPAT.glob("*.yaml") if not p.name.endswith(".berth.yaml"))


def plain(value: Any) -> Any:
    """A plugin attribute as comparable data (a component stands for its type)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if dataclasses.is_dataclass(value) and type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return dataclasses.asdict(value)  # a value, not a component holding the view
    if value is None or isinstance(value, str | int | float | list | tuple | dict | BaseModel):
        return value
    return type(value).__name__


def shape(plugins: Framework) -> tuple[dict[str, list[str]], dict[str, int], dict[str, Any]]:
    """What a profile does: the plugins per point, the score weights, each plugin's args."""
    points = {point: names(plugins, point) for point in EXTENSION_POINTS}
    configs = {
        name: {
            key: plain(value)
            for key, value in vars(instance).items()
            if not key.startswith("_") and key not in ("args", "handle", "clock")
        }
        for name, instance in plugins.instances.items()
    }
    return points, plugins.weights, configs


@pytest.mark.parametrize("name", COMPAT_FILES)
def test_an_upstream_configuration_resolves_as_its_berth_equivalent(name: str) -> None:
    upstream = load(COMPAT / name)
    berth = load(COMPAT / name.replace(".yaml", ".berth.yaml"))
    assert upstream.scheduler_names() == berth.scheduler_names()
    for theirs, ours in zip(upstream.profiles, berth.profiles, strict=True):
        assert shape(resolve(theirs)) == shape(resolve(ours))


def test_args_may_carry_their_own_api_version_and_kind() -> None:
    args = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "LoadAwareSchedulingArgs"}
    profile = {
        "plugins": {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]}},
        "pluginConfig": [
            {"name": "LoadAwareScheduling", "args": {**args, "dominantResourceWeight": 3}}
        ],
    }
    plugin = resolved(profile).instances["LoadAwareScheduling"]
    assert plugin.config.dominant_resource_weight == 3


@pytest.mark.parametrize(
    ("meta", "word"),
    [
        ({"kind": "NodeResourcesFitArgs"}, "NodeResourcesFitArgs"),
        ({"apiVersion": "kubescheduler.config.k8s.io/v2"}, "v2"),
    ],
)
def test_args_of_another_kind_or_version_are_refused(meta: Json, word: str) -> None:
    document = {"profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling", "args": meta}]}]}
    with pytest.raises(ConfigError, match=word):
        parse(document)


def enabled_at(*points: str, name: str, **extra: Any) -> Json:
    return {"plugins": {point: {"enabled": [{"name": name}]} for point in points}, **extra}


def test_a_folded_point_is_accepted_where_the_upstream_plugin_has_it() -> None:
    plugins = resolved(enabled_at("preFilter", "filter", "postFilter", "preScore", "score",
                                  "reserve", "preBind", "bind", name="Reservation"))  # fmt: skip
    assert names(plugins, "preFilter")[-1] == "Reservation"
    assert "Reservation" not in names(plugins, "filter")  # done in its preFilter
    nrt = resolved(
        enabled_at("preFilter", "filter", "score", "postBind", name="NodeResourceTopologyMatch")
    )
    assert "NodeResourceTopologyMatch" in names(nrt, "filter")


def test_a_point_the_upstream_plugin_lacks_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"NodeName.*has no preScore point"):
        resolved(enabled_at("preScore", name="NodeName"))
    with pytest.raises(ConfigError, match=r"LoadAwareScheduling.*has no postFilter point"):
        resolved(enabled_at("postFilter", name="LoadAwareScheduling"))


def test_an_unknown_plugin_at_any_point_is_named() -> None:
    for point in ("preScore", "permit", "postBind"):
        with pytest.raises(ConfigError, match="Trimaran"):
            resolved(enabled_at(point, name="Trimaran"))


def test_a_plugin_enabled_only_at_a_folded_point_is_refused() -> None:
    with pytest.raises(ConfigError, match="NodeResourceTopologyMatch does its preFilter work"):
        resolved(enabled_at("preFilter", name="NodeResourceTopologyMatch"))


def test_disabling_a_folded_point_of_a_running_plugin_is_refused() -> None:
    profile = {
        "plugins": {
            "multiPoint": {"enabled": [{"name": "Reservation"}]},
            "filter": {"disabled": [{"name": "Reservation"}]},
        }
    }
    with pytest.raises(ConfigError, match="Reservation cannot be disabled at filter"):
        resolved(profile)


def nrt(args: Json, *, reserve_disabled: bool = False) -> Json:
    plugins: Json = {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}}
    if reserve_disabled:
        plugins["reserve"] = {"disabled": [{"name": "NodeResourceTopologyMatch"}]}
    return {
        "plugins": plugins,
        "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
    }


def test_the_topology_ledger_follows_cache_resync_and_the_reserve_point() -> None:
    on = resolved(nrt({"cacheResyncPeriodSeconds": 5})).instances["NodeResourceTopologyMatch"]
    assert on.track_pending is True
    off = resolved(nrt({}, reserve_disabled=True)).instances["NodeResourceTopologyMatch"]
    assert off.track_pending is False  # scheduler-plugins' shipped ConfigMap: no cache
    with pytest.raises(ConfigError, match="cannot be disabled at reserve"):
        resolved(nrt({"cacheResyncPeriodSeconds": 5}, reserve_disabled=True))


@pytest.mark.parametrize(
    ("args", "word"),
    [
        ({"cache": {"foreignPodsDetect": "None"}}, "cache.foreignPodsDetect"),
        ({"cache": {"informerMode": "Dedicated"}}, "cache.informerMode"),
        ({"cache": {"resyncMethod": "All"}}, "cache.resyncMethod"),
        ({"cache": {"resyncScope": "OnlyResources"}}, "cache.resyncScope"),
        ({"discardReservedNodes": True}, "discardReservedNodes"),
        ({"preemptionMode": "Enabled"}, "preemptionMode"),
        ({"cacheResyncPeriod": 5}, "cacheResyncPeriod"),
    ],
)
def test_topology_args_berth_cannot_honour_are_named(args: Json, word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        resolved(nrt(args))


def test_topology_args_naming_what_berth_does_are_accepted() -> None:
    args = {
        "cache": {"foreignPodsDetect": "All", "informerMode": "Shared"},
        "discardReservedNodes": False,
        "preemptionMode": "Disabled",
    }
    assert "NodeResourceTopologyMatch" in resolved(nrt(args)).instances
