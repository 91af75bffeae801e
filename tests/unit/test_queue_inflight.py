"""The events pods in flight see: each pod the events since it took off, kept once for all
of them and dropped when no pod in flight needs them."""

from __future__ import annotations

from berth.scheduler.queue.inflight import Event, InFlight


def event(label: str) -> Event:
    return (label, lambda _pod, _rejected_by: True, None)


def labels(events: list[Event]) -> list[str]:
    return [label for label, _, _ in events]


def test_a_pod_sees_the_events_after_it_took_off_and_before_it_landed() -> None:
    flight = InFlight()
    flight.record(event("before anyone"))
    flight.take_off("a")
    flight.record(event("e1"))
    flight.take_off("b")
    flight.record(event("e2"))
    assert labels(flight.land("b")) == ["e2"]
    flight.record(event("e3"))
    assert labels(flight.land("a")) == ["e1", "e2", "e3"]
    assert "a" not in flight
    assert flight.land("a") == []


def test_a_pod_that_takes_off_again_sees_only_the_new_events() -> None:
    flight = InFlight()
    flight.take_off("a")
    flight.take_off("keeper")
    flight.record(event("e1"))
    assert labels(flight.land("a")) == ["e1"]
    flight.take_off("a")
    flight.record(event("e2"))
    assert labels(flight.land("a")) == ["e2"]
    assert labels(flight.land("keeper")) == ["e1", "e2"]


def test_an_event_is_kept_once_however_many_pods_are_in_flight() -> None:
    """Thousands of pods binding at once: one copy of each event, not one per pod."""
    flight = InFlight()
    for i in range(2000):
        flight.take_off(f"p{i}")
    for i in range(500):
        flight.record(event(f"e{i}"))
    assert len(flight._events) == 500
    assert labels(flight.land("p1999"))[-1] == "e499"


def test_events_go_once_the_pods_that_saw_them_land() -> None:
    flight = InFlight()
    flight.take_off("old")
    flight.record(event("e1"))
    flight.take_off("new")
    flight.record(event("e2"))
    flight.discard("new")
    assert len(flight._events) == 2  # "old" still needs both
    flight.discard("old")
    assert len(flight._events) == 0
    flight.record(event("unseen"))
    assert len(flight._events) == 0  # nobody in flight: nothing kept
    flight.take_off("later")
    assert flight.land("later") == []
