"""Reading and applying the objects the stories share: the docs' YAML, reservations, pods
and events, as kubectl returns them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from berth.api.quantity import parse_quantity
from berth.demo.console import Console, eventually
from berth.localcluster.paths import REPO_DIR

EXAMPLES = REPO_DIR / "docs" / "examples"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
POD_COLUMNS = (
    "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,RESERVATION-ALLOCATED:"
    ".metadata.annotations.scheduling\\.koordinator\\.sh/reservation-allocated"
)
"""``kubectl get pods -o`` columns that show where each pod went and into which reservation."""
Json = dict[str, Any]


def documents(path: Path) -> list[Json]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def one(docs: list[Json], kind: str) -> Json:
    return next(d for d in docs if d["kind"] == kind)


def apply(console: Console, path: Path, doc: Json | None = None) -> None:
    """``kubectl apply -f`` a docs file, or one document of it (shown as such)."""
    if doc is None:
        console.show("apply", "-f", str(path))
        return
    name = f"{doc['kind']} {doc['metadata']['name']}"
    console.show(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(doc),
        note=f"{name} of {path.relative_to(REPO_DIR)}",
    )


def apply_made(console: Console, doc: Json, note: str) -> None:
    """``kubectl apply -f -`` of an object the story makes itself."""
    console.show("apply", "-f", "-", stdin=yaml.safe_dump(doc), note=note)


def scale_away(console: Console, namespace: str, deployment: str, selector: str) -> None:
    """Scale a Deployment to zero, wait for its pods to go, then delete it.

    Its pods go at once this way. Deleted outright, they would wait for the garbage
    collector, which pauses for up to half a minute after new CRDs are installed.
    """
    found = console.run("-n", namespace, "get", "deployment", deployment, "--ignore-not-found")
    if found:
        console.run("-n", namespace, "scale", f"deployment/{deployment}", "--replicas=0")
        console.run("-n", namespace, "wait", "--for=delete", "pod", "-l", selector, "--timeout=60s")
        console.run("-n", namespace, "delete", "deployment", deployment, "--wait=false")


def status(obj: Json) -> Json:
    return dict(obj.get("status") or {})


def condition(obj: Json, kind: str) -> Json:
    """The condition of that type, or an empty dict."""
    return next((c for c in status(obj).get("conditions") or () if c["type"] == kind), {})


def reservation(console: Console, name: str) -> Json:
    found: Json = console.get_json("reservation", name)
    return found


def wait_phase(console: Console, name: str, phase: str, timeout: float = 60.0) -> Json:
    """The reservation once it is in ``phase``."""
    seen: list[Json] = []

    def there() -> str | None:
        seen[:] = [reservation(console, name)]
        current = status(seen[0])
        return None if current.get("phase") == phase else f"status {current}"

    eventually(f"reservation {name} {phase}", there, timeout)
    return seen[0]


def live_pods(console: Console, namespace: str, *selector: str) -> list[Json]:
    """The namespace's pods that are not being deleted."""
    items = console.get_json("pods", "-n", namespace, *selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def node_of(pod: Json) -> str:
    return str(pod["spec"].get("nodeName") or "")


def allocated_to(pod: Json) -> str:
    """The reservation the pod was bound into, from its annotation, or ''."""
    text = (pod["metadata"].get("annotations") or {}).get(ALLOCATED)
    return str(yaml.safe_load(text)["name"]) if text else ""


def events(console: Console, namespace: str, name: str, reason: str) -> list[Json]:
    """Events about object ``name`` with that reason, oldest first."""
    selector = f"involvedObject.name={name},reason={reason}"
    items: list[Json] = console.get_json("events", "-n", namespace, "--field-selector", selector)[
        "items"
    ]
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def cpu(amount: str) -> Decimal:
    return parse_quantity(amount)


def reported_cpu_percent(console: Console, node: str) -> float:
    """The node's last reported cpu usage, percent of its allocatable."""
    metric = console.get_json("nodemetric", node)
    usage = metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"]
    allocatable = console.get_json("node", node)["status"]["allocatable"]["cpu"]
    return float(100 * cpu(usage) / cpu(allocatable))


def pod(name: str, namespace: str, cpu_request: str, **spec: Any) -> Json:
    """A pod for Berth's scheduler (kwok runs no containers: the image is never pulled)."""
    container = {
        "name": "main",
        "image": "registry.example/app:1.0",
        "resources": {"requests": {"cpu": cpu_request}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulerName": "berth-scheduler", "containers": [container], **spec},
    }


def namespace(name: str) -> Json:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def elastic_quota(name: str, in_namespace: str, cpu_min: str, cpu_max: str) -> Json:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": in_namespace},
        "spec": {"min": {"cpu": cpu_min}, "max": {"cpu": cpu_max}},
    }


def priority_class(name: str, value: int, description: str) -> Json:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": description,
    }
