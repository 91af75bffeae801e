"""Deterministic scale-up (docs/reservation.md): room for web's two new replicas is reserved
first; when the replicas come, they land in it, annotated with the reservation's name."""

from __future__ import annotations

from berth.demo.console import check, eventually
from berth.demo.objects import (
    EXAMPLES,
    POD_COLUMNS,
    allocated_to,
    apply,
    documents,
    live_pods,
    node_of,
    one,
    reservation,
    scale_away,
    status,
    wait_phase,
)
from berth.demo.story import Context, Story

FILE = EXAMPLES / "reservations" / "scale-up.yaml"
NAME = "web-scale-up"


def play(ctx: Context) -> None:
    console = ctx.console
    docs = documents(FILE)
    try:
        ctx.say("reserving 2 cpu for the two replicas web is about to get, before they exist")
        apply(console, FILE, one(docs, "Reservation"))
        node = status(wait_phase(console, NAME, "Available"))["nodeName"]
        console.show("get", "reservation", NAME)
        ctx.say(f"the reservation holds 2 cpu on {node}; now the scale-up: web's two replicas")
        apply(console, FILE, one(docs, "Deployment"))

        def placed() -> str | None:
            pods = live_pods(console, "default", "-l", "app=web")
            where = [(node_of(p), allocated_to(p)) for p in pods]
            return None if where == [(node, NAME)] * 2 else f"(node, reservation) {where}"

        eventually(f"both replicas bound into {NAME} on {node}", placed)
        console.show("get", "pods", "-l", "app=web", "-o", POD_COLUMNS)

        def owners() -> str | None:
            current = status(reservation(console, NAME))
            count = len(current.get("currentOwners") or ())
            return None if count == 2 else f"{count} current owners"

        eventually("status.currentOwners lists both replicas", owners)
        console.show("describe", "reservation", NAME, sections=("Status:", "Events:"))
        check(
            status(reservation(console, NAME)).get("allocated") == {"cpu": "2"},
            "status.allocated is not the replicas' 2 cpu",
        )
    finally:
        scale_away(console, "default", "web", "app=web")
        console.run("delete", "reservation", NAME, "--ignore-not-found")


STORY = Story("a", "a reservation held, then used by a scale-up", play)
