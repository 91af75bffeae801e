"""The Reservation a ReservationFirst job makes for its pod.

The pod's spec without ``nodeName`` is the template, so the scheduler places the
reservation exactly as it would place the pod; a required node affinity keeps it off the
pod's current node (moving there would be no move). The pod's controller owns it, so the
controller's replacement pod is the one that can use it; ``allocateOnce`` ends it when that
pod arrives. The job is its owner in ``ownerReferences``, so deleting the job deletes it.

It is made ``unschedulable`` (closed to owner pods, its capacity still held) and opened
only as the pod is evicted: otherwise, with two pods of one workload migrating, the first
replacement could take the second job's reservation before that job evicted its pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from berth.api.podmigrationjob import PodMigrationJob
from berth.api.reservation import GROUP, VERSION
from berth.migration.filters import controller_of

__all__ = ["JOB_LABEL", "avoid_node", "owned_by", "reservation_for"]

JOB_LABEL: Final = "berth.dev/pod-migration-job"
"""Label on a reservation a job made: the job's name."""

_TEMPLATE_SPEC_DROPPED: Final = ("nodeName",)
_TEMPLATE_META_KEPT: Final = ("labels", "annotations")


def avoid_node(spec: dict[str, Any], node: str) -> None:
    """Add ``metadata.name NotIn [node]`` to every required node-affinity term."""
    requirement = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    affinity = spec.setdefault("affinity", {}) or {}
    spec["affinity"] = affinity
    node_affinity = affinity.setdefault("nodeAffinity", {}) or {}
    affinity["nodeAffinity"] = node_affinity
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get(key) or {}
    terms = list(required.get("nodeSelectorTerms") or []) or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), requirement]
    node_affinity[key] = {**required, "nodeSelectorTerms": terms}


def reservation_for(job: PodMigrationJob, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Reservation body for the job's pod; parts the job's template sets are kept."""
    options = job.spec.reservation_options
    given = options.template if options is not None and options.template is not None else None
    meta: dict[str, Any] = copy.deepcopy(given.metadata) if given and given.metadata else {}
    spec: dict[str, Any] = copy.deepcopy(given.spec) if given and given.spec else {}
    pod_meta = pod.get("metadata") or {}
    if "template" not in spec:
        template_spec = {
            k: copy.deepcopy(v)
            for k, v in (pod.get("spec") or {}).items()
            if k not in _TEMPLATE_SPEC_DROPPED
        }
        template_meta = {k: pod_meta[k] for k in _TEMPLATE_META_KEPT if pod_meta.get(k)}
        spec["template"] = {"metadata": template_meta, "spec": template_spec}
    source = (pod.get("spec") or {}).get("nodeName")
    if source:
        avoid_node(spec["template"].setdefault("spec", {}), str(source))
    if "owners" not in spec:
        controller = controller_of(pod)
        if controller is not None:
            owner = {
                "apiVersion": controller.get("apiVersion"),
                "kind": controller.get("kind"),
                "name": controller.get("name"),
                "uid": controller.get("uid"),
                "controller": True,
                "namespace": pod_meta.get("namespace"),
            }
            spec["owners"] = [{"controller": owner}]
        else:
            ref = {"namespace": pod_meta.get("namespace"), "name": pod_meta.get("name")}
            spec["owners"] = [{"object": ref}]
    if "ttl" not in spec and "expires" not in spec:
        spec["ttl"] = job.spec.ttl
    spec.setdefault("allocateOnce", True)
    spec["unschedulable"] = True
    name = job.metadata.name
    labels = {**(meta.get("labels") or {}), JOB_LABEL: name}
    metadata = {
        **meta,
        "name": name,
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": job.api_version,
                "kind": job.kind,
                "name": name,
                "uid": job.metadata.uid,
                "blockOwnerDeletion": False,
            }
        ],
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Reservation",
        "metadata": metadata,
        "spec": spec,
    }


def owned_by(reservation: Mapping[str, Any], job: PodMigrationJob) -> bool:
    """Whether this job made the reservation (and so may release it)."""
    refs = (reservation.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("uid") == job.metadata.uid for ref in refs)
