"""The kinds Berth serves, in one list: the CRD generator, the CLI and the scheduler's
watches all iterate over it, so adding a kind is one line here."""

from __future__ import annotations

from typing import Final

from berth.api import (
    elasticquota,
    nodemetric,
    noderesourcetopology,
    podgroup,
    podmigrationjob,
    reservation,
)
from berth.api.resource import CustomResource

__all__ = ["KINDS", "by_kind"]

KINDS: Final[tuple[CustomResource, ...]] = (
    reservation.CRD,
    elasticquota.CRD,
    nodemetric.CRD,
    noderesourcetopology.CRD,
    podmigrationjob.CRD,
    podgroup.CRD,
)


def by_kind(kind: str) -> CustomResource:
    """The served kind with this name (``Reservation``) or plural or short name (``rsv``)."""
    wanted = kind.lower()
    for crd in KINDS:
        if wanted in (crd.kind.lower(), crd.plural, crd.singular, *crd.short_names):
            return crd
    raise KeyError(f"Berth serves no kind {kind!r}")
