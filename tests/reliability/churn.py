"""Randomized load for the reliability tests: pods of random sizes and priorities created
and deleted, quotas, reservations that expire, nodes deleted and added."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes, PriorityClasses, pod_body

SIZES = ("500m", "1", "2", "4")


@dataclass
class Churn:
    api: ApiClient
    group: str
    scheduler: str
    quota_namespaces: list[str]
    free_namespace: str
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    pods: list[tuple[str, str]] = field(default_factory=list)
    reservations: list[str] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.core = CoreV1Api(self.api)
        self.custom = CustomObjectsApi(self.api)
        self.nodes = Nodes(self.api, self.group)
        self.classes = PriorityClasses(self.api, self.group)

    async def setup(self, nodes: int) -> None:
        for value, name in ((0, "low"), (1000, "mid"), (100000, "high")):
            self.priorities.append(await self.classes.add(name, value))
        await asyncio.gather(*(self.add_node() for _ in range(nodes)))
        for namespace in self.quota_namespaces:
            quota = {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "churn"},
                "spec": {"min": {"cpu": "12"}, "max": {"cpu": "20"}},
            }
            await self.custom.create_namespaced_custom_object(
                "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
            )

    async def add_node(self) -> None:
        self.counts["nodes added"] += 1
        await self.nodes.add(
            f"n{self.counts['nodes added']}",
            labels={"berth.test/group": self.group},
            allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"},
        )

    async def delete_node(self) -> None:
        if len(self.nodes.names) <= 2:
            return
        name = self.rng.choice(self.nodes.names)
        self.nodes.names.remove(name)
        with contextlib.suppress(ApiException):
            await self.core.delete_node(name)
        self.counts["nodes deleted"] += 1

    def _pod(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return pod_body(
            name,
            self.scheduler,
            cpu=self.rng.choice(SIZES),
            memory="256Mi",
            labels=labels,
            priority_class=self.rng.choice(self.priorities),
            nodeSelector={"berth.test/group": self.group},
        )

    async def create_pod(self) -> None:
        namespace = self.rng.choice([*self.quota_namespaces, self.free_namespace])
        self.counts["pods created"] += 1
        name = f"p{self.counts['pods created']}"
        labels = None
        if self.reservations and self.rng.random() < 0.2:
            labels = {"app": self.rng.choice(self.reservations)}  # a would-be owner
        await self.core.create_namespaced_pod(namespace, self._pod(name, labels))
        self.pods.append((namespace, name))

    async def delete_pod(self) -> None:
        if not self.pods:
            return
        namespace, name = self.pods.pop(self.rng.randrange(len(self.pods)))
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        self.counts["pods deleted"] += 1

    async def create_reservation(self) -> None:
        self.counts["reservations"] += 1
        name = f"{self.group}-r{self.counts['reservations']}"
        body = {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "spec": {
                        "schedulerName": self.scheduler,
                        "nodeSelector": {"berth.test/group": self.group},
                        "containers": [
                            {
                                "name": "c",
                                "resources": {"requests": {"cpu": self.rng.choice(SIZES)}},
                            }
                        ],
                    }
                },
                "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
                "ttl": f"{self.rng.randint(5, 20)}s",
                "allocateOnce": self.rng.random() < 0.5,
                "allocatePolicy": self.rng.choice(["Aligned", "Restricted"]),
            },
        }
        await self.custom.create_cluster_custom_object(
            "scheduling.koordinator.sh", "v1alpha1", "reservations", body
        )
        self.reservations.append(name)

    async def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.55:
            await self.create_pod()
        elif roll < 0.85:
            await self.delete_pod()
        elif roll < 0.93:
            await self.create_reservation()
        elif roll < 0.965:
            await self.delete_node()
        else:
            await self.add_node()

    async def run(self, seconds: float, per_second: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await self.step()
            await asyncio.sleep(self.rng.expovariate(per_second))

    async def close(self) -> None:
        for name in self.reservations:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(
                    "scheduling.koordinator.sh", "v1alpha1", "reservations", name
                )
        await self.nodes.delete_all()
        await self.classes.delete_all()
