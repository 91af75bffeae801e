"""Plugins by name, kube-scheduler's default set, and building a profile's framework.

Resolution follows kube-scheduler: the defaults are a multiPoint list; a profile's
multiPoint and per-point ``disabled`` remove defaults (``"*"`` all of them at that point),
``enabled`` adds plugins (a default enabled again keeps its place and takes the new
weight). A plugin is instantiated once per profile and serves every point it implements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.scheduler.cache.reservations import ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.config import ConfigError, PluginRef, PluginSet, Profile
from berth.scheduler.framework.interface import ACCEPTED_POINTS, EXTENSION_POINTS, Handle, Plugin
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.plugins.capacityscheduling import (
    QUOTA_PLUGINS,
    CapacityScheduling,
    ElasticQuota,
)
from berth.scheduler.plugins.coscheduling import Coscheduling
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
from berth.scheduler.plugins.nodevolumelimits import NodeVolumeLimits
from berth.scheduler.plugins.placementfields import PlacementFields
from berth.scheduler.plugins.podtopologyspread.plugin import PodTopologySpread
from berth.scheduler.plugins.reservation import Reservation
from berth.scheduler.plugins.schedulinggates import SchedulingGates
from berth.scheduler.plugins.tainttoleration import TaintToleration
from berth.scheduler.plugins.volumebinding.plugin import VolumeBinding
from berth.scheduler.plugins.volumerestrictions import VolumeRestrictions
from berth.scheduler.plugins.volumezone import VolumeZone

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
        VolumeRestrictions,
        NodeVolumeLimits,
        VolumeBinding,
        VolumeZone,
        PodTopologySpread,
        InterPodAffinity,
        ImageLocality,
        PlacementFields,
        DefaultPreemption,
        DefaultBinder,
        CapacityScheduling,
        ElasticQuota,
        LoadAwareScheduling,
        NodeResourceTopologyMatch,
        Reservation,
        Coscheduling,
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
    PluginRef(name="VolumeRestrictions"),
    PluginRef(name="NodeVolumeLimits"),
    PluginRef(name="VolumeBinding"),
    PluginRef(name="VolumeZone"),
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
        "DynamicResources",
    }
)


# Points the upstream plugin implements whose work Berth does within the plugin's other
# points (or, for a placement's time and a Reservation's binding, in the scheduler
# itself). Configurations that name them load as they do in kube-scheduler; disabling
# one would switch that work off upstream, which Berth cannot do alone, so it is refused.
FOLDED_POINTS: dict[str, frozenset[str]] = {
    # Koordinator's Reservation: filter and postFilter checks run in its preFilter here,
    # preScore in its score, and a Reservation is bound by the scheduler itself.
    "Reservation": frozenset({"filter", "postFilter", "preScore", "bind"}),
    # scheduler-plugins: preFilter's per-pod work runs in filter; reserve and postBind
    # feed the pending ledger, fed here by the cluster view's placement record.
    "NodeResourceTopologyMatch": frozenset({"preFilter", "reserve", "postBind"}),
    # Koordinator: preFilter's per-pod work runs in filter and score; reserve records the
    # placement time, which the cluster view records for every plugin.
    "LoadAwareScheduling": frozenset({"preFilter", "reserve"}),
    # kube-scheduler: preScore's per-pod work runs in score; NodePorts's preFilter in filter.
    "TaintToleration": frozenset({"preScore"}),
    "NodeAffinity": frozenset({"preScore"}),
    "NodeResourcesFit": frozenset({"preFilter", "preScore"}),
    "NodeResourcesBalancedAllocation": frozenset({"preScore"}),
    "NodePorts": frozenset({"preFilter"}),
    # scheduler-plugins and Koordinator: the group cycle takes a gang's members together
    # (what its queue sort is for), checks the quorum and minResources before placing
    # (preFilter), and leaves no member waiting to reject or unreserve (postFilter,
    # reserve); the gang's bound members (postBind) are counted from the pods' bindings
    # as the cluster view records them, and the PodGroup's status from those.
    "Coscheduling": frozenset({"queueSort", "preFilter", "postFilter", "reserve", "postBind"}),
}


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


def _folded(name: str, point: str) -> bool:
    return point in FOLDED_POINTS.get(name, frozenset()) and not (
        point in EXTENSION_POINTS and isinstance_of(name, EXTENSION_POINTS[point])
    )


def _without_folded(custom: PluginSet, point: str, where: str) -> tuple[PluginSet, list[str]]:
    """The point's own entries, and the plugins named there for a point Berth folds."""
    for ref in custom.enabled:
        _check_known(ref.name, where)
    folded = [r.name for r in [*custom.enabled, *custom.disabled] if _folded(r.name, point)]
    own = PluginSet(
        enabled=[r for r in custom.enabled if not _folded(r.name, point)],
        disabled=[r for r in custom.disabled if not _folded(r.name, point)],
    )
    return own, folded


def _check_folded(framework: Framework, point: str, custom: PluginSet, where: str) -> None:
    """Enabled at a folded point: the plugin must run at its own points. Disabled there
    while it runs: refused, unless that point's work is off anyway (the topology ledger's
    reserve, with the ledger off)."""
    for ref in custom.enabled:
        if _folded(ref.name, point) and ref.name not in framework.instances:
            raise ConfigError(
                f"{where}: {ref.name} does its {point} work within its other extension "
                "points, where it is not enabled in this profile"
            )
    for ref in custom.disabled:
        instance = framework.instances.get(ref.name)
        if not _folded(ref.name, point) or instance is None:
            continue
        if point == "reserve" and not getattr(instance, "track_pending", True):
            continue
        raise ConfigError(
            f"{where}: {ref.name} cannot be disabled at {point} alone: Berth does that "
            "work within the plugin's other extension points"
        )


def profile_plugins(profile: Profile) -> tuple[str, ...]:
    """The plugins a profile runs at multiPoint, in order, the queue sort first: what a
    benchmark prints beside the figures it measured with them."""
    where = f"profile {profile.scheduler_name!r} multiPoint"
    return (
        QUEUE_SORT,
        *(ref.name for ref in _merge(list(DEFAULTS), profile.plugins.multi_point, where)),
    )


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
        if ref.name != QUEUE_SORT and not _folded(ref.name, "queueSort"):
            raise ConfigError(f"{where} queueSort: only {QUEUE_SORT} is supported")
    handle = Handle(view, reservations, profile.scheduler_name, writer)
    percentage = profile.percentage_of_nodes_to_score
    framework = Framework(
        profile.scheduler_name,
        handle,
        percentage if percentage is not None else percentage_of_nodes_to_score,
    )
    handle.framework = framework
    customs = {
        point: getattr(profile.plugins, _attr(point))
        for point in sorted(ACCEPTED_POINTS - {"multiPoint", "queueSort"})
    }
    for point in sorted(set(customs) - set(EXTENSION_POINTS)):  # points no plugin has here
        _, folded = _without_folded(customs[point], point, f"{where} {point}")
        for ref in customs[point].enabled:
            if ref.name not in folded:
                raise ConfigError(f"{where} {point}: plugin {ref.name!r} has no {point} point")
    for point, protocol in EXTENSION_POINTS.items():
        custom, _ = _without_folded(customs[point], point, f"{where} {point}")
        defaults = [ref for ref in multi if isinstance_of(ref.name, protocol)]
        chosen = _merge(defaults, custom, f"{where} {point}")
        plugins = getattr(framework, _attr(point))
        for ref in chosen:
            if not isinstance_of(ref.name, protocol):
                raise ConfigError(f"{where} {point}: plugin {ref.name!r} has no {point} point")
            plugins.append(_instance(framework, ref.name, profile, handle))
            if point == "score":
                framework.weights[ref.name] = ref.weight or 1  # as kube-scheduler: 0 is 1
    for point, custom in {**customs, "queueSort": profile.plugins.queue_sort}.items():
        _check_folded(framework, point, custom, f"{where} {point}")
    if set(framework.instances) >= QUOTA_PLUGINS:
        raise ConfigError(
            f"{where}: CapacityScheduling and ElasticQuota are one quota plugin in Berth "
            "(scheduler-plugins' and Koordinator's names for it); enable one of them"
        )
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
