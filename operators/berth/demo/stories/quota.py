"""Borrowing and reclaim (docs/elasticquota.md, the 10-GPU walk-through): team-a borrows
team-b's idle GPUs up to its max, then team-b takes its min back by preemption."""

from __future__ import annotations

from berth.demo.console import Console, check, eventually
from berth.demo.objects import EXAMPLES, apply, events, live_pods, node_of
from berth.demo.story import Context, Story

WALKTHROUGH = EXAMPLES / "quota-walkthrough"
GPU = "nvidia.com/gpu"
QUOTAS = {"team-a": "quota-a", "team-b": "quota-b"}
GPU_COLUMNS = (
    "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,"
    "USED GPU:.status.used.nvidia\\.com/gpu,MIN GPU:.spec.min.nvidia\\.com/gpu,"
    "MAX GPU:.spec.max.nvidia\\.com/gpu"
)
NODES_READY = 120.0


def play(ctx: Context) -> None:
    console = ctx.console
    _no_other_quotas(console)
    try:
        ctx.say("two nodes of 5 GPUs; quota-a: min 4, max 6; quota-b: min 6, max 8")
        apply(console, WALKTHROUGH / "gpu-nodes.yaml")
        eventually("the GPU nodes Ready and untainted", lambda: _nodes_ready(console), NODES_READY)
        apply(console, WALKTHROUGH / "quotas.yaml")
        apply(console, WALKTHROUGH / "workloads.yaml")
        _settle(console, {"team-a": (4, 0), "team-b": (3, 0)})
        console.show("get", "elasticquotas", "-A")
        console.show("get", "elasticquotas", "-A", "-o", GPU_COLUMNS)

        ctx.say("step 2: team-a wants 7: it borrows 2 of team-b's idle GPUs, up to its max 6")
        console.show("-n", "team-a", "scale", "deployment/trainer", "--replicas=7")
        _settle(console, {"team-a": (6, 1), "team-b": (3, 0)})
        pending = next(p for p in live_pods(console, "team-a") if not node_of(p))
        name = pending["metadata"]["name"]
        eventually(
            f"{name} refused",
            lambda: None if events(console, "team-a", name, "FailedScheduling") else "no event",
        )
        message = events(console, "team-a", name, "FailedScheduling")[-1]["message"]
        check(
            f"is more than Max ({GPU}: 6 used + 1 requested > 6)" in message,
            f"the seventh replica was refused for another reason: {message}",
        )
        console.show("-n", "team-a", "describe", "pod", name, sections=("Events:",))
        eventually(
            "an OverMax event on quota-a",
            lambda: None if events(console, "team-a", "quota-a", "OverMax") else "none yet",
        )
        console.show(
            "-n",
            "team-a",
            "describe",
            "elasticquota",
            "quota-a",
            sections=("Spec:", "Status:", "Events:"),
        )
        console.show("-n", "team-a", "scale", "deployment/trainer", "--replicas=6")
        _settle(console, {"team-a": (6, 0), "team-b": (3, 0)})

        ctx.say("step 3: team-b wants its min of 6 back: one free GPU, then two reclaimed")
        console.show("-n", "team-b", "scale", "deployment/trainer", "--replicas=6")
        _settle(console, {"team-a": (4, 2), "team-b": (6, 0)}, timeout=150)
        console.show("get", "elasticquotas", "-A", "-o", GPU_COLUMNS)
        console.show("-n", "team-a", "get", "events", "--field-selector", "reason=Preempted")
        preempted = console.get_json(
            "events", "-n", "team-a", "--field-selector", "reason=Preempted"
        )["items"]
        victims = {e["involvedObject"]["name"] for e in preempted}
        check(len(victims) == 2, f"{len(victims)} pods of team-a preempted, not 2")
        check(
            bool(events(console, "team-b", "quota-b", "OverMinTotal")),
            "quota-b has no OverMinTotal event for the reclaim",
        )
    finally:
        # The namespaces take their quotas, Deployments and pods with them; then the nodes.
        for file in ("quotas.yaml", "gpu-nodes.yaml"):
            console.run("delete", "-f", str(WALKTHROUGH / file), "--ignore-not-found")


def _no_other_quotas(console: Console) -> None:
    """Other quotas would change the sum of mins the walk-through's numbers rest on."""
    listed = console.get_json("elasticquotas", "-A")["items"]
    others = [f"{q['metadata']['namespace']}/{q['metadata']['name']}" for q in listed]
    check(not others, f"other ElasticQuotas exist and would change the numbers: {others}")


def _nodes_ready(console: Console) -> str | None:
    not_yet = []
    for node in console.get_json("nodes", "gpu-node-1", "gpu-node-2")["items"]:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions") or ()
        )
        if not ready or node["spec"].get("taints"):
            not_yet.append(node["metadata"]["name"])
    return f"not ready: {not_yet}" if not_yet else None


def _settle(console: Console, wanted: dict[str, tuple[int, int]], timeout: float = 90.0) -> None:
    """Until each team has (bound, pending) trainers and its quota's used GPUs say bound."""

    def steady() -> str | None:
        seen = {}
        for namespace in wanted:
            pods = live_pods(console, namespace, "-l", "app=trainer")
            placed = sum(1 for p in pods if node_of(p))
            quota = console.get_json("elasticquota", "-n", namespace, QUOTAS[namespace])
            used = ((quota.get("status") or {}).get("used") or {}).get(GPU)
            seen[namespace] = (placed, len(pods) - placed, used)
        expected = {ns: (b, p, str(b)) for ns, (b, p) in wanted.items()}
        return None if seen == expected else f"(bound, pending, used) {seen} != {expected}"

    eventually("the teams' pods and quotas settled", steady, timeout)


STORY = Story("c", "quota borrowing and reclaim (the 10-GPU walk-through)", play)
