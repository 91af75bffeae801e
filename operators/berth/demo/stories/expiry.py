"""Expiry (docs/reservation.md, lifecycle): reservations end at their ttl, whether placed
(Available) or never placed (Pending, and saying why), and say so in ``kubectl describe``."""

from __future__ import annotations

from berth.demo.console import check, eventually
from berth.demo.objects import Json, apply_made, condition, events, reservation, status, wait_phase
from berth.demo.story import Context, Story

TTL_SECONDS = 20
PLACED, TOO_BIG = "demo-expiring", "demo-too-big"


def play(ctx: Context) -> None:
    console = ctx.console
    try:
        ctx.say(f"two reservations with a ttl of {TTL_SECONDS}s; one asks more than any node has")
        apply_made(console, _reservation(PLACED, "1"), f"Reservation {PLACED}: 1 cpu")
        apply_made(console, _reservation(TOO_BIG, "64"), f"Reservation {TOO_BIG}: 64 cpu")
        wait_phase(console, PLACED, "Available")

        def explained() -> str | None:
            scheduled = condition(reservation(console, TOO_BIG), "Scheduled")
            return None if scheduled.get("status") == "False" else f"Scheduled {scheduled}"

        eventually(f"{TOO_BIG} explained", explained)
        console.show("get", "reservations", PLACED, TOO_BIG)
        console.show("describe", "reservation", TOO_BIG, sections=("Status:", "Events:"))
        ctx.say(f"waiting for the ttl ({TTL_SECONDS}s after creation)")
        for name in (PLACED, TOO_BIG):
            wait_phase(console, name, "Failed", timeout=TTL_SECONDS + 60)
        console.show("get", "reservations", PLACED, TOO_BIG)
        console.show("describe", "reservation", PLACED, sections=("Status:", "Events:"))
        for name, was in ((PLACED, "Available"), (TOO_BIG, "Pending")):
            ready = condition(reservation(console, name), "Ready")
            check(
                ready.get("reason") == "Expired" and f"while {was}" in ready.get("message", ""),
                f"{name} failed without saying it expired while {was}: {ready}",
            )
            check(
                bool(events(console, "default", name, "Expired")),
                f"{name} has no Expired event",
            )
        check(not status(reservation(console, PLACED)).get("currentOwners"), "owners appeared")
    finally:
        console.run("delete", "reservation", PLACED, TOO_BIG, "--ignore-not-found")


def _reservation(name: str, cpu: str) -> Json:
    template = {
        "spec": {
            "schedulerName": "berth-scheduler",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
        }
    }
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": template,
            "owners": [{"labelSelector": {"matchLabels": {"app": "arrives-too-late"}}}],
            "ttl": f"{TTL_SECONDS}s",
        },
    }


STORY = Story("e", "a reservation expiring", play)
