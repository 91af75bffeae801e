"""The composition root: a scheduler's parts built and wired in one place.

The view, the reservation book, one framework and cycle per profile, and the event table
that feeds them. ``berth run`` adds the watches, the queue and the loop
(``berth.scheduler.service``); the cycle benchmarks and the unit tests use the same parts
without them, so they measure and test what runs.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.config import Profile as ProfileConfig
from berth.scheduler.cycle import Cycle
from berth.scheduler.eventhandlers import EventHandlers
from berth.scheduler.framework.interface import QueueSharePlugin
from berth.scheduler.placement import ReservationPlacement
from berth.scheduler.plugins.registry import build
from berth.scheduler.queue.scheduling_queue import SchedulingQueue
from berth.scheduler.schedule_one import Profile
from berth.scheduler.writer import Writer


@dataclass
class Assembly:
    view: ClusterView
    book: ReservationBook
    profiles: dict[str, Profile]
    events: EventHandlers
    placement: ReservationPlacement | None

    def profile(self, name: str | None = None) -> Profile:
        """A profile by scheduler name, or the first one."""
        return self.profiles[name] if name is not None else next(iter(self.profiles.values()))


def assemble(
    profiles: Sequence[ProfileConfig],
    *,
    writer: Writer | None = None,
    queue: SchedulingQueue | None = None,
    percentage_of_nodes_to_score: int | None = None,
    rng: random.Random | None = None,
) -> Assembly:
    view = ClusterView()
    book = ReservationBook(view)
    built: dict[str, Profile] = {}
    for config in profiles:
        framework = build(config, view, book, writer, percentage_of_nodes_to_score)
        built[config.scheduler_name] = Profile(framework, Cycle(framework, rng or random.Random()))
    if queue is not None and any(
        isinstance(p, QueueSharePlugin)
        for profile in built.values()
        for p in profile.framework.instances.values()
    ):
        queue.share = functools.partial(_queue_share, built)
    placement = ReservationPlacement(view, book, writer) if writer is not None else None
    events = EventHandlers(
        view, book, {name: p.framework for name, p in built.items()}, queue, placement
    )
    return Assembly(view, book, built, events, placement)


def _queue_share(profiles: dict[str, Profile], pod: PodInfo) -> float:
    """The pod's fair share by its profile's plugins (0 for a pod of no profile)."""
    profile = profiles.get(pod.scheduler_name)
    return 0.0 if profile is None else profile.framework.queue_share(pod)
