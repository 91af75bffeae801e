"""The scheduler's configuration file, in kube-scheduler's KubeSchedulerConfiguration shape.

Users bring the file they have: ``profiles[].schedulerName``, ``plugins.<extension point>``
with ``enabled``/``disabled`` (``"*"`` disables every default at that point),
``pluginConfig[].args``, ``percentageOfNodesToScore``, ``clientConnection`` qps/burst,
``leaderElection``. Decoded strictly, as kube-scheduler decodes it: an unknown field at any
level, a second ``pluginConfig`` entry for a plugin, or a field Berth does not honour is a
``ConfigError`` naming its path. The plugin set is resolved at start-up: an unknown or not
yet available plugin is a ``ConfigError`` that names it, never a failure mid-cycle.
"""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from berth.scheduler.framework.argspec import ARGS, args_problem, suggestion

API_VERSIONS = frozenset(
    {
        "kubescheduler.config.k8s.io/v1",
        "kubescheduler.config.k8s.io/v1beta3",
        "kubescheduler.config.k8s.io/v1beta2",
        "kubescheduler.config.k8s.io/v1beta1",
    }
)
DEFAULT_SCHEDULER_NAME = "berth-scheduler"
# The one profile both `kubectl apply -k manifests` and `berth run` without --config use.
INSTALLED = "installed-config.yaml"
CONFIGMAP_HEADER = """\
# Generated from operators/berth/scheduler/installed-config.yaml (what `berth run` runs
# without --config) by `python -m berth.scheduler.config --write manifests/scheduler-config.yaml`;
# edit that file, not this one. Pods choose Berth with `schedulerName: berth-scheduler`.
"""


T = TypeVar("T")


class ConfigError(ValueError):
    """The configuration cannot be used; the message says what and where."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def refuse_unless(value: T, allowed: object, why: str) -> T:
    """A kube-scheduler field Berth works one way for: any other value is refused."""
    if value is not None and value != allowed:
        raise ValueError(
            f"{json.dumps(value)} is not supported: {why}; remove it or set {json.dumps(allowed)}"
        )
    return value


class PluginRef(_Model):
    name: str
    weight: int | None = None


class PluginSet(_Model):
    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(_Model):
    multi_point: PluginSet = Field(default_factory=PluginSet)
    pre_enqueue: PluginSet = Field(default_factory=PluginSet)
    queue_sort: PluginSet = Field(default_factory=PluginSet)
    pre_filter: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)
    post_filter: PluginSet = Field(default_factory=PluginSet)
    pre_score: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    pre_bind: PluginSet = Field(default_factory=PluginSet)
    bind: PluginSet = Field(default_factory=PluginSet)
    post_bind: PluginSet = Field(default_factory=PluginSet)


class PluginConfig(_Model):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _type_meta(self) -> PluginConfig:
        """Args may carry their own ``apiVersion``/``kind`` (``LoadAwareSchedulingArgs``,
        as Koordinator and scheduler-plugins write them): checked, then set aside."""
        kind = self.args.pop("kind", None)
        version = self.args.pop("apiVersion", None)
        if kind is not None and kind != f"{self.name}Args":
            raise ValueError(f"args of {self.name} have kind {kind!r}, expected {self.name}Args")
        if version is not None and version not in API_VERSIONS:
            raise ValueError(
                f"args of {self.name} have apiVersion {version!r}, "
                f"not one of {', '.join(sorted(API_VERSIONS))}"
            )
        return self


class Profile(_Model):
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _strict_args(self) -> Profile:
        """One entry per plugin, of a plugin Berth has, with fields its args type has
        (kube-scheduler refuses a repeated entry and an unknown field alike)."""
        seen: dict[str, int] = {}
        for i, entry in enumerate(self.plugin_config):
            where = f"pluginConfig[{i}]"
            if entry.name in seen:
                raise ValueError(
                    f"{where}: a second entry for {entry.name} (the first is "
                    f"pluginConfig[{seen[entry.name]}]); merge their args into one"
                )
            seen[entry.name] = i
            if entry.name not in ARGS:
                raise ValueError(
                    f"{where}.name: Berth has no plugin {entry.name!r}; "
                    f"{suggestion(entry.name, frozenset(ARGS), 'plugins')}"
                )
            problem = args_problem(entry.name, entry.args, f"{where}.args")
            if problem:
                raise ValueError(problem)
        return self

    def args_for(self, plugin: str) -> dict[str, Any]:
        for entry in self.plugin_config:
            if entry.name == plugin:
                return entry.args
        return {}


class ClientConnection(_Model):
    kubeconfig: str = ""
    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, gt=0)
    accept_content_types: str | None = None
    content_type: str | None = None

    @field_validator("accept_content_types", "content_type")
    @classmethod
    def _json(cls, value: str | None) -> str | None:
        return refuse_unless(value, "application/json", "Berth talks JSON to the API server")


class LeaderElection(_Model):
    leader_elect: bool = True
    lease_duration: str = "15s"
    renew_deadline: str = "10s"
    retry_period: str = "2s"
    resource_name: str = "berth-controller"
    resource_namespace: str = "berth-system"
    resource_lock: str | None = None

    @field_validator("resource_lock")
    @classmethod
    def _leases(cls, value: str | None) -> str | None:
        return refuse_unless(value, "leases", "Berth holds a Lease")


class SchedulerConfiguration(_Model):
    api_version: str = "kubescheduler.config.k8s.io/v1"
    kind: str = "KubeSchedulerConfiguration"
    client_connection: ClientConnection = Field(default_factory=ClientConnection)
    leader_election: LeaderElection = Field(default_factory=LeaderElection)
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    pod_initial_backoff_seconds: float = Field(default=1.0, gt=0)
    pod_max_backoff_seconds: float = Field(default=10.0, gt=0)
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()])
    # kube-scheduler's, honoured as far as they mean anything here: Berth filters and
    # scores every node at once (no goroutines to count), and fills its caches only
    # once it leads.
    parallelism: int | None = Field(default=None, gt=0)
    delay_cache_until_active: bool | None = None
    # kube-scheduler's, refused unless they ask for what Berth does anyway.
    extenders: list[Any] | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    healthz_bind_address: str | None = None
    metrics_bind_address: str | None = None

    @field_validator("delay_cache_until_active")
    @classmethod
    def _delayed(cls, value: bool | None) -> bool | None:
        return refuse_unless(value, True, "Berth fills its caches only once it leads")

    @field_validator("extenders")
    @classmethod
    def _no_extenders(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError(
                "Berth calls no scheduler extenders; remove them (an extender's work must "
                "be one of Berth's plugins)"
            )
        return value

    @field_validator("enable_profiling", "enable_contention_profiling")
    @classmethod
    def _no_profiling(cls, value: bool | None) -> bool | None:
        return refuse_unless(value, False, "Berth serves no profiling endpoints")

    @field_validator("healthz_bind_address", "metrics_bind_address")
    @classmethod
    def _own_address(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                "not supported: Berth serves /healthz and /metrics on the address of "
                "`berth run --health-address`; remove it"
            )
        return value

    def scheduler_names(self) -> list[str]:
        return [p.scheduler_name for p in self.profiles]


def parse(document: Any, source: str = "configuration") -> SchedulerConfiguration:
    """Validate a parsed YAML document; errors name the field and the file."""
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a KubeSchedulerConfiguration mapping")
    kind = document.get("kind", "KubeSchedulerConfiguration")
    version = document.get("apiVersion", "kubescheduler.config.k8s.io/v1")
    if kind != "KubeSchedulerConfiguration":
        raise ConfigError(f"{source}: kind is {kind!r}, expected KubeSchedulerConfiguration")
    if version not in API_VERSIONS:
        raise ConfigError(
            f"{source}: apiVersion {version!r} is not one of {', '.join(sorted(API_VERSIONS))}"
        )
    try:
        config = SchedulerConfiguration.model_validate(document)
    except ValidationError as err:
        raise ConfigError(f"{source}: {explain(err)}") from err
    if not config.profiles:
        config.profiles = [Profile()]  # kube-scheduler's default: one profile
    names = config.scheduler_names()
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: profiles repeat a schedulerName: {names}")
    return config


def explain(err: ValidationError) -> str:
    """The first error as one line: the field's path (``profiles[0].plugins.preFilter``),
    what is wrong, and, for an unknown field, the name meant or the names known."""
    first = err.errors()[0]
    loc = first["loc"]
    where = _path(loc)
    if first["type"] == "extra_forbidden":
        known = _aliases(SchedulerConfiguration, loc[:-1])
        return f"{where}: unknown field; {suggestion(str(loc[-1]), known)}"
    message = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
    # A profile's own checks name the path below the profile.
    if message.startswith("pluginConfig["):
        return f"{where}.{message}"
    return f"{where}: {message}"


def _path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _aliases(model: type[BaseModel], loc: tuple[int | str, ...]) -> frozenset[str]:
    """The field names (as written in the file) of the model at ``loc`` below ``model``."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or name: f for name, f in current.model_fields.items()}
        current = _model_of(fields[str(part)].annotation)
        if current is None:
            return frozenset()
    return frozenset(f.alias or name for name, f in current.model_fields.items())


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, itself or as the items of a list (or None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def installed_text() -> str:
    return resources.files(__package__).joinpath(INSTALLED).read_text()


def installed_configmap() -> str:
    """manifests/scheduler-config.yaml: the installed profile as the ConfigMap mounted
    into the controller."""
    body = "".join(f"    {line}\n" if line else "\n" for line in installed_text().splitlines())
    return (
        f"{CONFIGMAP_HEADER}apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        "  name: berth-scheduler-config\n  namespace: berth-system\ndata:\n"
        f"  scheduler-config.yaml: |\n{body}"
    )


def load(path: str | Path | None) -> SchedulerConfiguration:
    """The configuration from a file, or without one the profile Berth's manifests
    install."""
    if path is None:
        return parse(yaml.safe_load(installed_text()), "the installed configuration")
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"cannot read scheduler configuration {path}: {err}") from err
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    return parse(document, str(path))


def main(argv: Sequence[str] | None = None) -> int:
    """``--write FILE`` regenerates the manifest; ``--check FILE`` exits 1 when it is stale."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("--write", "--check"):
        sys.stderr.write("usage: python -m berth.scheduler.config --write|--check FILE\n")
        return 2
    target = Path(args[1])
    if args[0] == "--write":
        target.write_text(installed_configmap())
        return 0
    if not target.exists() or target.read_text() != installed_configmap():
        sys.stderr.write(
            f"{target} is stale; run: python -m berth.scheduler.config --write {target}\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
