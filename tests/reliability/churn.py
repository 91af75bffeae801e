"""Randomized load for the reliability tests: pods of random sizes and priorities created
and deleted, some tolerating a dedicated taint, some with required node affinity to a zone;
some that must not share a zone with each other (required pod anti-affinity), some that
must spread over zones (DoNotSchedule, maxSkew 1); quotas; reservations that expire soon
or outlive the run, some taken by their owners, some on nodes only reservations
tolerate; gangs (scheduler-plugins' PodGroups and Koordinator's gang annotations) of 2 to
6 members at least, some with more, a quarter of them of 4-CPU members that compete for
what the other pods leave, deleted whole or a member at a time; a quota tree (a parent
over two children, one with a borrowing limit, one with a lending limit) whose children
take turns lending their min to each other and taking it back by reclaim; nodes tainted,
cordoned and uncordoned, deleted and added; a quarter of the nodes with a NodeResourceTopology
(two NUMA zones of 4 CPUs, single-numa-node) written once before the node, and some pods
Guaranteed (whole CPUs, limits only) that must then fit one zone; two ReplicaSets (one
with a PodDisruptionBudget) on steady nodes the churn never deletes, whose pods
PodMigrationJobs move every few seconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from tests.integration.cluster import Nodes, PriorityClasses, numa_topology, pod_body
from tests.reliability.objects import demand
from tests.support import eventually

SIZES = ("500m", "1", "2", "4")
ZONES = ("a", "b", "c")
ZONE = "berth.test/zone"
DEDICATED = {"key": "berth.test/dedicated", "value": "batch", "effect": "NoSchedule"}
QUARANTINE = {"key": "berth.test/quarantine", "value": "", "effect": "NoExecute"}
# Nodes kept for reservations (no pod tolerates the taint, half the reservations do): room
# that pods do not take, so a reservation some node could take is there to be placed
# whatever the pods' pressure, and one left Pending there is seen as such.
RESERVED = {"key": "berth.test/reserved", "value": "", "effect": "NoSchedule"}
GANG_WAIT_SECONDS = 3
SOLO = {"berth.test/solo": "yes"}  # at most one such pod per zone (and namespace)
SPREAD = {"berth.test/spread": "yes"}  # spread over the zones, skew at most 1
GANG_SIZES = ("500m", "1", "2")
LARGE = "4"  # a large gang's members: 12 to 24 CPUs a gang, several nodes' worth
TREE = "quota.scheduling.koordinator.sh/"
# How long each turn of the tree's children lasts: one lends while the other borrows,
# then the lender's pods come back and reclaim (two turns), then they swap roles.
TREE_TURN_SECONDS = 7.0
# The flat quotas' min and max in CPUs (each, up to 20 nodes; in proportion beyond).
FLAT_MIN_CPUS = 12
FLAT_MAX_CPUS = 20
NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
NUMA_LABEL = "berth.test/numa"  # on the nodes with a NodeResourceTopology
# Tainted so that only the Guaranteed pods go there (those tolerate it and prefer them):
# the zones, not the other pods, are what keeps them from piling up.
NUMA_TAINT = {"key": NUMA_LABEL, "value": "", "effect": "NoSchedule"}
GUARANTEED_CPUS = ("1", "2", "3")
# Nodes the churn never deletes nor taints, the only ones the ReplicaSets' pods (and so
# their migrations' reservations) go to: nothing but a migration takes those pods down (a
# deleted node would, and their priority keeps others from preempting them), which is
# what the migration judge's maxUnavailable rule is about.
STEADY_LABEL = "berth.test/steady"
# The ReplicaSets (name, replicas) and the PodDisruptionBudget (name, minAvailable).
WORKLOADS = (("web", 5), ("api", 4))
BUDGET = ("api", 3)
MIGRATING = {"berth.test/migrating": "yes"}  # on the ReplicaSets' pods
PMJ = ("scheduling.koordinator.sh", "v1alpha1", "podmigrationjobs")
# A job still waiting (for arbitration, its reservation, its eviction) fails with Timeout
# after this: at rest every job has ended.
JOB_TTL_SECONDS = 60


@dataclass
class Gang:
    namespace: str
    name: str
    podgroup: bool  # a PodGroup, else Koordinator's annotations
    members: list[str]


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
    spread: set[tuple[str, str]] = field(default_factory=set)  # pods with SPREAD
    reservations: list[str] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    cordoned: set[str] = field(default_factory=set)
    gangs: list[Gang] = field(default_factory=list)
    # Gangs at once at most: one that cannot be placed waits whole, and an ever growing
    # number of them would be a backlog of their own.
    max_gangs: int = 12
    node_deletions: bool = True
    # At most this many pods at once (None: no bound). Creations outnumber deletions, so
    # over a long run the Pending backlog would grow without end: the long variants keep
    # the short ones' pressure for longer, not an ever larger overload.
    max_pods: int | None = None
    # The quota tree's two children's namespaces (none: no tree); its parent lives in the
    # free namespace, which it leaves quota-less (a parent holds no pods).
    tree_namespaces: list[str] = field(default_factory=list)
    flat_scale: int = 1  # the flat quotas' min and max, in FLAT_*_CPUS
    _turns: int = -1
    _turn_ends: float = 0.0
    topologies: set[str] = field(default_factory=set)  # the NodeResourceTopologies made
    steady: set[str] = field(default_factory=set)  # nodes never deleted
    jobs: list[str] = field(default_factory=list)  # the PodMigrationJobs made
    migrated: set[str] = field(default_factory=set)  # pods a job was made for, by uid

    def __post_init__(self) -> None:
        self.core = CoreV1Api(self.api)
        self.custom = CustomObjectsApi(self.api)
        self.nodes = Nodes(self.api, self.group)
        self.classes = PriorityClasses(self.api, self.group)

    async def setup(self, nodes: int) -> None:
        for value, name in ((0, "low"), (1000, "mid"), (100000, "high")):
            self.priorities.append(await self.classes.add(name, value))
        await asyncio.gather(*(self.add_node() for _ in range(nodes)))
        # 12 and 20 CPUs each up to 20 nodes, in proportion beyond: a larger cluster keeps
        # the quotas' share of it, not a fixed few pods of each quota admitted at a time
        # and the rest retried without end.
        scale = self.flat_scale = max(1, nodes // 20)
        for namespace in self.quota_namespaces:
            quota = {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "churn"},
                "spec": {
                    "min": {"cpu": str(FLAT_MIN_CPUS * scale)},
                    "max": {"cpu": str(FLAT_MAX_CPUS * scale)},
                },
            }
            await self.custom.create_namespaced_custom_object(
                "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
            )
        if self.tree_namespaces:
            await self.create_tree()
        await self.create_workloads()

    async def create_workloads(self) -> None:
        """The ReplicaSets the migrations move pods of, in the quota-less namespace, at the
        highest priority, and a PodDisruptionBudget on one of them."""
        apps = AppsV1Api(self.api)
        for name, replicas in WORKLOADS:
            labels = {"app": f"{self.group}-{name}", **MIGRATING}
            template = pod_body(
                "",
                self.scheduler,
                cpu="500m",
                memory="128Mi",
                labels=labels,
                priority_class=self.priorities[-1],
                nodeSelector={"berth.test/group": self.group, STEADY_LABEL: "yes"},
                terminationGracePeriodSeconds=1,
            )
            del template["metadata"]["name"]
            body = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": template["metadata"], "spec": template["spec"]},
                },
            }
            await apps.create_namespaced_replica_set(self.free_namespace, body)
        name, least = BUDGET
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {
                "minAvailable": least,
                "selector": {"matchLabels": {"app": f"{self.group}-{name}"}},
            },
        }
        await PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(
            self.free_namespace, budget
        )

    async def create_tree(self) -> None:
        """A department of min and max 16 CPUs (its children's mins add up to its min, and
        it is at its max whenever they want more together) over two teams of min 8 and
        max 16: the first may borrow at most 4 beyond its min, the second lends at most 6
        of its min. Tree quotas are known by name across the cluster: each carries the
        churn's group. The same size at any scale: the root's share is the cluster less
        what pods outside the tree hold, and those fill a large cluster as they fill a
        small one; scaled with the nodes (the long variant's 176 CPUs) no child ever got
        past its min, and the tree's borrowing and reclaim went unexercised."""
        parent = f"{self.group}-dept"
        first, second = self.tree_namespaces
        quotas = [
            (self.free_namespace, parent, {TREE + "is-parent": "true"}, {}, 16),
            (first, f"{self.group}-a", {TREE + "parent": parent},
             {"berth.io/borrowing-limit": json.dumps({"cpu": "4"})}, 8),
            (second, f"{self.group}-b", {TREE + "parent": parent},
             {"berth.io/lending-limit": json.dumps({"cpu": "6"})}, 8),
        ]  # fmt: skip
        for namespace, name, labels, notes, least in quotas:
            quota = {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": name, "labels": labels, "annotations": notes},
                "spec": {"min": {"cpu": str(least)}, "max": {"cpu": "16"}},
            }
            await self.custom.create_namespaced_custom_object(
                "scheduling.sigs.k8s.io", "v1alpha1", namespace, "elasticquotas", quota
            )

    async def tree_turn(self) -> None:
        """A new turn of the tree's children when the last one is over. In turn 2k the
        lender's pods are deleted and the other child borrows its min; in turn 2k+1 the
        lender's pods come back, within its min, and reclaim; the children swap roles every
        two turns."""
        now = asyncio.get_running_loop().time()
        if not self.tree_namespaces or now < self._turn_ends:
            return
        self._turns += 1
        self._turn_ends = now + TREE_TURN_SECONDS
        self.counts["tree turns"] += 1
        if self._turns % 2:
            return
        lender = self._lender()
        gone = [(ns, name) for ns, name in self.pods if ns == lender]
        self.pods = [p for p in self.pods if p[0] != lender]
        self.spread -= set(gone)
        await asyncio.gather(
            *(self.core.delete_namespaced_pod(n, ns, grace_period_seconds=0) for ns, n in gone),
            return_exceptions=True,
        )
        self.counts["pods deleted"] += len(gone)

    def _lender(self) -> str:
        return self.tree_namespaces[(self._turns // 2) % 2]

    def _tree_receiver(self) -> list[str]:
        """The tree's child that gets pods this turn: the borrower, then the lender."""
        if not self.tree_namespaces or self._turns < 0:
            return []
        lender = self._lender()
        borrower = next(n for n in self.tree_namespaces if n != lender)
        return [lender if self._turns % 2 else borrower]

    async def add_node(self) -> None:
        self.counts["nodes added"] += 1
        index = self.counts["nodes added"]
        roll = self.rng.random()
        taints = [DEDICATED] if roll < 0.25 else [QUARANTINE] if roll < 0.35 else []
        if index % 7 == 3:
            taints = [RESERVED]
        labels = {"berth.test/group": self.group, "berth.test/zone": ZONES[index % 3]}
        if index % 4 == 1:
            await self.create_topology(f"{self.nodes.prefix}-n{index}")
            labels[NUMA_LABEL] = "yes"
            taints = [NUMA_TAINT]
        elif index % 5 == 2 and index % 7 != 3:
            labels[STEADY_LABEL] = "yes"
            taints = []
        name = await self.nodes.add(
            f"n{index}",
            labels=labels,
            taints=taints,
            allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"},
        )
        if STEADY_LABEL in labels:
            self.steady.add(name)

    async def create_topology(self, node: str) -> None:
        """The node's NUMA zones as a topology updater would report them before any pod
        runs there, and never again: every exclusive pod placed there is pending for the
        scheduler's ledger."""
        body = numa_topology(node, ["4", "4"])
        await self.custom.create_cluster_custom_object(*NRT, body)
        self.topologies.add(node)
        self.counts["numa nodes added"] += 1

    async def cordon(self, unschedulable: bool) -> None:
        """Cordon a schedulable node, or uncordon a cordoned one."""
        candidates = [n for n in self.nodes.names if (n in self.cordoned) != unschedulable]
        if not candidates or (unschedulable and len(self.cordoned) >= len(self.nodes.names) // 4):
            return
        name = self.rng.choice(candidates)
        with contextlib.suppress(ApiException):
            await self.core.patch_node(name, {"spec": {"unschedulable": unschedulable}})
            self.counts["nodes cordoned" if unschedulable else "nodes uncordoned"] += 1
            (self.cordoned.add if unschedulable else self.cordoned.discard)(name)

    async def delete_node(self) -> None:
        candidates = [n for n in self.nodes.names if n not in self.steady]
        if len(candidates) <= 2 or not self.node_deletions:
            return
        name = self.rng.choice(candidates)
        self.nodes.names.remove(name)
        self.cordoned.discard(name)
        with contextlib.suppress(ApiException):
            await self.core.delete_node(name)
        if name in self.topologies:
            self.topologies.discard(name)
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(*NRT, name)
        self.counts["nodes deleted"] += 1

    def _pod(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeSelector": {"berth.test/group": self.group}}
        labels = dict(labels or {})
        affinity: dict[str, Any] = {}
        if self.rng.random() < 0.3:
            spec["tolerations"] = [{"key": DEDICATED["key"], "operator": "Exists"}]
        if self.rng.random() < 0.2:
            zones = self.rng.sample(ZONES, 2)
            term = {"matchExpressions": [
                {"key": "berth.test/zone", "operator": "In", "values": zones}]}  # fmt: skip
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        roll = self.rng.random()
        if roll < 0.08:
            labels.update(SOLO)
            term = {"labelSelector": {"matchLabels": SOLO}, "topologyKey": ZONE}
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        elif roll < 0.25:  # enough of them at once, per namespace, for a skew to arise
            labels.update(SPREAD)
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": "berth.test/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": SPREAD},
                }
            ]
        if affinity:
            spec["affinity"] = affinity
        body = pod_body(
            name,
            self.scheduler,
            cpu=self.rng.choice(SIZES),
            memory="256Mi",
            labels=labels,
            priority_class=self.rng.choice(self.priorities),
            terminationGracePeriodSeconds=0,
            **spec,
        )
        if self.rng.random() < 0.15:
            # Guaranteed (requests default to the limits), preferring the NUMA nodes as
            # a workload that wants aligned CPUs would: they crowd there, and only the
            # zones keep them from piling up.
            limits = {"cpu": self.rng.choice(GUARANTEED_CPUS), "memory": "256Mi"}
            body["spec"]["containers"][0]["resources"] = {"limits": limits}
            tolerate = {"key": NUMA_TAINT["key"], "operator": "Exists"}
            body["spec"]["tolerations"] = [*body["spec"].get("tolerations", []), tolerate]
            numa = {"matchExpressions": [{"key": NUMA_LABEL, "operator": "Exists"}]}
            node_affinity = body["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 100, "preference": numa}
            ]
            self.counts["guaranteed pods created"] += 1
        return body

    async def create_pod(self) -> None:
        namespace = self.rng.choice(
            [*self.quota_namespaces, self.free_namespace, *self._tree_receiver()]
        )
        self.counts["pods created"] += 1
        name = f"p{self.counts['pods created']}"
        labels = None
        if self.reservations and self.rng.random() < 0.2:
            labels = {"app": self.rng.choice(self.reservations)}  # a would-be owner
        body = self._pod(name, labels)
        await self.core.create_namespaced_pod(namespace, body)
        self.pods.append((namespace, name))
        if SPREAD.items() <= body["metadata"]["labels"].items():
            self.spread.add((namespace, name))

    async def lend_and_reclaim(self, borrowed_within: float = 60.0) -> None:
        """After the load, the flat quotas' reclaim made certain rather than left to the
        load's chance: the second quota's pods (its gangs' too) and the quota-less ones
        deleted, the first quota given pods up to its max (borrowing the second's min),
        then the second's pods made again, within its min. Only a reclaim places those
        that wait."""
        if len(self.quota_namespaces) < 2:
            return
        borrower, lender = self.quota_namespaces[:2]
        gone = [(ns, n) for ns, n in self.pods if ns in (lender, self.free_namespace)]
        self.pods = [p for p in self.pods if p not in gone]
        self.spread -= set(gone)
        self.gangs = [g for g in self.gangs if g.namespace != lender]
        await asyncio.gather(
            *(self.core.delete_namespaced_pod(n, ns, grace_period_seconds=0) for ns, n in gone),
            return_exceptions=True,
        )
        # Its gangs' members too: nothing of the lender may hold its min.
        await self.core.delete_collection_namespaced_pod(lender, grace_period_seconds=0)
        self.counts["pods deleted"] += len(gone)
        await self._plain_pods(borrower, "borrow", FLAT_MAX_CPUS * self.flat_scale)
        least = FLAT_MIN_CPUS * self.flat_scale

        async def borrowed() -> bool:
            return await self._bound_cpus(borrower) > least

        await eventually(borrowed, within=borrowed_within)
        await self._plain_pods(lender, "within-min", least)
        self.counts["finale pods made within min"] += least

    async def _plain_pods(self, namespace: str, prefix: str, count: int) -> None:
        """``count`` pods of 1 CPU, nothing else asked, at the lowest priority."""
        for index in range(count):
            name = f"{prefix}-{index}"
            body = pod_body(
                name,
                self.scheduler,
                cpu="1",
                memory="256Mi",
                priority_class=self.priorities[0],
                terminationGracePeriodSeconds=0,
                nodeSelector={"berth.test/group": self.group},
            )
            await self.core.create_namespaced_pod(namespace, body)
            self.pods.append((namespace, name))
            self.counts["pods created"] += 1

    async def _bound_cpus(self, namespace: str) -> Decimal:
        """The CPUs the namespace's bound pods ask, as the checker counts them."""
        raw = await self.core.list_namespaced_pod(namespace, _preload_content=False)
        pods = json.loads(await raw.read()).get("items") or []
        raw.release()
        return sum(
            (
                demand(p["spec"]).get("cpu", Decimal(0))
                for p in pods
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            ),
            Decimal(0),
        )

    async def delete_pod(self) -> None:
        if not self.pods:
            return
        index = self.rng.randrange(len(self.pods))
        # Spread pods live five times longer (services, not batch): a skew shows only
        # against pods that stay long enough to be surely there when another is placed.
        if self.pods[index] in self.spread and self.rng.random() < 0.8:
            return
        namespace, name = self.pods.pop(index)
        self.spread.discard((namespace, name))
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        self.counts["pods deleted"] += 1

    async def create_gang(self) -> None:
        """A PodGroup and its members, or members carrying Koordinator's gang annotations,
        all of one size, priority and tolerations, in one namespace."""
        if len(self.gangs) >= self.max_gangs:
            await self.delete_gang()
            return
        self.counts["gangs created"] += 1
        name = f"g{self.counts['gangs created']}"
        namespace = self.rng.choice([*self.quota_namespaces, self.free_namespace])
        minimum = self.rng.randint(2, 6)
        size = minimum + (self.rng.randint(1, 2) if self.rng.random() < 0.3 else 0)
        large = self.rng.random() < 0.25
        cpu = LARGE if large else self.rng.choice(GANG_SIZES)
        if large:
            minimum = max(minimum, 3)
            size = max(size, minimum)
        podgroup = self.rng.random() < 0.5
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if podgroup:
            labels["scheduling.x-k8s.io/pod-group"] = name
            body = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name},
                # A failed binding is retried for this long (gang/hold.py): the checker's
                # window for one placement (gang_invariants.PLACEMENT_WITHIN) covers it.
                "spec": {"minMember": minimum, "scheduleTimeoutSeconds": GANG_WAIT_SECONDS},
            }
            await self.custom.create_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", namespace, "podgroups", body
            )
        else:
            annotations = {
                "gang.scheduling.koordinator.sh/name": name,
                "gang.scheduling.koordinator.sh/min-available": str(minimum),
                "gang.scheduling.koordinator.sh/total-number": str(size),
                "gang.scheduling.koordinator.sh/waiting-time": f"{GANG_WAIT_SECONDS}s",
            }
        spec: dict[str, Any] = {"nodeSelector": {"berth.test/group": self.group}}
        if self.rng.random() < 0.3:
            spec["tolerations"] = [{"key": DEDICATED["key"], "operator": "Exists"}]
        priority = self.rng.choice(self.priorities)
        members = [f"{name}-{i}" for i in range(size)]
        bodies = []
        for member in members:
            body = pod_body(
                member,
                self.scheduler,
                cpu=cpu,
                memory="256Mi",
                labels=labels,
                priority_class=priority,
                terminationGracePeriodSeconds=0,
                **spec,
            )
            body["metadata"]["annotations"] = annotations
            bodies.append(body)
        await asyncio.gather(*(self.core.create_namespaced_pod(namespace, b) for b in bodies))
        self.gangs.append(Gang(namespace, name, podgroup, members))
        self.counts["gang members created"] += size
        self.counts["large gangs created"] += int(large)

    async def delete_gang(self) -> None:
        """A whole gang (its PodGroup too), or one of its members."""
        if not self.gangs:
            return
        gang = self.rng.choice(self.gangs)
        if len(gang.members) > 1 and self.rng.random() < 0.5:
            member = gang.members.pop(self.rng.randrange(len(gang.members)))
            with contextlib.suppress(ApiException):
                await self.core.delete_namespaced_pod(
                    member, gang.namespace, grace_period_seconds=0
                )
            self.counts["gang members deleted"] += 1
            return
        self.gangs.remove(gang)
        deletions = [
            self.core.delete_namespaced_pod(m, gang.namespace, grace_period_seconds=0)
            for m in gang.members
        ]
        if gang.podgroup:
            deletions.append(
                self.custom.delete_namespaced_custom_object(
                    "scheduling.x-k8s.io", "v1alpha1", gang.namespace, "podgroups", gang.name
                )
            )
        await asyncio.gather(*deletions, return_exceptions=True)
        self.counts["gangs deleted"] += 1

    async def create_reservation(self) -> None:
        self.counts["reservations"] += 1
        name = f"{self.group}-r{self.counts['reservations']}"
        tolerations = [{"key": RESERVED["key"], "operator": "Exists"}]
        body = {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "spec": {
                        "schedulerName": self.scheduler,
                        "nodeSelector": {"berth.test/group": self.group},
                        "tolerations": tolerations if self.rng.random() < 0.5 else [],
                        "containers": [
                            {
                                "name": "c",
                                "resources": {"requests": {"cpu": self.rng.choice(SIZES)}},
                            }
                        ],
                    }
                },
                "owners": [{"labelSelector": {"matchLabels": {"app": name}}}],
                # Half expire during the run; half outlive it, so the at-rest checks see
                # reservations still holding, with owners.
                "ttl": f"{self.rng.randint(5, 20) if self.rng.random() < 0.5 else 3600}s",
                "allocateOnce": self.rng.random() < 0.5,
                "allocatePolicy": self.rng.choice(["Aligned", "Restricted"]),
            },
        }
        await self.custom.create_cluster_custom_object(
            "scheduling.koordinator.sh", "v1alpha1", "reservations", body
        )
        self.reservations.append(name)

    async def create_migration(self) -> None:
        """A PodMigrationJob (ReservationFirst, the default) for a running pod of the
        ReplicaSets no job was made for yet."""
        selector = ",".join(f"{k}={v}" for k, v in MIGRATING.items())
        listed = await self.core.list_namespaced_pod(
            self.free_namespace, label_selector=selector, _preload_content=False
        )
        pods = json.loads(await listed.read()).get("items") or []
        listed.release()
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["uid"] not in self.migrated
        ]
        if not running:
            return
        pod = self.rng.choice(running)
        self.counts["migration jobs created"] += 1
        name = f"{self.group}-m{self.counts['migration jobs created']}"
        body = {
            "apiVersion": f"{PMJ[0]}/{PMJ[1]}",
            "kind": "PodMigrationJob",
            "metadata": {"name": name},
            "spec": {
                "podRef": {"namespace": self.free_namespace, "name": pod["metadata"]["name"]},
                "ttl": f"{JOB_TTL_SECONDS}s",
            },
        }
        await self.custom.create_cluster_custom_object(*PMJ, body)
        self.jobs.append(name)
        self.migrated.add(pod["metadata"]["uid"])

    async def step(self) -> None:
        await self.tree_turn()
        gangs = self.rng.random()
        if gangs < 0.04:
            await self.create_gang()
            return
        if gangs < 0.06:
            await self.delete_gang()
            return
        if gangs < 0.075:  # one every 3 s or so at 25 steps a second
            await self.create_migration()
            return
        roll = self.rng.random()
        if roll < 0.55 and self.max_pods is not None and len(self.pods) >= self.max_pods:
            await self.delete_pod()
        elif roll < 0.55:
            await self.create_pod()
        elif roll < 0.85:
            await self.delete_pod()
        elif roll < 0.92:
            await self.create_reservation()
        elif roll < 0.945:
            await self.delete_node()
        elif roll < 0.97:
            await self.add_node()
        elif roll < 0.985:
            await self.cordon(True)
        else:
            await self.cordon(False)

    async def run(self, seconds: float, per_second: float, stop: asyncio.Event) -> None:
        """Steps at random intervals for ``seconds``, or until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end and not stop.is_set():
            await self.step()
            await asyncio.sleep(self.rng.expovariate(per_second))

    async def close(self) -> None:
        # A job's reservation goes with it (the job owns it); the balancer's jobs too.
        listed = await self.custom.list_cluster_custom_object(*PMJ, _preload_content=False)
        made = [
            j["metadata"]["name"]
            for j in json.loads(await listed.read()).get("items") or []
            if ((j.get("spec") or {}).get("podRef") or {}).get("namespace") == self.free_namespace
        ]
        listed.release()
        for name in {*self.jobs, *made}:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(*PMJ, name)
        for name in self.reservations:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(
                    "scheduling.koordinator.sh", "v1alpha1", "reservations", name
                )
        for name in self.topologies:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(*NRT, name)
        await self.nodes.delete_all()
        await self.classes.delete_all()
