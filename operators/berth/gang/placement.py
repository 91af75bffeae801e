"""All or nothing on one snapshot: the members are placed one after another on the same
view of the cluster, each seeing those before it, and the placement stands only if at
least the needed number fit; otherwise every member placed is taken back, in reverse, so
a gang that waits holds neither capacity nor quota.

``place`` and ``undo`` are the scheduler's: place a member (assume it, reserve it) and
say where, or why it fits nowhere; take it back. The decision itself is here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from berth.gang.group import Gang, Wait, WaitReason

M = TypeVar("M")


@dataclass(frozen=True)
class Placed(Generic[M]):
    member: M
    node: str


@dataclass(frozen=True)
class Refused(Generic[M]):
    member: M
    reason: str


@dataclass
class GangPlacement(Generic[M]):
    """The outcome: placed members (kept only when ``committed``) and those that fit nowhere."""

    needed: int
    placed: list[Placed[M]] = field(default_factory=list)
    refused: list[Refused[M]] = field(default_factory=list)
    committed: bool = False

    def wait(self, gang: Gang, name: Callable[[M], str]) -> Wait:
        """Why an uncommitted placement was given up: how many fit, and the first refusal."""
        first = self.refused[0] if self.refused else None
        why = f"; {name(first.member)}: {first.reason}" if first is not None else ""
        return Wait(
            WaitReason.NO_PLACEMENT,
            f"{gang.title} cannot be placed: {len(self.placed)} of the {self.needed} "
            f"members it needs fit{why}",
        )


def place_all_or_nothing(
    members: Sequence[M],
    needed: int,
    place: Callable[[M], str | Refused[M]],
    undo: Callable[[Placed[M]], None],
) -> GangPlacement[M]:
    """Place ``members`` in order until it is sure whether ``needed`` of them fit.

    Stops as soon as the members left cannot make up the number; every member is tried
    once the number is reached, so a gang above minMember places what else fits."""
    outcome: GangPlacement[M] = GangPlacement(needed)
    for index, member in enumerate(members):
        left = len(members) - index
        if len(outcome.placed) + left < needed:
            break
        where = place(member)
        if isinstance(where, Refused):
            outcome.refused.append(where)
        else:
            outcome.placed.append(Placed(member, where))
    if len(outcome.placed) >= needed:
        outcome.committed = True
        return outcome
    for placed in reversed(outcome.placed):
        undo(placed)
    return outcome
