"""Koordinator's gang annotations (``gang.scheduling.koordinator.sh/*``) read onto the same
gang as scheduler-plugins' PodGroup, with Koordinator's defaults.

``name`` (or the deprecated label ``pod-group.scheduling.sigs.k8s.io/name``) and
``min-available`` (or the deprecated label of that name) are the gang and its minimum.
``waiting-time`` (a Go duration; absent or zero: the plugin's ``permitWaitingTimeSeconds``)
is how long a placement's room is held for a member whose binding fails, and ``mode``
(``Strict``, the default, or ``NonStrict``) whether one member's failure gives back its
siblings' room too (gang/hold.py). ``total-number`` (at least the minimum, as Koordinator
coerces it) is said in the gang's reasons while it waits for members. ``match-policy``
``waiting-and-running`` is how Berth counts (bound members count towards the minimum),
and ``once-satisfied``, Koordinator's default, is read the same way; ``only-waiting`` is
refused. ``groups`` (a JSON list of ``namespace/name``, across namespaces) makes a gang
group: its gangs are placed in one attempt, each reaching its minimum, or none is. A
value Koordinator would quietly replace by its default is refused here with its key
named. The first member by creation time speaks for the gang, as in Koordinator the
first pod initialises it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from berth.api.duration import DurationError, parse_duration
from berth.api.podgroup import POD_GROUP_LABEL
from berth.gang.group import Gang

PREFIX = "gang.scheduling.koordinator.sh/"
NAME = PREFIX + "name"
MIN_AVAILABLE = PREFIX + "min-available"
GROUPS = PREFIX + "groups"
MATCH_POLICY = PREFIX + "match-policy"
TOTAL_NUMBER = PREFIX + "total-number"
MODE = PREFIX + "mode"
WAITING_TIME = PREFIX + "waiting-time"
MODES = ("Strict", "NonStrict")
LEGACY_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LEGACY_MIN_AVAILABLE = "pod-group.scheduling.sigs.k8s.io/min-available"
LEGACY_MATCH_POLICY = "pod-group.scheduling.sigs.k8s.io/match-policy"
PODGROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
"""Koordinator's PodGroup (scheduling.sigs.k8s.io, the pre-2023 group): not served by Berth."""
MATCH_POLICIES = ("once-satisfied", "waiting-and-running")
KIND = "Gang"


class GangAnnotationError(ValueError):
    """The pod's gang annotations cannot be honoured; the message names the key."""


def member_keys(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations that make an object a gang member, in either label or
    annotation scheme: what a Reservation's own metadata lends the pod it is placed as
    (Koordinator's reserve pod carries the Reservation's labels and annotations)."""
    names = (POD_GROUP_LABEL, LEGACY_NAME, LEGACY_MIN_AVAILABLE, LEGACY_MATCH_POLICY)
    return (
        {k: v for k, v in labels.items() if k in names or k == PODGROUP_LABEL},
        {k: v for k, v in annotations.items() if k.startswith(PREFIX)},
    )


def gang_name(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The Koordinator gang a pod names, in Koordinator's order: the deprecated label,
    then the annotation."""
    return labels.get(LEGACY_NAME) or annotations.get(NAME) or None


def parse_gang(namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Gang:
    """The gang a member's keys describe; GangAnnotationError for one Berth cannot honour."""
    name = gang_name(labels, annotations)
    if name is None:
        raise GangAnnotationError(f"annotation {NAME} is missing")
    group = gang_group(namespace, name, annotations.get(GROUPS) or "")
    policy = annotations.get(MATCH_POLICY) or labels.get(LEGACY_MATCH_POLICY)
    if policy and policy not in MATCH_POLICIES:
        raise GangAnnotationError(
            f"annotation {MATCH_POLICY}: {policy!r} is not supported: Berth counts a gang's "
            f"bound members towards its minimum ({', '.join(MATCH_POLICIES)})"
        )
    text = annotations.get(MIN_AVAILABLE) or labels.get(LEGACY_MIN_AVAILABLE) or ""
    try:
        minimum = int(text)
    except ValueError:
        minimum = 0
    if minimum < 1:
        raise GangAnnotationError(
            f"annotation {MIN_AVAILABLE} must be a whole number of at least 1, not {text!r}"
        )
    return Gang(
        namespace,
        name,
        minimum,
        kind=KIND,
        group=group,
        wait_seconds=_waiting_time(annotations.get(WAITING_TIME)),
        strict=_mode(annotations.get(MODE)),
        total=_total(annotations.get(TOTAL_NUMBER), minimum),
    )


def _waiting_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_duration(text).total_seconds()
    except DurationError as err:
        raise GangAnnotationError(f"annotation {WAITING_TIME}: {err}") from err


def _mode(text: str | None) -> bool:
    """Strict unless the gang says NonStrict."""
    if text and text not in MODES:
        raise GangAnnotationError(f"annotation {MODE} must be Strict or NonStrict, not {text!r}")
    return text != "NonStrict"


def _total(text: str | None, minimum: int) -> int | None:
    """The job's declared size; one below the minimum counts as the minimum."""
    if not text:
        return None
    try:
        total = int(text)
    except ValueError:
        total = 0
    if total < 1:
        raise GangAnnotationError(
            f"annotation {TOTAL_NUMBER} must be a whole number of at least 1, not {text!r}"
        )
    return max(total, minimum)


def gang_group(namespace: str, name: str, text: str) -> tuple[str, ...]:
    """The other gangs of a gang's group, sorted (the gang itself may be listed or not)."""
    if not text:
        return ()
    try:
        listed = json.loads(text)
    except ValueError:
        listed = None
    if not isinstance(listed, list) or not all(
        isinstance(item, str) and len(item.split("/")) == 2 and all(item.split("/"))
        for item in listed
    ):
        raise GangAnnotationError(
            f'annotation {GROUPS} must be a JSON list of "namespace/name", not {text!r}'
        )
    return tuple(sorted(set(listed) - {f"{namespace}/{name}"}))
