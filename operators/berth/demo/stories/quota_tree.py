"""A quota tree (docs/elasticquota.md, the two-level walk-through): a department with two
teams sharing its 8 GPUs by weight; team-a borrows idle team-b's share, and gives it back
through Reservations held for team-b's pods when team-b's demand returns."""

from __future__ import annotations

from typing import Any

import yaml

from berth.demo.console import Console, check, eventually
from berth.demo.install import RESERVING_SCHEDULER
from berth.demo.objects import (
    EXAMPLES,
    POD_COLUMNS,
    allocated_to,
    apply,
    apply_made,
    documents,
    live_pods,
    node_of,
)
from berth.demo.story import Context, Story
from berth.reservation.preemption import reservation_name

WALKTHROUGH = EXAMPLES / "quota-tree"
GPU = "nvidia.com/gpu"
TREE_PREFIX = "quota.scheduling.koordinator.sh/"
NODES = ("tree-gpu-node-1", "tree-gpu-node-2")
TREE_COLUMNS = (
    "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,"
    "MIN GPU:.spec.min.nvidia\\.com/gpu,MAX GPU:.spec.max.nvidia\\.com/gpu,"
    "REQUEST GPU:.status.request.nvidia\\.com/gpu,RUNTIME GPU:.status.runtime.nvidia\\.com/gpu,"
    "USED GPU:.status.used.nvidia\\.com/gpu"
)
NODES_READY = 120.0


def play(ctx: Context) -> None:
    workloads = {d["metadata"]["namespace"]: d for d in documents(WALKTHROUGH / "workloads.yaml")}
    for doc in workloads.values():  # the profile that reserves before it evicts
        doc["spec"]["template"]["spec"]["schedulerName"] = RESERVING_SCHEDULER
    console = ctx.console
    _no_other_quotas(console)
    try:
        ctx.say("research (max 8) over team-a, team-b (min 2, max 8, weights 8, 16); 10 GPUs")
        apply(console, WALKTHROUGH / "gpu-nodes.yaml")
        eventually("the GPU nodes Ready and untainted", lambda: _nodes_ready(console), NODES_READY)
        apply(console, WALKTHROUGH / "quotas.yaml")

        ctx.say("team-b is idle: team-a borrows its share, up to the department's 8")
        _apply_trainers(console, workloads["team-a"])
        _settle(console, {"team-a": (8, 0, "8", "8")})
        console.show("get", "elasticquotas", "-A", "-o", TREE_COLUMNS)

        ctx.say("team-b's demand returns: runtimes become 3 and 5 (weights 8 : 16); each GPU")
        ctx.say("  team-b gets is reclaimed from team-a and held for it by a Reservation first")
        _apply_trainers(console, workloads["team-b"])
        _settle(console, {"team-a": (3, 5, "3", "3"), "team-b": (5, 3, "5", "5")}, 150.0)
        console.show("get", "elasticquotas", "-A", "-o", TREE_COLUMNS)
        console.show("-n", "team-b", "get", "events", "--field-selector",
                     "reason=ReservedForPreemption")  # fmt: skip
        held = console.get_json(
            "events", "-n", "team-b", "--field-selector", "reason=ReservedForPreemption"
        )["items"]
        preempted = console.get_json(
            "events", "-n", "team-a", "--field-selector", "reason=Preempted"
        )["items"]
        victims = {e["involvedObject"]["name"] for e in preempted}
        check(len(victims) == 5, f"{len(victims)} pods of team-a reclaimed, not 5")
        reclaimers = {e["involvedObject"]["name"] for e in held}
        check(
            len(reclaimers) >= 5,
            f"only {len(reclaimers)} team-b pods had a Reservation made before the reclaim",
        )
        # What each reclaim freed went to the pod it was freed for, through its Reservation.
        console.show("-n", "team-b", "get", "pods", "-l", "app=trainer", "-o", POD_COLUMNS)
        bound = [p for p in live_pods(console, "team-b", "-l", "app=trainer") if node_of(p)]
        strays = [
            p["metadata"]["name"]
            for p in bound
            if allocated_to(p)
            != reservation_name("team-b", p["metadata"]["name"], p["metadata"]["uid"])
        ]
        check(not strays, f"team-b pods bound without their own Reservation: {strays}")
    finally:
        # Children before their parent (the admission webhook refuses deleting a quota
        # that has children), then the namespaces with their Deployments and pods, then
        # the nodes: the files' objects in reverse order.
        for file in ("quotas.yaml", "gpu-nodes.yaml"):
            docs = list(yaml.safe_load_all((WALKTHROUGH / file).read_text()))
            for doc in reversed([d for d in docs if d]):
                console.run("delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump(doc))


def _apply_trainers(console: Console, doc: dict[str, Any]) -> None:
    team = doc["metadata"]["namespace"]
    note = f"{team}'s trainers of workloads.yaml, on {RESERVING_SCHEDULER}"
    apply_made(console, doc, note)


def _no_other_quotas(console: Console) -> None:
    """Other tree quotas would share the root and change the walk-through's numbers (flat
    quotas do not: their pods here ask for no GPUs)."""

    def in_tree(quota: dict[str, Any]) -> bool:
        meta = quota["metadata"]
        keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
        return any(k.startswith(TREE_PREFIX) or k.startswith("berth.io/") for k in keys)

    listed = console.get_json("elasticquotas", "-A")["items"]
    others = [f"{q['metadata']['namespace']}/{q['metadata']['name']}" for q in listed if in_tree(q)]
    check(not others, f"other tree ElasticQuotas exist and would change the numbers: {others}")


def _nodes_ready(console: Console) -> str | None:
    """None once both GPU nodes are Ready without taints (kwok removes them on start)."""
    ready = set()
    for node in console.get_json("nodes", *NODES)["items"]:
        conditions = {(c["type"], c["status"]) for c in node["status"].get("conditions") or ()}
        if ("Ready", "True") in conditions and not node["spec"].get("taints"):
            ready.add(node["metadata"]["name"])
    return None if ready == set(NODES) else f"ready: {sorted(ready)}"


def _settle(
    console: Console, wanted: dict[str, tuple[int, int, str, str]], timeout: float = 90.0
) -> None:
    """Until each team has (bound, pending) trainers and its quota says (runtime, used)."""

    def steady() -> str | None:
        seen = {}
        for namespace in wanted:
            pods = live_pods(console, namespace, "-l", "app=trainer")
            placed = sum(1 for p in pods if node_of(p))
            status = console.get_json("elasticquota", "-n", namespace, namespace).get("status")
            runtime = ((status or {}).get("runtime") or {}).get(GPU)
            used = ((status or {}).get("used") or {}).get(GPU)
            seen[namespace] = (placed, len(pods) - placed, runtime, used)
        return None if seen == wanted else f"(bound, pending, runtime, used) {seen} != {wanted}"

    eventually("the teams' pods and quotas settled", steady, timeout)


STORY = Story("i", "a quota tree: sharing by weight, borrowing given back (two teams)", play)
