"""The Helm chart ``charts/berth``, generated from ``manifests/`` and ``crds/``.

Each template is a manifests file with the chart's values put in at fixed places (the
image, replicas, resources, placement, the configuration files, the namespace, the agent on
or off), and each value's default is what the manifests say at that place: with its
default values the chart renders the objects ``kubectl kustomize manifests`` renders. The
CRDs are copied into the chart's ``crds/`` folder (docs/installing.md says why). Run
``python -m berth.release.chart --write charts/berth`` after changing either folder;
``--check`` exits 1 when the chart is stale.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import yaml

from berth.localcluster.paths import REPO_DIR
from berth.release import generated

MANIFESTS: Final = REPO_DIR / "manifests"
COMMAND: Final = "python -m berth.release.chart --write charts/berth"
KUSTOMIZATION: Final = "kustomization.yaml"
# What the generator reproduces of a kustomization; anything else would render differently.
KUSTOMIZATION_FIELDS: Final = frozenset({"apiVersion", "kind", "resources", "labels"})
AGENT: Final = "berth-agent"
"""The agent's objects (ServiceAccount, RBAC, DaemonSet) are all named so; ``agent.enabled``
switches them together."""


class ChartError(ValueError):
    """The manifests hold something the chart cannot reproduce; the message says what."""


class Form(Enum):
    """How a slot's value is written into a template."""

    INLINE = "inline"
    """``key: {{ expression }}``: a scalar."""
    BLOCK = "block"
    """``key:`` and the value as YAML below it (maps, lists, multi-line text)."""
    OPTIONAL = "optional"
    """As BLOCK, but only when the value is not empty."""


@dataclass(frozen=True)
class Slot:
    """A field of one manifests object that the chart fills from a value."""

    kind: str
    name: str
    path: tuple[str | int, ...]
    value: str
    """The value's dotted key in values.yaml."""
    form: Form = Form.INLINE
    expression: str = ""
    """The template's expression; ``.Values.<value>`` when empty."""
    convert: Callable[[Any], Any] | None = None
    """The value's default from the field's content (the field's content when None)."""
    empty: Any = None
    """An OPTIONAL field's default where the manifests leave it out."""

    def template_expression(self) -> str:
        return self.expression or f".Values.{self.value}"


def _repository(image: str) -> dict[str, str]:
    """``berth:0.1.0`` as the image values; the tag must be the package version, which is
    the chart's appVersion and the default tag."""
    repository, _, tag = image.rpartition(":")
    if tag != generated.package_version():
        raise ChartError(
            f"manifests run {image}, but the package version is {generated.package_version()}"
        )
    return {"repository": repository, "tag": ""}


IMAGE: Final = (
    'printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion)'
)
# The controller holds its Lease in its own namespace: the Role allows no other.
SCHEDULER_CONFIG: Final = (
    'regexReplaceAll "(?m)^( *resourceNamespace:).*$" .Values.scheduler.config '
    '(printf "${1} %s" .Values.namespace)'
)
POD: Final = ("spec", "template", "spec")
CONTAINER: Final = (*POD, "containers", 0)


def _workload(kind: str, name: str, component: str) -> tuple[Slot, ...]:
    return (
        Slot(kind, name, (*CONTAINER, "image"), "image", expression=IMAGE, convert=_repository),
        Slot(kind, name, (*CONTAINER, "imagePullPolicy"), "image.pullPolicy"),
        Slot(kind, name, (*CONTAINER, "resources"), f"{component}.resources", Form.BLOCK),
        Slot(
            kind, name, (*POD, "nodeSelector"), f"{component}.nodeSelector", Form.OPTIONAL, empty={}
        ),
        Slot(
            kind, name, (*POD, "tolerations"), f"{component}.tolerations", Form.OPTIONAL, empty=[]
        ),
    )


SLOTS: Final = (
    Slot("Deployment", "berth-controller", ("spec", "replicas"), "controller.replicas"),
    *_workload("Deployment", "berth-controller", "controller"),
    *_workload("DaemonSet", AGENT, "agent"),
    Slot(
        "ConfigMap",
        "berth-scheduler-config",
        ("data", "scheduler-config.yaml"),
        "scheduler.config",
        Form.BLOCK,
        expression=SCHEDULER_CONFIG,
    ),
    Slot(
        "ConfigMap",
        "berth-descheduler-config",
        ("data", "descheduler-config.yaml"),
        "descheduler.config",
        Form.BLOCK,
    ),
    Slot("ConfigMap", "slo-controller-config", ("data",), "sloControllerConfig", Form.BLOCK),
)

NOTES: Final = {
    "namespace": "Where Berth runs. The scheduler profile's leaderElection.resourceNamespace is\n"
    "set to it (a profile of your own must have that line): the controller may hold its\n"
    "Lease there only.",
    "createNamespace": "false: the namespace exists already (helm install --create-namespace, or\n"
    "made by hand); then uninstalling leaves it, and the ValidatingWebhookConfiguration\n"
    "berth-elasticquota that Berth writes at start, owned by the namespace, stays too.",
    "image": "One image for the controller and the agent (`./dev image` builds it); an empty\n"
    "tag is the chart's appVersion, the package version.",
    "controller": "The scheduler, the operators and the descheduler in one process\n"
    "(Deployment berth-controller): one replica leads, the others stand by.",
    "agent": "The node agent (DaemonSet berth-agent), reporting each node's usage into its\n"
    "NodeMetric; enabled: false leaves out its ServiceAccount and RBAC too.",
    "scheduler": "The scheduler profile (KubeSchedulerConfiguration) `berth run` loads.",
    "descheduler": "The descheduler's configuration (DeschedulerConfiguration).",
    "sloControllerConfig": "The data of ConfigMap slo-controller-config: the NodeMetric collect\n"
    "policy (docs/nodemetric.md).",
}


def _chart_yaml() -> str:
    chart = {
        "apiVersion": "v2",
        "name": "berth",
        "description": metadata.metadata("berth")["Summary"],
        "type": "application",
        "version": generated.package_version(),
        "appVersion": generated.package_version(),
    }
    header = f"# Generated by `{COMMAND}`; do not edit.\n"
    return header + yaml.safe_dump(chart, sort_keys=False, width=100)


def _kustomization(directory: Path) -> dict[str, Any]:
    path = directory / KUSTOMIZATION
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    extra = set(document) - KUSTOMIZATION_FIELDS
    if extra:
        raise ChartError(f"{path}: the chart does not reproduce {', '.join(sorted(extra))}")
    return document


def _labels(kustomization: dict[str, Any]) -> dict[str, str]:
    """The labels kustomize adds to every object's metadata."""
    labels: dict[str, str] = {}
    for entry in kustomization.get("labels") or ():
        if entry.get("includeSelectors") or entry.get("includeTemplates"):
            raise ChartError("the chart adds kustomization labels to metadata only")
        labels.update(entry["pairs"])
    return labels


def _documents(path: Path, labels: dict[str, str]) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    for doc in docs:
        doc.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return docs


@dataclass
class _Filler:
    """Replaces slot fields with tokens, collecting each token's template text and each
    value's default; the tokens are swapped for template text after YAML dumping."""

    namespace: str
    values: dict[str, Any]
    tokens: dict[str, tuple[Form, str]]

    def token(self, form: Form, expression: str) -> str:
        token = f"@@{len(self.tokens)}@@"
        self.tokens[token] = (form, expression)
        return token

    def fill(self, doc: dict[str, Any]) -> dict[str, Any]:
        kind, name = doc["kind"], doc["metadata"]["name"]
        for slot in SLOTS:
            if (slot.kind, slot.name) == (kind, name):
                self._fill_slot(doc, slot)
        filled: dict[str, Any] = self._namespaced(doc)
        return filled

    def _fill_slot(self, doc: dict[str, Any], slot: Slot) -> None:
        *parents, last = slot.path
        parent: Any = doc
        for key in parents:
            parent = parent[key]
        if last in parent:
            default = parent[last]
        elif slot.form is Form.OPTIONAL:
            default = slot.empty
        else:
            raise ChartError(f"{slot.kind} {slot.name} has no {'.'.join(map(str, slot.path))}")
        _set(self.values, slot.value, slot.convert(default) if slot.convert else default)
        parent[last] = self.token(slot.form, slot.template_expression())

    def _namespaced(self, node: Any) -> Any:
        """Every mention of the manifests' namespace becomes the ``namespace`` value."""
        if node == self.namespace:
            return self.token(Form.INLINE, ".Values.namespace")
        if isinstance(node, dict):
            return {key: self._namespaced(value) for key, value in node.items()}
        if isinstance(node, list):
            return [self._namespaced(value) for value in node]
        return node


def _set(values: dict[str, Any], dotted: str, value: Any) -> None:
    """Sets a default; two places giving one value different defaults is an error."""
    *parents, last = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    if isinstance(value, dict) and isinstance(values.get(last), dict):
        for key, item in value.items():
            _set(values[last], key, item)
    elif last in values and values[last] != value:
        raise ChartError(f"{dotted}: the manifests give {values[last]!r} and {value!r}")
    else:
        values[last] = value


# A field of its own (not a list item's) whose whole value is one token.
TOKEN_LINE: Final = re.compile(r"^(?P<indent> *)(?P<key>(?!- )[^\s:][^:]*): '(?P<token>@@\d+@@)'$")
TOKEN: Final = re.compile(r"'(@@\d+@@)'")


def _template_text(doc: dict[str, Any], tokens: dict[str, tuple[Form, str]]) -> str:
    """The dumped object with each token replaced by its template text."""
    out = []
    for line in yaml.safe_dump(doc, sort_keys=False, width=100).splitlines():
        match = TOKEN_LINE.match(line)
        form, expression = tokens[match["token"]] if match else (Form.INLINE, "")
        if match and form is Form.BLOCK:
            line = (
                f"{{{{- toYaml (dict {_key(match)} ({expression})) | nindent {_indent(match)} }}}}"
            )
        elif match and form is Form.OPTIONAL:
            line = (
                f"{{{{- with {expression} }}}}\n"
                f"{{{{- toYaml (dict {_key(match)} .) | nindent {_indent(match)} }}}}\n"
                "{{- end }}"
            )
        out.append(TOKEN.sub(lambda m: _inline(tokens[m[1]]), line))
    return "\n".join(out) + "\n"


def _key(match: re.Match[str]) -> str:
    """The field's name as a template string literal."""
    return json.dumps(yaml.safe_load(match["key"]))


def _indent(match: re.Match[str]) -> int:
    return len(match["indent"])


def _inline(token: tuple[Form, str]) -> str:
    form, expression = token
    if form is not Form.INLINE:
        raise ChartError(f"a {form.value} value must be a field of its own: {expression}")
    return f"{{{{ {expression} }}}}"


def _condition(doc: dict[str, Any]) -> str | None:
    if doc["kind"] == "Namespace":
        return ".Values.createNamespace"
    if doc["metadata"]["name"] == AGENT:
        return ".Values.agent.enabled"
    return None


def _template(docs: list[dict[str, Any]], filler: _Filler, source: str) -> str:
    parts = []
    for doc in docs:
        condition = _condition(doc)
        text = _template_text(filler.fill(copy.deepcopy(doc)), filler.tokens)
        parts.append(f"{{{{- if {condition} }}}}\n{text}{{{{- end }}}}\n" if condition else text)
    header = f"{{{{- /* Generated from manifests/{source} by `{COMMAND}`; do not edit. */}}}}\n"
    return header + "---\n".join(parts)


def _crds(directory: Path, labels: dict[str, str]) -> dict[str, str]:
    files = {}
    for name in _kustomization(directory)["resources"]:
        (crd,) = _documents(directory / name, labels)
        if crd["kind"] != "CustomResourceDefinition":
            raise ChartError(f"{directory / name}: not a CustomResourceDefinition")
        body = yaml.safe_dump(crd, sort_keys=False, allow_unicode=True, width=100)
        files[f"crds/{name}"] = f"# Copied from crds/{name} by `{COMMAND}`; do not edit.\n{body}"
    return files


def _values_yaml(values: dict[str, Any]) -> str:
    missing = set(values) ^ set(NOTES)
    if missing:
        raise ChartError(f"values without a note, or notes without a value: {sorted(missing)}")
    parts = [
        "# Berth's chart values; each default is what `kubectl apply -k manifests` installs.\n"
        f"# Generated by `{COMMAND}`:\n"
        "# edit manifests/, then regenerate.\n"
    ]
    for key, note in NOTES.items():
        comment = "".join(f"# {line}\n" for line in note.splitlines())
        body = yaml.dump(
            {key: values[key]}, Dumper=generated.LiteralDumper, sort_keys=False, width=100
        )
        parts.append(f"\n{comment}{body}")
    return "".join(parts)


def expected_files(manifests: Path = MANIFESTS) -> dict[str, str]:
    """Path in the chart to content, for everything generated."""
    kustomization = _kustomization(manifests)
    labels = _labels(kustomization)
    files = {"Chart.yaml": _chart_yaml()}
    sources: list[tuple[str, list[dict[str, Any]]]] = []
    for entry in kustomization["resources"]:
        path = manifests / entry
        if path.is_dir():
            files.update(_crds(path, labels))
        else:
            sources.append((entry, _documents(path, labels)))
    namespaces = [d for _, docs in sources for d in docs if d["kind"] == "Namespace"]
    if len(namespaces) != 1:
        raise ChartError(f"the manifests make {len(namespaces)} namespaces, not one")
    namespace = namespaces[0]["metadata"]["name"]
    values: dict[str, Any] = {
        "namespace": namespace,
        "createNamespace": True,
        "agent": {"enabled": True},
    }
    filler = _Filler(namespace, values, {})
    for entry, docs in sources:
        files[f"templates/{entry}"] = _template(docs, filler, entry)
    files["values.yaml"] = _values_yaml(values)
    return files


def _generated(chart: Path) -> Iterator[Path]:
    for folder in ("templates", "crds"):
        if (chart / folder).is_dir():
            yield from sorted((chart / folder).iterdir())


def write(chart: Path, manifests: Path = MANIFESTS) -> None:
    """Writes the chart; files a generation no longer makes are removed."""
    expected = expected_files(manifests)
    for path in _generated(chart):
        if str(path.relative_to(chart)) not in expected:
            path.unlink()
    for name, text in expected.items():
        path = chart / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def check(chart: Path, manifests: Path = MANIFESTS) -> list[str]:
    """Problems with the chart (stale, missing, unexpected files); empty if none."""
    expected = expected_files(manifests)
    problems = []
    for name, text in expected.items():
        path = chart / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs from what manifests/ and crds/ generate")
    problems.extend(
        f"{path}: not generated from manifests/"
        for path in _generated(chart)
        if str(path.relative_to(chart)) not in expected
    )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``--write DIR`` regenerates the chart; ``--check DIR`` exits 1 when it is stale."""
    return generated.main(
        argv,
        command=COMMAND,
        description="Generate Berth's Helm chart from manifests/ and crds/.",
        write=write,
        problems=check,
    )


if __name__ == "__main__":
    raise SystemExit(main())
