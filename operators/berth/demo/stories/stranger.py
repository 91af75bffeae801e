"""Capacity locked for one pod (docs/reservation.md, preemption): a stranger of higher
priority asking for the reserved cpu is refused, preemption finds no victim (a reservation
never is one), and the pod the capacity is held for gets it."""

from __future__ import annotations

from berth.demo.console import check, eventually
from berth.demo.objects import (
    EXAMPLES,
    POD_COLUMNS,
    allocated_to,
    apply,
    apply_made,
    cpu,
    events,
    live_pods,
    node_of,
    pod,
    priority_class,
    status,
    wait_phase,
)
from berth.demo.story import Context, Story

FILE = EXAMPLES / "reservations" / "preemption.yaml"
NAME = "for-critical-job"
PRIORITY_CLASS = "demo-high-priority"
HIGH = 1_000_000


def play(ctx: Context) -> None:
    console = ctx.console
    try:
        ctx.say("locking 3 cpu for the pod default/critical-job, which does not exist yet")
        apply(console, FILE)
        held = status(wait_phase(console, NAME, "Available"))
        node, reserved = held["nodeName"], cpu(held["allocatable"]["cpu"])
        console.show("get", "reservation", NAME)
        allocatable = cpu(console.get_json("node", node)["status"]["allocatable"]["cpu"])
        wanted = allocatable - reserved + 1
        ctx.say(
            f"a stranger of priority {HIGH} asks for {wanted} of {node}'s {allocatable} cpu: "
            f"more than is free once the {reserved} reserved are set aside"
        )
        apply_made(
            console,
            priority_class(
                PRIORITY_CLASS,
                HIGH,
                "The demo's stranger: more important than anything else running.",
            ),
            f"PriorityClass {PRIORITY_CLASS}, value {HIGH}",
        )
        stranger = pod("vip", "default", str(wanted), priorityClassName=PRIORITY_CLASS)
        stranger["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        apply_made(console, stranger, f"Pod vip: {wanted} cpu on {node}, priority {HIGH}")

        def refused() -> str | None:
            found = events(console, "default", "vip", "FailedScheduling")
            return None if found else "no FailedScheduling event yet"

        eventually("vip refused", refused)
        message = events(console, "default", "vip", "FailedScheduling")[-1]["message"]
        console.show("describe", "pod", "vip", sections=("Events:",))
        check("1 Insufficient cpu" in message, f"vip refused for another reason: {message}")
        check("No preemption victims found" in message, f"preemption found victims: {message}")
        ctx.say("critical-job, the pod the capacity is locked for, gets it")
        apply_made(console, pod("critical-job", "default", str(reserved)), "Pod critical-job")

        def served() -> str | None:
            pods = {p["metadata"]["name"]: p for p in live_pods(console, "default")}
            job, vip = pods["critical-job"], pods["vip"]
            where = (node_of(job), allocated_to(job), node_of(vip))
            return None if where == (node, NAME, "") else f"(node, reservation, vip's node) {where}"

        eventually(f"critical-job bound into {NAME}, vip still Pending", served)
        console.show("get", "pods", "vip", "critical-job", "-o", POD_COLUMNS)
    finally:
        console.run("delete", "pod", "vip", "critical-job", "--ignore-not-found")
        console.run("delete", "-f", str(FILE), "--ignore-not-found")
        console.run("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found")


STORY = Story("b", "a higher-priority stranger refused", play)
