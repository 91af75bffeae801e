"""Coscheduling: scheduler-plugins' gangs (``PodGroup`` and the pod label
``scheduling.x-k8s.io/pod-group``), Koordinator's gang annotations
(``berth.gang.koordinator``) and kube-scheduler 1.36's PodGroup named by
``spec.schedulingGroup`` (``berth.gang.workload``), decided whole by the group cycle.

Upstream assumes members one by one and parks them at Permit until minMember are
waiting, so a gang that waits holds capacity and quota, and two gangs can hold parts of
the cluster each. Here the plugin says which gang a pod belongs to and whether the gang
may be tried now (its quorum present, not backed off, ``minResources`` within what the
cluster has free); the group cycle places the members together on one snapshot and keeps
the placement only if minMember fit, so nothing ever waits at Permit. Permit answers at
once: a member passes only as part of a placement that reached its gang's number.

The args are upstream's, defaulted and validated as upstream. ``permitWaitingTimeSeconds``
(below a PodGroup's ``scheduleTimeoutSeconds`` or Koordinator's ``waiting-time``) is how
long a placement's room is held for a member whose binding fails (gang/hold.py), as
upstream holds assumed members at Permit. ``podGroupRejectPercentage`` decides, as in
upstream's PostFilter, whether a gang that could not be placed is backed off: not when
the members that did not fit are at most that share of its minimum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from berth import log
from berth.api.podgroup import CRD, POD_GROUP_LABEL, PodGroup
from berth.api.reservation import GROUP as RESERVATION_GROUP
from berth.api.reservation import TERMINAL_PHASES
from berth.api.reservation import VERSION as RESERVATION_VERSION
from berth.gang import koordinator, workload
from berth.gang.backoff import GangBackoff
from berth.gang.group import (
    Gang,
    Wait,
    WaitReason,
    backed_off,
    group_name,
    missing_members,
    resource_gap,
)
from berth.gang.hold import wait_seconds
from berth.podresources import Resources, add
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import KIND as RESERVATION
from berth.scheduler.cache.reservations import template_pod
from berth.scheduler.framework.clusterevents import NODE, POD, ActionType, ClusterEventWithHint, on
from berth.scheduler.framework.interface import (
    SUCCESS,
    CycleState,
    GroupMembers,
    Handle,
    Plugin,
    Status,
    unschedulable,
)

logger = log.get(__name__)

NAME = "Coscheduling"
RESERVATION_API = f"{RESERVATION_GROUP}/{RESERVATION_VERSION}"
POD_GROUP = CRD.kind
KOORDINATOR_KEY = "koordinator:"
WORKLOAD_KEY = "workload:"


class CoschedulingArgs(BaseModel):
    """scheduler-plugins' CoschedulingArgs with its defaults."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    permit_waiting_time_seconds: int = 60
    pod_group_backoff_seconds: int = 0
    pod_group_reject_percentage: int = 10

    @field_validator("permit_waiting_time_seconds", "pod_group_backoff_seconds")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"Invalid value: {value}: must be greater than 0")
        return value

    @field_validator("pod_group_reject_percentage")
    @classmethod
    def _percentage(cls, value: int) -> int:
        if not 0 <= value <= 100:
            raise ValueError(f"Invalid value: {value}: must be between 0 and 100")
        return value

    @classmethod
    def parse(cls, args: Mapping[str, Any]) -> CoschedulingArgs:
        """The plugin's args; a wrong name or value raises ValueError naming it."""
        try:
            return cls.model_validate(dict(args))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{where}: {message}") from err


class Coscheduling(Plugin):
    name = NAME
    consumes = frozenset({POD, RESERVATION})

    def __init__(self, args: dict[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.config = CoschedulingArgs.parse(args)
        # upstream: a wait of 0 falls back to 60 s
        self.wait_seconds = wait_seconds(self.config.permit_waiting_time_seconds, 60.0)
        self.backoff = GangBackoff(self.config.pod_group_backoff_seconds)
        # Gang key (namespace/name) -> uids of the pods labelled with it; uid -> its key.
        self._members: dict[str, set[str]] = {}
        self._gang_of: dict[str, str] = {}
        # Reservations that are gang members (their gang keys on them or their template),
        # as the pods they are placed as: pending ones, or placed ones counted as bound.
        self._reservations: dict[str, PodInfo] = {}
        # Pods told which of two gang schemes decides for them.
        self._told: set[str] = set()
        for pod in handle.view.pods.values():
            self.on_event(POD, "ADDED", pod)
        for raw in handle.view.custom.get(RESERVATION, {}).values():
            self.on_event(RESERVATION, "ADDED", raw)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """A PodGroup made or its spec changed (its minMember lowered); room freed for a
        gang the cluster was too small for, or a backoff that may have ended."""
        return (
            on(POD_GROUP, ActionType.ADD | ActionType.UPDATE_OTHER, spec_changed),
            on(workload.VIEW_KIND, ActionType.ADD | ActionType.UPDATE_OTHER, spec_changed),
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
            on(POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
            on(RESERVATION, ActionType.DELETE),
        )

    def on_event(self, kind: str, event: str, obj: Any) -> None:
        """Keeps the members of each gang, in the pods' namespace (a Reservation's: its
        template's)."""
        if kind == RESERVATION:
            pod = template_pod(obj, self.handle.view.priority_classes)
            phase = (obj.get("status") or {}).get("phase")
            if event == "DELETED" or phase in TERMINAL_PHASES or pod.uid == "":
                self._reservations.pop(pod.uid, None)
                event = "DELETED"
            else:
                pod.deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
                self._reservations[pod.uid] = pod
        else:
            pod = obj
        before = self._gang_of.pop(pod.uid, None)
        if before is not None:
            self._members[before].discard(pod.uid)
            if not self._members[before]:
                del self._members[before]
        key = _gang_key(pod)
        if event != "DELETED" and key is not None:
            self._gang_of[pod.uid] = key
            self._members.setdefault(key, set()).add(pod.uid)
        if event == "DELETED":
            self._told.discard(pod.uid)

    def group_of(self, pod: PodInfo) -> GroupMembers | Wait | None:
        key = _gang_key(pod)
        if key is None:
            return None
        self._tell_scheme(pod, key)
        found = self._members_of(key, pod.scheduler_name, pod)
        if not isinstance(found, GroupMembers) or not found.gang.group:
            return found
        # Koordinator's gang group: every gang of it is taken into the same attempt.
        others: list[GroupMembers] = []
        for other in found.gang.group:
            more = self._members_of(KOORDINATOR_KEY + other, pod.scheduler_name, None)
            if isinstance(more, Wait):
                return Wait(more.reason, f"{found.gang.title}'s gang group: {more.message}")
            if more is not None:
                others.append(more)
        return replace(found, others=tuple(others))

    def _members_of(
        self, key: str, scheduler: str, pod: PodInfo | None
    ) -> GroupMembers | Wait | None:
        """A gang's members by key: pending ones of this scheduler in the order they are
        placed, and those on a node (``pod``, when given, is one of them)."""
        view = self.handle.view
        pending: list[PodInfo] = []
        bound: list[PodInfo] = []
        held = self.handle.reservations.held
        for uid in self._members.get(key, ()):
            member = view.pods.get(uid) or self._reservations.get(uid)
            if member is None or member.terminal or member.deleting:
                continue
            if member.node_name or uid in view.assumed or uid in held:
                bound.append(member)
            elif member.scheduler_name == scheduler or (
                member.reservation is not None and not member.scheduler_name
            ):
                pending.append(member)
        pending.sort(key=lambda p: (-p.priority, p.created, p.name))
        bound.sort(key=lambda p: p.name)
        members = [*pending, *bound]
        speaker = pod if pod is not None else (members[0] if members else None)
        if speaker is None:
            name = key.removeprefix(KOORDINATOR_KEY)
            return Wait(WaitReason.WAITING_FOR_MEMBERS, f"gang {name} has no members yet")
        gang = self._gang(speaker, key, members)
        if gang is None or isinstance(gang, Wait):
            return gang
        gang = replace(gang, wait_seconds=wait_seconds(gang.wait_seconds, self.wait_seconds))
        return GroupMembers(gang, tuple(pending), tuple(bound))

    def _tell_scheme(self, pod: PodInfo, key: str) -> None:
        """A pod naming a gang in more than one scheme hears once which one decides."""
        writer = self.handle.writer
        if pod.uid in self._told or writer is None:
            return
        named = _schemes(pod)
        if len(named) < 2:
            return
        self._told.add(pod.uid)
        (_, used), *others = named
        reservation = pod.reservation
        writer.event(
            pod.raw if reservation is None else reservation,
            "Pod" if reservation is None else RESERVATION,
            "GangScheme",
            f"the pod is a member of {used}; its "
            f"{' and its '.join(said for _, said in others)} "
            f"{'is' if len(others) == 1 else 'are'} not used",
            api_version="v1" if reservation is None else RESERVATION_API,
        )

    def _gang(self, pod: PodInfo, key: str, members: list[PodInfo]) -> Gang | Wait | None:
        """The gang's facts: its PodGroup's, or Koordinator's annotations on its first
        member by creation time; None for a kube-scheduler PodGroup of the basic policy."""
        if key.startswith(WORKLOAD_KEY):
            found = key.removeprefix(WORKLOAD_KEY)
            raw = self.handle.view.custom.get(workload.VIEW_KIND, {}).get(found)
            if raw is None:
                return Wait(
                    WaitReason.PODGROUP_NOT_FOUND,
                    f"{workload.VIEW_KIND} {found} not found: create it (the API server "
                    f"serves {workload.API_VERSION} with the GenericWorkload feature gate)",
                )
            try:
                return workload.parse_gang(raw)
            except workload.WorkloadGangError as err:
                return Wait(WaitReason.INVALID_GANG, f"{workload.VIEW_KIND} {found}: {err}")
        if key.startswith(KOORDINATOR_KEY):
            first = min(members or [pod], key=lambda p: (p.created, p.name))
            try:
                return koordinator.parse_gang(pod.namespace, first.labels, first.annotations)
            except koordinator.GangAnnotationError as err:
                return Wait(WaitReason.INVALID_GANG, f"{first.key}: {err}")
        raw = self.handle.view.custom.get(POD_GROUP, {}).get(key)
        if raw is None:
            return Wait(
                WaitReason.PODGROUP_NOT_FOUND,
                f"PodGroup {key} not found: create it, or remove the pod's label {POD_GROUP_LABEL}",
            )
        return Gang.of(PodGroup.from_dict(raw))

    def before_placing(self, members: GroupMembers, now: float) -> Wait | None:
        gang = members.gang
        missing = missing_members(gang, len(members.pending) + len(members.bound), members.gated)
        if missing is not None:
            return missing
        until = self.backoff.backed_off(gang.key, now)
        if until is not None:
            return backed_off(gang, until)
        if gang.min_resources:
            return resource_gap(gang, self._free(members))
        return None

    def group_done(
        self, members: GroupMembers, placed: bool, unassigned: float, now: float
    ) -> None:
        """A gang placed is no longer backed off; one not placed is, unless the members
        short of its minimum are within ``podGroupRejectPercentage`` of it (upstream's
        "small gap": the next event may well complete it)."""
        if placed:
            self.backoff.placed(members.gang.key)
        elif unassigned > self.config.pod_group_reject_percentage / 100:
            self.backoff.failed(members.gang.key, now)

    def running_gang(self, pod: PodInfo) -> tuple[str, tuple[PodInfo, ...]] | None:
        key = self._gang_of.get(pod.uid)
        if key is None or pod.reservation is not None:
            return None
        if key.startswith(WORKLOAD_KEY) and self._gang(pod, key, []) is None:
            return None  # a basic PodGroup: each pod alone
        view = self.handle.view
        members = (view.pods.get(uid) for uid in self._members.get(key, ()))
        running = tuple(
            m
            for m in members
            if m is not None
            and not m.terminal
            and not m.deleting
            and (m.node_name or m.uid in view.assumed)
        )
        name = key.removeprefix(KOORDINATOR_KEY).removeprefix(WORKLOAD_KEY)
        return name, tuple(sorted(running, key=lambda m: m.name))

    def _free(self, members: GroupMembers) -> Resources:
        """What the cluster's nodes have free, summed, with the gang's bound members' own
        requests given back (upstream leaves the group's pods out of the sum)."""
        nodes = self.handle.view.nodes
        rows = nodes.present[: nodes.size]
        left = (nodes.allocatable[: nodes.size] - nodes.requested[: nodes.size]).clip(min=0)
        totals = left[rows].sum(axis=0)
        free = {name: int(totals[col]) for name, col in nodes.columns.items()}
        for member in members.bound:
            add(free, member.requests)
        return free

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """A member passes only within a placement of its gang that reached the number."""
        key = _gang_key(pod)
        if key is None:
            return SUCCESS
        basic = key.startswith(WORKLOAD_KEY) and self._gang(pod, key, []) is None
        if state.group is None and basic:
            return SUCCESS  # a basic PodGroup: each pod alone
        if state.group is None:
            return unschedulable(self.name, f"{pod.key} was not placed with its gang")
        placed, needed = state.group
        if placed < needed:
            return unschedulable(
                self.name, f"{placed} of the {needed} members its gang needs are placed"
            )
        return SUCCESS


def spec_changed(pod: PodInfo, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A PodGroup is new or its spec changed. Its status (the operator's Scheduled
    condition, Berth's own PodGroupScheduled) decides nothing: taken as a change, each
    write about a waiting gang would try it again at once, inside its backoff, only for
    it to be told it is backed off."""
    return old is None or old.get("spec") != new.get("spec")


def _schemes(pod: PodInfo) -> list[tuple[str, str]]:
    """Each gang the pod names (its key, and how an event names it), in the order
    docs/gang.md gives: kube-scheduler's ``spec.schedulingGroup``, scheduler-plugins'
    label, Koordinator's keys (each scheme keyed apart: same-named groups of two schemes
    are two gangs)."""
    found: list[tuple[str, str]] = []
    name = workload.group_name(pod.raw.get("spec") or {})
    if name is not None:
        key = f"{pod.namespace}/{name}"
        found.append((WORKLOAD_KEY + key, f"{workload.VIEW_KIND} {key} ({workload.FIELD})"))
    name = group_name(pod.labels)
    if name is not None:
        key = f"{pod.namespace}/{name}"
        found.append((key, f"PodGroup {key} (label {POD_GROUP_LABEL})"))
    name = koordinator.gang_name(pod.labels, pod.annotations)
    if name is not None:
        found.append((f"{KOORDINATOR_KEY}{pod.namespace}/{name}", f"Koordinator gang {name}"))
    return found


def _gang_key(pod: PodInfo) -> str | None:
    """The gang a pod is a member of: the first scheme naming one decides."""
    spec = pod.raw.get("spec") or {}
    if "schedulingGroup" not in spec and not pod.labels and not pod.annotations:
        return None  # the common case, kept cheap: every pod event asks
    named = _schemes(pod)
    return named[0][0] if named else None
