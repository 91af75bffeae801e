"""Plugins by name, kube-scheduler's default set, and building a profile's framework.

Resolution follows kube-scheduler: the defaults are a multiPoint list; a profile's
multiPoint and per-point ``disabled`` remove defaults (``"*"`` all of them at that point),
``enabled`` adds plugins (a default enabled again keeps its place and takes the new
weight). A plugin is instantiated once per profile and serves every point it implements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.scheduler.config import ConfigError, PluginRef, PluginSet, Profile
from berth.scheduler.framework import EXTENSION_POINTS, Handle, Plugin
from berth.scheduler.plugins.capacityscheduling import CapacityScheduling
from berth.scheduler.plugins.defaultbinder import DefaultBinder
from berth.scheduler.plugins.defaultpreemption import DefaultPreemption
from berth.scheduler.plugins.imagelocality import ImageLocality
from berth.scheduler.plugins.interpodaffinity.plugin import InterPodAffinity
from berth.scheduler.plugins.loadaware import LoadAwareScheduling
from berth.scheduler.plugins.nodeaffinity import NodeAffinity
from berth.scheduler.plugins.nodename import NodeName
from berth.scheduler.plugins.nodeports import NodePorts
from berth.scheduler.plugins.noderesources import NodeResourcesBalancedAllocation, NodeResourcesFit
from berth.scheduler.plugins.noderesourcetopology import NodeResourceTopologyMatch
from berth.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from berth.scheduler.plugins.placementfields import PlacementFields
from berth.scheduler.plugins.podtopologyspread.plugin import PodTopologySpread
from berth.scheduler.plugins.reservation import Reservation
from berth.scheduler.plugins.schedulinggates import SchedulingGates
from berth.scheduler.plugins.tainttoleration import TaintToleration
from berth.scheduler.reservations import ReservationBook
from berth.scheduler.runtime import Framework
from berth.scheduler.view import ClusterView

if TYPE_CHECKING:
    from berth.scheduler.writer import Writer

PLUGINS: dict[str, type[Plugin]] = {
    cls.name: cls
    for cls in (
        SchedulingGates,
        NodeUnschedulable,
        NodeName,
        TaintToleration,
        NodeAffinity,
        NodePorts,
        NodeResourcesFit,
        NodeResourcesBalancedAllocation,
        PodTopologySpread,
        InterPodAffinity,
        ImageLocality,
        PlacementFields,
        DefaultPreemption,
        DefaultBinder,
        CapacityScheduling,
        LoadAwareScheduling,
        NodeResourceTopologyMatch,
        Reservation,
    )
}
# The queue orders pods itself (priority, then creation time): PrioritySort is accepted.
QUEUE_SORT = "PrioritySort"

# kube-scheduler's default multiPoint plugins that Berth implements, in kube-scheduler's
# order (which is also the order filters run in), with kube-scheduler's score weights.
DEFAULTS: tuple[PluginRef, ...] = (
    # Berth's own, first: a pod asking for placement Berth lacks is refused by name.
    PluginRef(name="PlacementFields"),
    PluginRef(name="SchedulingGates"),
    PluginRef(name="NodeUnschedulable"),
    PluginRef(name="NodeName"),
    PluginRef(name="TaintToleration", weight=3),
    PluginRef(name="NodeAffinity", weight=2),
    PluginRef(name="NodePorts"),
    PluginRef(name="NodeResourcesFit", weight=1),
    PluginRef(name="PodTopologySpread", weight=2),
    PluginRef(name="InterPodAffinity", weight=2),
    PluginRef(name="DefaultPreemption"),
    PluginRef(name="NodeResourcesBalancedAllocation", weight=1),
    PluginRef(name="ImageLocality", weight=1),
    PluginRef(name="DefaultBinder"),
)

# kube-scheduler plugins Berth does not implement: named in the error so users know.
NOT_IMPLEMENTED = frozenset(
    {
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
        "NodeVolumeLimits",
        "DynamicResources",
    }
)


def _check_known(name: str, where: str) -> None:
    if name == "*" or name in PLUGINS:
        return
    if name in NOT_IMPLEMENTED:
        raise ConfigError(f"{where}: kube-scheduler plugin {name!r} is not implemented by Berth")
    raise ConfigError(f"{where}: unknown plugin {name!r} (known: {', '.join(sorted(PLUGINS))})")


def _merge(defaults: list[PluginRef], custom: PluginSet, where: str) -> list[PluginRef]:
    """kube-scheduler's mergePluginSet: a custom entry replaces a default in its place."""
    for ref in custom.enabled:
        _check_known(ref.name, where)
    disabled = {ref.name for ref in custom.disabled}
    if "*" in disabled:
        merged: list[PluginRef] = []
    else:
        merged = [ref for ref in defaults if ref.name not in disabled]
    for ref in custom.enabled:
        positions = [i for i, existing in enumerate(merged) if existing.name == ref.name]
        if positions:
            merged[positions[0]] = ref
        else:
            merged.append(ref)
    return merged


def build(
    profile: Profile,
    view: ClusterView,
    reservations: ReservationBook,
    writer: Writer | None = None,
    percentage_of_nodes_to_score: int | None = None,
) -> Framework:
    """The profile's framework: its plugins resolved per extension point, instantiated once
    each and given a handle on the view, the reservation book, the writer and the framework."""
    where = f"profile {profile.scheduler_name!r}"
    multi = _merge(list(DEFAULTS), profile.plugins.multi_point, f"{where} multiPoint")
    for ref in profile.plugins.queue_sort.enabled:
        if ref.name != QUEUE_SORT:
            raise ConfigError(f"{where} queueSort: only {QUEUE_SORT} is supported")
    handle = Handle(view, reservations, profile.scheduler_name, writer)
    percentage = profile.percentage_of_nodes_to_score
    framework = Framework(
        profile.scheduler_name,
        handle,
        percentage if percentage is not None else percentage_of_nodes_to_score,
    )
    handle.framework = framework
    for point, protocol in EXTENSION_POINTS.items():
        custom: PluginSet = getattr(profile.plugins, _attr(point))
        defaults = [ref for ref in multi if isinstance_of(ref.name, protocol)]
        chosen = _merge(defaults, custom, f"{where} {point}")
        plugins = getattr(framework, _attr(point))
        for ref in chosen:
            if not isinstance_of(ref.name, protocol):
                raise ConfigError(f"{where} {point}: plugin {ref.name!r} has no {point} point")
            plugins.append(_instance(framework, ref.name, profile, handle))
            if point == "score":
                framework.weights[ref.name] = ref.weight or 1  # as kube-scheduler: 0 is 1
    return framework


def isinstance_of(name: str, protocol: type) -> bool:
    cls = PLUGINS[name]
    return all(callable(getattr(cls, m, None)) for m in _methods(protocol))


def _methods(protocol: type) -> list[str]:
    return [m for m in vars(protocol) if not m.startswith("_")]


def _attr(point: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in point)


def _instance(framework: Framework, name: str, profile: Profile, handle: Handle) -> Plugin:
    if name not in framework.instances:
        try:
            framework.instances[name] = PLUGINS[name](profile.args_for(name), handle)
        except (ValueError, TypeError, KeyError) as err:
            raise ConfigError(
                f"profile {profile.scheduler_name!r} pluginConfig {name}: {err}"
            ) from err
    return framework.instances[name]
