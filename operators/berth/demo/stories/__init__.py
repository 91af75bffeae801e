"""The design documents' stories, in the order the demo plays them."""

from berth.demo.stories import (
    burst,
    expiry,
    gangs,
    migration,
    preemptor_reservation,
    quota,
    quota_tree,
    scale_up,
    stranger,
    why_pending,
)
from berth.demo.story import Story

STORIES: tuple[Story, ...] = (
    scale_up.STORY,
    stranger.STORY,
    quota.STORY,
    burst.STORY,
    expiry.STORY,
    preemptor_reservation.STORY,
    why_pending.STORY,
    migration.STORY,
    quota_tree.STORY,
    gangs.STORY,
)

__all__ = ["STORIES"]
