"""The descheduler configuration: Koordinator's ``DeschedulerConfiguration`` file.

Berth serves the LowNodeLoad balance plugin and the MigrationController (the arguments of
the migration operator). Anything else in the file (another plugin, an unknown field or
argument) is refused with its name, so nothing is accepted and ignored. LowNodeLoad's high
thresholds must not be below the scheduler's LoadAwareScheduling thresholds: the scheduler
would fill nodes to a level the descheduler then empties, for ever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError

from berth.api.base import ApiModel
from berth.api.duration import Duration, parse_duration
from berth.descheduler.lownodeload import LowNodeLoadArgs
from berth.loadaware.args import LoadAwareArgs
from berth.migration.args import MigrationControllerArgs
from berth.scheduler.config import SchedulerConfiguration

__all__ = [
    "LOW_NODE_LOAD",
    "MIGRATION_CONTROLLER",
    "DeschedulerConfigError",
    "DeschedulerSettings",
    "check_against_scheduler",
    "load",
    "parse",
]

LOW_NODE_LOAD: Final = "LowNodeLoad"
MIGRATION_CONTROLLER: Final = "MigrationController"
LOAD_AWARE: Final = "LoadAwareScheduling"
API_VERSION: Final = "descheduler/v1alpha2"


class DeschedulerConfigError(ValueError):
    """The descheduler configuration cannot be used; the message names what and where."""


class _Strict(ApiModel):
    model_config = ConfigDict(extra="forbid")


class _PluginRef(_Strict):
    name: str


class _PluginSet(_Strict):
    enabled: list[_PluginRef] = Field(default_factory=list)
    disabled: list[_PluginRef] = Field(default_factory=list)


class _Plugins(_Strict):
    deschedule: _PluginSet = Field(default_factory=_PluginSet)
    balance: _PluginSet = Field(default_factory=_PluginSet)
    evict: _PluginSet = Field(default_factory=_PluginSet)
    filter: _PluginSet = Field(default_factory=_PluginSet)


class _PluginConfig(_Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class _Profile(_Strict):
    name: str = "koord-descheduler"
    plugins: _Plugins = Field(default_factory=_Plugins)
    plugin_config: list[_PluginConfig] = Field(default_factory=list)


class _Configuration(_Strict):
    api_version: Literal["descheduler/v1alpha2"]
    kind: Literal["DeschedulerConfiguration"]
    descheduling_interval: Duration = "60s"
    dry_run: bool = False
    profiles: list[_Profile] = Field(default_factory=lambda: [_Profile()])


class DeschedulerSettings(ApiModel):
    """What ``berth run`` takes from the file."""

    interval_seconds: float = 60.0
    migration: MigrationControllerArgs = Field(default_factory=MigrationControllerArgs)
    low_node_load: LowNodeLoadArgs | None = None
    """``None`` when LowNodeLoad is not enabled: no balancing."""


_SERVED: Final = {
    "balance": {LOW_NODE_LOAD},
    "evict": {MIGRATION_CONTROLLER},
    "filter": {MIGRATION_CONTROLLER},
}


def _where(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}"


def parse(document: Any, source: str = "descheduler configuration") -> DeschedulerSettings:
    """Validate a parsed YAML document; errors name the field and the file."""
    try:
        config = _Configuration.model_validate(document)
    except ValidationError as err:
        raise DeschedulerConfigError(f"{source}: {_where(err)}") from err
    if len(config.profiles) != 1:
        raise DeschedulerConfigError(
            f"{source}: profiles: Berth runs exactly one descheduler profile, "
            f"{len(config.profiles)} given"
        )
    profile = config.profiles[0]
    for point in ("deschedule", "balance", "evict", "filter"):
        for ref in getattr(profile.plugins, point).enabled:
            if ref.name not in _SERVED.get(point, set()):
                raise DeschedulerConfigError(
                    f"{source}: plugins.{point}: plugin {ref.name!r} is not served by Berth "
                    f"(served: LowNodeLoad in balance, MigrationController in evict/filter)"
                )
    balanced = any(r.name == LOW_NODE_LOAD for r in profile.plugins.balance.enabled)
    settings = DeschedulerSettings(
        interval_seconds=parse_duration(config.descheduling_interval).total_seconds()
    )
    for entry in profile.plugin_config:
        try:
            if entry.name == MIGRATION_CONTROLLER:
                settings.migration = MigrationControllerArgs.from_dict(entry.args)
            elif entry.name == LOW_NODE_LOAD and balanced:
                settings.low_node_load = LowNodeLoadArgs.from_dict(entry.args)
            else:
                raise DeschedulerConfigError(
                    f"{source}: pluginConfig: args for {entry.name!r}, which is not enabled "
                    "or not served by Berth"
                )
        except ValidationError as err:
            raise DeschedulerConfigError(f"{source}: {entry.name} args: {_where(err)}") from err
    if balanced and settings.low_node_load is None:
        settings.low_node_load = LowNodeLoadArgs()
    if config.dry_run and settings.low_node_load is not None:
        settings.low_node_load.dry_run = True
    return settings


def load(path: str | Path) -> DeschedulerSettings:
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise DeschedulerConfigError(
            f"cannot read descheduler configuration {path}: {err}"
        ) from err
    return parse(document, str(path))


def _load_aware_enabled(scheduler: SchedulerConfiguration, index: int) -> bool:
    plugins = scheduler.profiles[index].plugins
    names = {r.name for s in (plugins.multi_point, plugins.filter) for r in s.enabled}
    off = {r.name for s in (plugins.multi_point, plugins.filter) for r in s.disabled}
    return LOAD_AWARE in names and LOAD_AWARE not in off and "*" not in off


def check_against_scheduler(
    settings: DeschedulerSettings, scheduler: SchedulerConfiguration
) -> None:
    """Refuse high thresholds below the scheduler's load-aware thresholds, naming both."""
    args = settings.low_node_load
    if args is None:
        return
    for index, profile in enumerate(scheduler.profiles):
        if not _load_aware_enabled(scheduler, index):
            continue
        try:
            limits = LoadAwareArgs.parse(profile.args_for(LOAD_AWARE)).usage_thresholds
        except ValueError:
            continue  # the scheduler refuses its own configuration, naming it
        for pool in args.pools():
            for resource, high in sorted(pool.high.items()):
                limit = limits.get(resource)
                if limit is not None and high < limit:
                    raise DeschedulerConfigError(
                        f"LowNodeLoad highThresholds.{resource} {high:g} (pool {pool.name}) is "
                        f"below the scheduler's LoadAwareScheduling usageThresholds.{resource} "
                        f"{limit} (profile {profile.scheduler_name}): the scheduler would fill "
                        "nodes to a load the descheduler then moves pods off; raise the "
                        "first or lower the second"
                    )
