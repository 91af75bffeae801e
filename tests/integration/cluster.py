"""Test helpers that act on the real cluster: kwok nodes, pods, a scheduler per test."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    SchedulingV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from berth.kube.client import succeeded
from berth.localcluster.nodes import kwok_node
from berth.scheduler.config import SchedulerConfiguration, parse
from berth.scheduler.service import Scheduler
from tests.support import eventually

NOT_READY_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


class Nodes:
    """kwok nodes made for one test and deleted after it."""

    def __init__(self, api: ApiClient, prefix: str) -> None:
        self.core = CoreV1Api(api)
        self.prefix = prefix
        self.names: list[str] = []

    async def add(self, suffix: str, **kwargs: Any) -> str:
        name = f"{self.prefix}-{suffix}"
        await self.core.create_node(kwok_node(name, **kwargs))
        self.names.append(name)

        async def ready() -> bool:
            """Ready, and the controller manager has lifted its not-ready taint."""
            node = await self.core.read_node(name)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            taints = {t.key for t in node.spec.taints or []}
            return conditions.get("Ready") == "True" and not taints & NOT_READY_TAINTS

        await eventually(ready)
        return name

    async def delete_all(self) -> None:
        """The nodes, and first their pods at once: a pod whose node is gone waits for the
        controller manager's orphan collection, which keeps its namespace terminating."""
        for name in self.names:
            pods = await self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}"
            )
            for pod in pods.items:
                with contextlib.suppress(ApiException):
                    await self.core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                    )
            with contextlib.suppress(ApiException):
                await self.core.delete_node(name)


def pod_body(
    name: str,
    scheduler: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "c", "image": "registry.local/app", "resources": {"requests": requests}}
            ],
            **spec,
        },
    }
    if priority_class is not None:
        body["spec"]["priorityClassName"] = priority_class
    return body


def numa_topology(node: str, available: Sequence[str]) -> dict[str, Any]:
    """A NodeResourceTopology as a topology updater reports it: single-numa-node at
    container scope, a zone of 4 cpu per ``available`` entry, with that much free."""
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
        ],
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "4", "allocatable": "4", "available": cpu}
                ],
            }
            for i, cpu in enumerate(available)
        ],
    }


async def only_these_quotas(api: ApiClient, namespaces: set[str], within: float = 120.0) -> None:
    """Wait until every ElasticQuota left is in ``namespaces``: quotas of earlier tests
    (their namespaces still being deleted) change the sum of mins and the drawn tree."""
    custom = CustomObjectsApi(api)

    async def alone() -> bool:
        listed = await custom.list_cluster_custom_object(
            "scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"
        )
        return all(q["metadata"]["namespace"] in namespaces for q in listed["items"])

    await eventually(alone, within=within)


class PriorityClasses:
    """PriorityClasses made for one test (the API server sets pods' priority from them)."""

    def __init__(self, api: ApiClient, prefix: str) -> None:
        self.api = SchedulingV1Api(api)
        self.prefix = prefix
        self.names: list[str] = []

    async def add(self, suffix: str, value: int) -> str:
        name = f"{self.prefix}-{suffix}"
        await self.api.create_priority_class(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
        self.names.append(name)
        await self._admitted(name)
        return name

    async def _admitted(self, name: str) -> None:
        """Until the API server's priority admission has the class in its cache, a pod naming
        it is refused ("no PriorityClass with name ... was found"): ask with a dry run."""
        core = CoreV1Api(self.api.api_client)
        probe = pod_body("priority-probe", "nobody", priority_class=name)

        async def admitted() -> bool:
            try:
                await core.create_namespaced_pod("default", probe, dry_run="All")
            except ApiException as err:
                if err.status != 403 or "PriorityClass" not in (err.body or ""):
                    raise
                return False
            return True

        await eventually(admitted)

    async def delete_all(self) -> None:
        for name in self.names:
            with contextlib.suppress(ApiException):
                await self.api.delete_priority_class(name)


class Pods:
    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace

    async def create(self, body: dict[str, Any]) -> None:
        await self.core.create_namespaced_pod(self.namespace, body)

    async def get(self, name: str) -> Any:
        return await self.core.read_namespaced_pod(name, self.namespace)

    async def node_of(self, name: str) -> str | None:
        return (await self.get(name)).spec.node_name  # type: ignore[no-any-return]

    async def wait_bound(self, name: str, within: float = 30.0) -> str:
        async def bound() -> bool:
            return bool(await self.node_of(name))

        await eventually(bound, within)
        return str(await self.node_of(name))

    async def events(self, name: str, reason: str | None = None) -> list[Any]:
        events = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        )
        return [e for e in events.items if reason is None or e.reason == reason]

    async def wait_event(self, name: str, reason: str, within: float = 30.0) -> str:
        """The message of the latest event with that reason about the pod."""

        async def seen() -> bool:
            return bool(await self.events(name, reason))

        await eventually(seen, within)
        latest = sorted(await self.events(name, reason), key=lambda e: e.last_timestamp)[-1]
        return str(latest.message)

    async def wait_message(self, name: str, expected: str, within: float = 30.0) -> None:
        """Until the PodScheduled condition says exactly ``expected``."""
        last: list[str] = []

        async def says() -> bool:
            pod = await self.get(name)
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled":
                    last[:] = [condition.message or ""]
                    return bool(condition.message == expected)
            return False

        try:
            await eventually(says, within)
        except AssertionError as err:
            raise AssertionError(f"PodScheduled message {last} != {expected!r}") from err

    async def delete(self, name: str) -> None:
        await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)


def config_for(scheduler_name: str, extra: dict[str, Any] | None = None) -> SchedulerConfiguration:
    profile: dict[str, Any] = {"schedulerName": scheduler_name, **(extra or {})}
    return parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"qps": 200, "burst": 400},
            "podInitialBackoffSeconds": 0.5,
            "podMaxBackoffSeconds": 2,
            "profiles": [profile],
        }
    )


@contextlib.asynccontextmanager
async def running(api: ApiClient, config: SchedulerConfiguration) -> AsyncIterator[Scheduler]:
    """A Scheduler in this event loop until the block ends."""
    scheduler = Scheduler(api, config)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        await asyncio.wait_for(scheduler.wait_synced(), 30)
        yield scheduler
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def status_message(err: ApiException) -> str:
    return str(json.loads(err.body or b"{}").get("message", ""))


class DeniedBindings:
    """A ValidatingAdmissionPolicy (and its binding) that denies, in one namespace, every
    pod binding for which ``allowed`` (a CEL expression over ``request`` and ``object``,
    the Binding) is false, with ``message``: a binding that keeps failing on purpose."""

    def __init__(self, api: ApiClient, namespace: str, name: str, allowed: str, message: str):
        self.admission = AdmissionregistrationV1Api(api)
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.name = name
        self.allowed = allowed
        self.message = message

    async def __aenter__(self) -> DeniedBindings:
        await self.admission.create_validating_admission_policy(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": self.name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods/binding"],
                            }
                        ]
                    },
                    "validations": [{"expression": self.allowed, "message": self.message}],
                },
            }
        )
        await self.admission.create_validating_admission_policy_binding(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": self.name},
                "spec": {
                    "policyName": self.name,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                        }
                    },
                },
            }
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.lift()

    async def in_force(self, pod: str, node: str, within: float = 30.0) -> None:
        """Until a dry-run binding of ``pod`` to ``node`` (one the policy denies) is denied:
        admission policies take effect asynchronously."""
        probe = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

        async def denied() -> bool:
            try:
                await succeeded(
                    self.core.create_namespaced_pod_binding(
                        pod, self.namespace, probe, dry_run="All", _preload_content=False
                    )
                )
            except ApiException as err:
                return self.message in status_message(err)
            return False

        await eventually(denied, within)

    async def lift(self) -> None:
        """Delete the policy and its binding (either may be gone already)."""
        for delete in (
            self.admission.delete_validating_admission_policy_binding,
            self.admission.delete_validating_admission_policy,
        ):
            with contextlib.suppress(ApiException):
                await delete(self.name)
