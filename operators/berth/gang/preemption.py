"""Gang preemption's decisions: which victims make room for a gang, taken as whole gangs,
how one member's choices rank against the victims already chosen, and what the members
and the victims are told.

The search is greedy, member after member on one simulated snapshot (the scheduler's):
each member that does not fit takes the candidate node whose victims, added to those
already chosen for the members before it, rank lowest in kube-scheduler's order (fewest
disruption-budget violations, lowest highest priority, lowest priority sum, fewest
victims). It is not exact: an order of the members may exist that needs fewer victims.
The gang preempts only if its quorum is placed that way; otherwise nothing is evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

# Added to priorities before summing so negative priorities still order correctly.
PRIORITY_OFFSET = 2**31
# How many victims a message names before it counts the rest.
NAMED_VICTIMS = 10

Rank = tuple[int, int, int, int, float]


@dataclass(frozen=True)
class Victim:
    """A pod the preemption would evict, as the decision sees it."""

    uid: str
    key: str
    node: str
    priority: int
    started: float
    gang: str | None = None


@dataclass(frozen=True)
class Option:
    """Where one member could go, and the pods evicted for it (whole gangs included)."""

    node: str
    victims: tuple[Victim, ...]


def rank(victims: Sequence[tuple[int, float]], violations: int) -> Rank:
    """Smaller is better: kube-scheduler's pickOneNodeForPreemption criteria over victims'
    (priority, start time), in order (the last: the most recently started
    highest-priority victim). Shared with the single pod's preemption."""
    top = max((priority for priority, _ in victims), default=-PRIORITY_OFFSET)
    total = sum(priority + PRIORITY_OFFSET for priority, _ in victims)
    earliest_top = min((started for priority, started in victims if priority == top), default=0.0)
    return (violations, top, total, len(victims), -earliest_top)


def whole_gangs(
    victims: Sequence[Victim],
    running: Mapping[str, Sequence[Victim]],
    evictable: Callable[[Victim], bool],
) -> tuple[Victim, ...] | str:
    """``victims`` with every running member of each victim's gang (evicting one member of
    a running gang breaks it: all go), or why not: a gang is a victim only if every one of
    its members may be."""
    taken: dict[str, Victim] = {v.uid: v for v in victims}
    for gang in dict.fromkeys(v.gang for v in victims if v.gang is not None):
        for member in running.get(gang, ()):
            if not evictable(member):
                return f"gang {gang} would be broken: its member {member.key} may not be evicted"
            taken.setdefault(member.uid, member)
    return tuple(taken.values())


def choose(
    options: Sequence[Option],
    chosen: Sequence[Victim],
    violations: Callable[[Sequence[Victim]], int],
) -> Option | None:
    """The option whose victims, with those already ``chosen``, rank lowest; None if none."""
    best: tuple[Rank, Option] | None = None
    for option in options:
        together = {v.uid: v for v in (*chosen, *option.victims)}
        union = list(together.values())
        ranked = rank([(v.priority, v.started) for v in union], violations(union))
        if best is None or ranked < best[0]:
            best = (ranked, option)
    return best[1] if best is not None else None


def named(victims: Sequence[Victim]) -> str:
    """The victims as a message lists them: ``ns/a on n1, ns/b on n2`` (the first ten)."""
    shown = ", ".join(f"{v.key} on {v.node}" for v in victims[:NAMED_VICTIMS])
    more = len(victims) - NAMED_VICTIMS
    return f"{shown} and {more} more" if more > 0 else shown


def preempting(title: str, victims: Sequence[Victim], nominated: Mapping[str, str]) -> str:
    """What the members say while their victims leave."""
    nodes = ", ".join(f"{member} to {node}" for member, node in nominated.items())
    return (
        f"preemption: {title} preempts {len(victims)} lower-priority "
        f"pod{'s' if len(victims) != 1 else ''} ({named(victims)}); nominated: {nodes}"
    )


def not_enough(title: str, placed: int, needed: int, first: str) -> str:
    """What the members say when evicting every pod they may still leaves the quorum short."""
    why = f"; {first}" if first else ""
    return (
        f"preemption: {title} does not preempt: with every pod it may evict gone, "
        f"{placed} of the {needed} members it needs fit{why}; nothing is evicted"
    )


def still_leaving(title: str, victims: Sequence[str]) -> str:
    """What the members say while pods they preempted are still on their way out."""
    shown = ", ".join(victims[:NAMED_VICTIMS])
    return f"preemption: {title} waits for the pods it preempted to leave: {shown}"


def evicted_for(title: str, member: str, uid: str, node: str, victim: Victim) -> str:
    """The Preempted event on a victim, in kube-scheduler's words first (the preemptor's
    uid and node, as tools that read the event expect them), then which gang and member."""
    said = f"Preempted by pod {uid} on node {node}: for {title} (pod {member})"
    if victim.node != node:
        return f"{said}; its gang {victim.gang} is evicted whole"
    return said
