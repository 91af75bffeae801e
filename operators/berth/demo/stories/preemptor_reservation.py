"""Preemption with a reservation (docs/reservation.md, Story 1): before it evicts anyone,
the scheduler makes a Reservation owned by the preemptor alone, so a stranger of even
higher priority arriving after the eviction cannot take the freed cpu; the preemptor binds
into its reservation, which then turns Succeeded."""

from __future__ import annotations

from decimal import Decimal

from berth.demo.console import Console, check, eventually
from berth.demo.install import RESERVING_SCHEDULER
from berth.demo.objects import (
    POD_COLUMNS,
    Json,
    allocated_to,
    apply_made,
    cpu,
    events,
    live_pods,
    node_of,
    pod,
    priority_class,
    wait_phase,
)
from berth.demo.story import Context, Story

NAMESPACE = "default"
CLASSES = {"demo-preemptor": 1_000, "demo-top": 1_000_000}
PREEMPTOR_LABEL = "berth.io/preemptor"


def play(ctx: Context) -> None:
    console = ctx.console
    node = ctx.nodes[-1]
    try:
        allocatable = cpu(console.get_json("node", node)["status"]["allocatable"]["cpu"])
        used = sum(
            (_requested(p) for p in live_pods(console, NAMESPACE) if node_of(p) == node),
            Decimal(0),
        )
        free = allocatable - used
        ctx.say(f"a low-priority pod takes the {free} free cpu of {node}")
        apply_made(console, _pinned("low", free, node), f"Pod low: {free} cpu on {node}")
        eventually("low bound", lambda: None if _node("low", console) == node else "not yet")
        for name, value in CLASSES.items():
            apply_made(
                console,
                priority_class(name, value, "The demo's preemption story."),
                f"PriorityClass {name}, {value}",
            )
        ctx.say(
            f"a pod of priority {CLASSES['demo-preemptor']} needs it, for the profile "
            f"{RESERVING_SCHEDULER} (the Reservation plugin's reservePreemptedCapacity: true)"
        )
        preemptor = _pinned("preemptor", free, node, priorityClassName="demo-preemptor")
        preemptor["spec"]["schedulerName"] = RESERVING_SCHEDULER
        apply_made(console, preemptor, "Pod preemptor")
        eventually(
            "low preempted",
            lambda: None if events(console, NAMESPACE, "low", "Preempted") else "not yet",
        )
        uid = console.get_json("pod", "preemptor", "-n", NAMESPACE)["metadata"]["uid"]
        made = console.get_json("reservations", "-l", f"{PREEMPTOR_LABEL}={uid}")["items"]
        check(len(made) == 1, f"expected one Reservation for the preemptor, found {len(made)}")
        name = made[0]["metadata"]["name"]
        console.show("get", "reservations", "-l", f"{PREEMPTOR_LABEL}={uid}")
        ctx.say(f"a stranger of priority {CLASSES['demo-top']} arrives after the eviction")
        vip = _pinned("vip", free, node, priorityClassName="demo-top")
        apply_made(console, vip, "Pod vip")

        def served() -> str | None:
            pods = {p["metadata"]["name"]: p for p in live_pods(console, NAMESPACE)}
            if "preemptor" not in pods or "vip" not in pods:
                return "pods not seen yet"
            where = (node_of(pods["preemptor"]), allocated_to(pods["preemptor"]))
            return None if where == (node, name) else f"preemptor (node, reservation) {where}"

        eventually(f"preemptor bound into {name}", served)
        refused = events(console, NAMESPACE, "vip", "FailedScheduling")
        check(_node("vip", console) == "", "vip took the capacity freed for the preemptor")
        check(bool(refused), "vip has no FailedScheduling event yet")
        console.show("get", "pods", "preemptor", "vip", "-o", POD_COLUMNS)
        console.show("describe", "pod", "preemptor", sections=("Events:",))
        wait_phase(console, name, "Succeeded")
        console.show("describe", "reservation", name, sections=("Status:", "Events:"))
    finally:
        console.run("delete", "pod", "low", "preemptor", "vip", "--ignore-not-found")
        for name in CLASSES:
            console.run("delete", "priorityclass", name, "--ignore-not-found")


def _node(name: str, console: Console) -> str:
    for found in live_pods(console, NAMESPACE):
        if found["metadata"]["name"] == name:
            return node_of(found)
    return ""


def _requested(found: Json) -> Decimal:
    return sum(
        (
            cpu(str((c.get("resources") or {}).get("requests", {}).get("cpu", "0")))
            for c in found["spec"]["containers"]
        ),
        Decimal(0),
    )


def _pinned(name: str, amount: Decimal, node: str, **spec: str) -> Json:
    made = pod(name, NAMESPACE, str(amount), **spec)
    made["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return made


STORY = Story("f", "preemption with a reservation (Story 1)", play)
