"""The event table: where each watched kind's events go, in one written order.

The role of kube-scheduler's ``eventhandlers.go``. Every watch event goes, in this order:

1. the cluster view (the facts: nodes, pods, custom objects), which says what cluster
   event the change amounts to;
2. the reservation book (what each Reservation holds, and for whom);
3. the plugins' caches: each plugin that ``consumes`` the kind, in profile order;
4. intake: a pending pod (or a pending Reservation's template) enters the queue;
5. the queue: the unschedulable pods this cluster event may help go back to be tried,
   judged by the ``events_to_register`` of the plugins that rejected them; after an event
   on one node, those that now fit there (``RoomOnNode``) are tried first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from berth.scheduler.cache.podinfo import PodInfo, spec_changed
from berth.scheduler.cache.reservations import KIND as RESERVATION
from berth.scheduler.cache.reservations import ReservationBook, resized, template_pod
from berth.scheduler.cache.view import ClusterView, object_key
from berth.scheduler.framework.clusterevents import (
    POD_DISRUPTION_BUDGET,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
    event_label,
)
from berth.scheduler.framework.interface import Plugin
from berth.scheduler.framework.runtime import Framework
from berth.scheduler.placement import (
    NO_REQUESTS,
    RESERVATION_PLUGIN,
    ReservationPlacement,
    no_reservation_plugin,
    pending,
    unsupported_annotations,
)
from berth.scheduler.queue.scheduling_queue import SchedulingQueue

POD = "Pod"
# The changes of a node that may let a pod onto it, and those of a pod that free room on
# its node: after these, the pods that now fit on that node are tried first.
NODE_OPENS = (
    ActionType.ADD
    | ActionType.UPDATE_NODE_ALLOCATABLE
    | ActionType.UPDATE_NODE_LABEL
    | ActionType.UPDATE_NODE_TAINT
    | ActionType.UPDATE_NODE_UNSCHEDULABLE
)
POD_FREES = ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN

Handler = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Covering:
    """What the registrations of a pod's rejectors make of one event: it helps whatever
    the pod (``always``), or only if one of their ``hints`` says so."""

    always: bool
    hints: tuple[QueueingHint, ...] = ()


@dataclass
class RoomOnNode:
    """The room one event made on a node (a pod gone from it or shrunk there, the node
    added or changed), shared out among the pods the queue asks about in turn: a pod fits
    when it now passes there every filter that can judge a row outside an attempt, those
    that refused it among them (``Framework.passes_at``), beside the preemptors nominated
    there that rank with it or above and the pods that fit before it. Offered to every
    pod it would fit alone, one deletion's room would have them all tried at once, and
    all but the first refused again."""

    view: ClusterView
    frameworks: dict[str, Framework]
    node: str
    # The pods nominated to the node, found when first asked: one event asks about
    # hundreds of pods.
    _nominated: list[PodInfo] | None = field(default=None, init=False)
    _taken: list[PodInfo] = field(default_factory=list, init=False)

    def __call__(self, pod: PodInfo, rejected_by: frozenset[str]) -> bool:
        framework = self.frameworks.get(pod.scheduler_name)
        row = self.view.nodes.index.get(self.node)
        if framework is None or row is None:
            return False
        if self._nominated is None:
            self._nominated = list(self.view.nominated.on(self.node))
        beside = [
            other
            for other in self._nominated
            if other.uid != pod.uid and other.priority >= pod.priority
        ]
        beside += self._taken
        if not framework.passes_at(pod, rejected_by, row, beside):
            return False
        self._taken.append(pod)
        return True


@dataclass
class EventHandlers:
    view: ClusterView
    book: ReservationBook
    frameworks: dict[str, Framework]
    # Intake and requeueing; None where nothing is queued (benchmarks of the cycle, tests).
    queue: SchedulingQueue | None = None
    placement: ReservationPlacement | None = None
    _consumers: dict[str, list[Plugin]] = field(default_factory=dict)
    _registrations: dict[tuple[str, str], tuple[ClusterEventWithHint, ...]] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for framework in self.frameworks.values():
            for name, plugin in framework.instances.items():
                self._registrations[(framework.name, name)] = plugin.events_to_register()
                if id(plugin) in seen:
                    continue
                seen.add(id(plugin))
                for kind in plugin.consumes:
                    self._consumers.setdefault(kind, []).append(plugin)

    @property
    def default_scheduler(self) -> str:
        return next(iter(self.frameworks))

    # -- the table -----------------------------------------------------------------------

    def on_node(self, event: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        old = self.view.nodes.nodes[self.view.nodes.index[name]] if self._known(name) else None
        cluster_event = self.view.on_node(event, node)
        if cluster_event.action & ActionType.ADD:
            self.book.on_node_added(name)
        self._consume("Node", event, node)
        new = None if event == "DELETED" else node
        opened = cluster_event.action & NODE_OPENS
        self._requeue(cluster_event, old, new, name if opened else None)

    def on_pod(self, event: str, raw: dict[str, Any]) -> None:
        uid = (raw.get("metadata") or {}).get("uid", "")
        old = self.view.pods.get(uid)
        held_on = self._holding_node(uid)
        pod, cluster_event = self.view.on_pod(event, raw)
        self.book.on_pod(event, pod)
        self._consume(POD, event, pod)
        self._admit(event, pod, old)
        if cluster_event is not None:
            if cluster_event.action & ActionType.DELETE and self.placement is not None:
                self.placement.room_freed.set()
            new = None if event == "DELETED" else pod
            freed = cluster_event.action & POD_FREES
            self._requeue(cluster_event, old, new, held_on if freed else None)

    def on_priority_class(self, event: str, obj: dict[str, Any]) -> None:
        self.view.on_priority_class(event, obj)

    def on_pdb(self, event: str, obj: dict[str, Any]) -> None:
        self.view.on_pdb(event, obj)
        self._requeue(ClusterEvent(POD_DISRUPTION_BUDGET, _action(event)), None, obj)

    # Volume kinds: the store keeps them parsed; hints see the parsed objects.

    def on_pv(self, event: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        old = self.view.volumes.pvs.get(key)
        cluster_event = self.view.volumes.on_pv(event, obj)
        self._requeue(cluster_event, old, self.view.volumes.pvs.get(key))

    def on_pvc(self, event: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        old = self.view.volumes.pvcs.get(key)
        cluster_event = self.view.volumes.on_pvc(event, obj)
        self._requeue(cluster_event, old, self.view.volumes.pvcs.get(key))

    def on_storage_class(self, event: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        old = self.view.volumes.classes.get(key)
        cluster_event = self.view.volumes.on_storage_class(event, obj)
        self._requeue(cluster_event, old, self.view.volumes.classes.get(key))

    def on_csi_node(self, event: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        old = self.view.volumes.csi_nodes.get(key)
        cluster_event = self.view.volumes.on_csi_node(event, obj)
        self._requeue(cluster_event, old, self.view.volumes.csi_nodes.get(key))

    def on_csi_driver(self, event: str, obj: dict[str, Any]) -> None:
        self._requeue(self.view.volumes.on_csi_driver(event, obj), None, obj)

    def on_storage_capacity(self, event: str, obj: dict[str, Any]) -> None:
        self._requeue(self.view.volumes.on_storage_capacity(event, obj), None, obj)

    def on_custom(self, kind: str) -> Handler:
        """The handler of one custom kind's watch."""

        def handle(event: str, obj: dict[str, Any]) -> None:
            if kind == RESERVATION and self.book.outdated(event, obj):
                return  # older than our own placement: its newer version is on its way
            old = self.view.custom.get(kind, {}).get(object_key(obj))
            self.view.on_custom(kind, event, obj)
            if kind == RESERVATION:
                self.book.on_reservation(event, obj)
            self._consume(kind, event, obj)
            if kind == RESERVATION:
                self._admit_reservation(event, obj)
            self._requeue(ClusterEvent(kind, _action(event)), old, obj)

        return handle

    # -- the steps -----------------------------------------------------------------------

    def _known(self, node: str) -> bool:
        return node in self.view.nodes.index

    def _holding_node(self, uid: str) -> str | None:
        """The node where a pod holds room: counted there (bound or assumed), or a
        preemptor nominated there."""
        node = self.view.counted_on.get(uid)
        if node is None:
            held = self.view.nominated.get(uid)
            node = held[0] if held is not None else None
        return node

    def _consume(self, kind: str, event: str, obj: Any) -> None:
        for plugin in self._consumers.get(kind, ()):
            plugin.on_event(kind, event, obj)

    def _admit(self, event: str, pod: PodInfo, old: PodInfo | None) -> None:
        """A pod of one of our profiles waiting for a node enters the queue; others leave it."""
        queue = self.queue
        if queue is None:
            return
        if event == "DELETED":
            queue.delete(pod.uid)
            return
        framework = self.frameworks.get(pod.scheduler_name)
        waiting = not pod.node_name and not pod.terminal and not pod.deleting
        if framework is None or not waiting:
            queue.delete(pod.uid)
            return
        if pod.uid in self.view.assumed:
            return
        changed = old is None or spec_changed(old.raw, pod.raw)
        queue.add(pod, gated=not framework.run_pre_enqueue(pod).ok, changed=changed)

    def _admit_reservation(self, event: str, obj: dict[str, Any]) -> None:
        """A Pending Reservation of one of our profiles is placed as its template's pod."""
        queue = self.queue
        if queue is None:
            return
        uid = (obj.get("metadata") or {}).get("uid", "")
        if not pending(event, obj):
            queue.delete(uid)
            held = self.book.held.get(uid)
            if held is not None and resized(held) and self.placement is not None:
                self.placement.explain_resize(held)
            return
        pod = template_pod(obj, self.view.priority_classes)
        if not (pod.raw.get("spec") or {}).get("schedulerName"):
            pod.scheduler_name = self.default_scheduler
        framework = self.frameworks.get(pod.scheduler_name)
        if framework is None:
            return  # another scheduler's reservation
        if uid in self.book.held or uid in self.view.assumed:
            return  # placed a moment ago; the watch has not caught up
        refusal = NO_REQUESTS if not pod.requests else unsupported_annotations(obj)
        if not framework.has(RESERVATION_PLUGIN):
            refusal = no_reservation_plugin(framework.name)
        if refusal:
            if self.placement is not None:
                self.placement.refuse(obj, refusal)
            return
        queue.add(pod)

    def _requeue(self, event: ClusterEvent, old: Any, new: Any, node: str | None = None) -> None:
        """Ask the queue to move the pods the event may help; ``node``: where the event
        changed what a pod may find (room freed there, the node added or changed)."""
        if self.queue is None:
            return
        room = None if node is None else RoomOnNode(self.view, self.frameworks, node)
        self.queue.move(self._hints(event, old, new), event_label(event), room)

    def _hints(
        self, event: ClusterEvent, old: Any, new: Any
    ) -> Callable[[PodInfo, frozenset[str]], bool]:
        """kube-scheduler's queueing hints: the event may help a pod if a plugin that
        rejected it registered the event and its hint (if any) says so. A pod rejected by
        no plugin in particular (an error) is tried again on any event.

        What the registrations alone decide is the same for every pod of one profile
        rejected by the same plugins: it is worked out once per event, and only the hints
        run pod by pod (hundreds of waiting pods, an event every few milliseconds)."""
        decided: dict[tuple[str, frozenset[str]], Covering] = {}

        def helps(pod: PodInfo, rejected_by: frozenset[str]) -> bool:
            framework = self.frameworks.get(pod.scheduler_name)
            if not rejected_by or framework is None:
                return True
            key = (framework.name, rejected_by)
            covering = decided.get(key)
            if covering is None:
                covering = decided[key] = self._covering(framework.name, rejected_by, event)
            return covering.always or any(hint(pod, old, new) for hint in covering.hints)

        return helps

    def _covering(self, profile: str, rejected_by: frozenset[str], event: ClusterEvent) -> Covering:
        hints: list[QueueingHint] = []
        for name in rejected_by:
            registrations = self._registrations.get((profile, name))
            if registrations is None:
                return Covering(always=True)  # not one of the profile's plugins: be safe
            for registration in registrations:
                if registration.event.covers(event):
                    if registration.hint is None:
                        return Covering(always=True)
                    hints.append(registration.hint)
        return Covering(always=False, hints=tuple(hints))

    # -- the scheduler's own changes -----------------------------------------------------

    def forgotten(self, pod: PodInfo, node: str) -> None:
        """A pod assumed on ``node`` was forgotten (its binding failed): its room is free."""
        if self.queue is None:
            return
        hints = self._hints(ClusterEvent(POD, ActionType.DELETE), pod, None)
        self.queue.move(hints, "AssumedPodForget", RoomOnNode(self.view, self.frameworks, node))

    def unnominated(self, pod: PodInfo, node: str) -> None:
        """A pending pod's nomination to ``node`` was dropped: the room and quota it held
        are free for the others, as when a nominated pod is deleted (not for itself: it
        just failed)."""
        if self.queue is None:
            return
        hints = self._hints(ClusterEvent(POD, ActionType.DELETE), pod, None)
        room = RoomOnNode(self.view, self.frameworks, node)
        self.queue.move(
            lambda other, rejected_by: other.uid != pod.uid and hints(other, rejected_by),
            "NominationDropped",
            lambda other, rejected_by: other.uid != pod.uid and room(other, rejected_by),
        )


def _action(event: str) -> ActionType:
    if event == "ADDED":
        return ActionType.ADD
    if event == "DELETED":
        return ActionType.DELETE
    return ActionType.UPDATE_OTHER
