"""``kubectl berth why POD``: a decision record as a short report for people.

Only what stands in the pod's way is shown: the plugin sections (quota, reservations,
load, NUMA) appear when their plugin refused the pod or the nodes, or, for quotas and
reservations, when the pod has one to consider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = Mapping[str, Any]

# The quota plugin, by scheduler-plugins' or Koordinator's name.
QUOTAS = ("CapacityScheduling", "ElasticQuota")
RESERVATION = "Reservation"
LOAD = "LoadAwareScheduling"
NUMA = "NodeResourceTopologyMatch"


def bound_report(pod: Json) -> str | None:
    """The one line for a pod that is not pending, None when it is."""
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return f"Pod {key} is not pending: it is scheduled on node {node}."
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return f"Pod {key} is not pending: it has {phase}."
    return None


def no_record_report(pod: Json, queued: Json | None = None) -> str:
    """A pending pod with no decision record: where the scheduler's queue holds it, when
    it does; otherwise the two reasons a pod is not there."""
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if queued:
        lines = [f"Pod {key} is pending with no decision recorded: {_queued(queued)}."]
    else:
        lines = [
            f"Pod {key} is pending, but the scheduler holds no decision for it: it has not "
            f"been tried since the scheduler started, or its schedulerName ({scheduler}) is "
            "not Berth's."
        ]
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("message"):
            lines.append(f"PodScheduled: {condition['message']}")
    return "\n".join(lines)


def _queued(place: Json) -> str:
    seconds = f"{float(place.get('waitingSeconds') or 0):.0f} s"
    tried = f"{place.get('attempts', 0)} attempt(s) so far"
    if place.get("attempts") and place.get("sentBy"):
        tried += f", sent back by {place['sentBy']}"
    area = place.get("queue")
    if area == "active":
        return (
            f"it waits in the scheduling queue behind {place.get('ahead', 0)} pod(s), "
            f"for {seconds}, {tried}"
        )
    if area == "in flight":
        return f"it is being tried now, {tried}"
    if area == "backoff":
        return f"it waits out its backoff after a failed attempt, {tried}"
    if area == "unschedulable":
        return (
            f"it waits for a cluster event that could help it, for {seconds}, {tried} (the "
            "scheduler keeps the records of the last 1000 pods tried)"
        )
    return "it is held before the queue (its scheduling gates, or its gang's quorum)"


def report(record: Json) -> str:
    """The decision record as text."""
    key = f"{record['namespace']}/{record['name']}"
    lines = [
        f"Pod {key} is pending (profile {record['profile']}, last attempt {record['time']}).",
        record["message"],
    ]
    details: Json = record.get("details") or {}
    plugins = _rejecting(record)
    prefilter = record.get("prefilter")
    if prefilter:
        lines += ["", f"Refused before any node was looked at, by {prefilter['plugin']}:"]
        lines.append(f"  {prefilter['reason']}")
    rejections = record.get("rejections") or []
    if rejections:
        lines += ["", f"Nodes rejected ({record['nodes']} node(s) in the cluster):"]
        width = max(len(r["plugin"]) for r in rejections)
        for r in rejections:
            examples = ", ".join(r["examples"])
            more = ", ..." if r["nodes"] > len(r["examples"]) else ""
            lines.append(
                f"  {r['nodes']:>4} node(s)  {r['plugin']:<{width}}  {r['reason']}"
                + (f"  (e.g. {examples}{more})" if examples else "")
            )
    quota: Json = next((details[q] for q in QUOTAS if details.get(q)), {})
    if quota.get("quota"):
        lines += ["", *quota_section(quota)]
    reservations = details.get(RESERVATION) or {}
    if (
        reservations.get("affinity")
        or reservations.get("reservations")
        or reservations.get("holding")
        or RESERVATION in plugins
    ):
        lines += ["", *reservation_section(reservations)]
    if LOAD in plugins:
        lines += ["", *load_section(details.get(LOAD) or {})]
    if NUMA in plugins:
        lines += ["", *numa_section(details.get(NUMA) or {})]
    lines += ["", preemption_line(record.get("preemption") or {})]
    unblock = record.get("unblock") or []
    if unblock:
        lines += ["", "What would unblock it:"]
        lines += [f"  - {hint}" for hint in unblock]
    return "\n".join(lines)


def _rejecting(record: Json) -> set[str]:
    prefilter = record.get("prefilter")
    names = {r["plugin"] for r in record.get("rejections") or ()}
    return names | ({prefilter["plugin"]} if prefilter else set())


def quota_section(quota: Json) -> list[str]:
    lines = [f"Quota {quota['quota']} (ElasticQuota):"]
    for resource, f in (quota.get("resources") or {}).items():
        maximum = f["max"] if f["max"] is not None else "unlimited"
        lines.append(
            f"  {resource}: used {f['used']} + nominated {f['nominated']} + requested "
            f"{f['requested']}  (min {f['min']}, max {maximum})"
        )
    for resource, f in (quota.get("total") or {}).items():
        lines.append(
            f"  all quotas, {resource}: Σused {f['used']} + Σnominated {f['nominated']}  "
            f"(Σmin {f['min']})"
        )
    rejection = quota.get("rejection")
    if rejection:
        lines.append(f"  verdict: {rejection['reason']} on {rejection['resource']}")
    else:
        lines.append("  verdict: within the quota")
    return lines


def reservation_section(detail: Json) -> list[str]:
    affinity = detail.get("affinity")
    head = "Reservations considered"
    if affinity:
        wanted = [f"name={affinity['name']}"] if affinity.get("name") else []
        wanted += [f"{k}={v}" for k, v in (affinity.get("selector") or {}).items()]
        head += f" (reservation-affinity: {', '.join(wanted) or 'any'})"
    lines = [f"{head}:"]
    verdicts = detail.get("reservations") or []
    if not verdicts:
        lines.append("  none: no reservation names the pod as an owner or matches its affinity")
    for v in verdicts:
        left = ", ".join(f"{k}={q}" for k, q in (v.get("remaining") or {}).items())
        lines.append(
            f"  {v['name']} on {v['node'] or '(not placed)'}: {v['reason']}"
            + (f"  [left: {left}]" if left else "")
        )
    if detail.get("considered", 0) > len(verdicts):
        lines.append(f"  ... {detail['considered'] - len(verdicts)} more")
    holding = detail.get("holding") or []
    if holding:
        lines += ["", "Reservations holding what the pod lacks (for their owners only):"]
    for entry in holding:
        free = ", ".join(f"{k}={q}" for k, q in entry["free"].items())
        for r in entry["reservations"]:
            holds = ", ".join(f"{k}={q}" for k, q in r["holds"].items())
            lines.append(
                f"  {entry['node']} (free after them: {free}): {r['name']} holds {holds} "
                f"for {r['owners']}"
            )
    return lines


def load_section(detail: Json) -> list[str]:
    lines = ["Load (the latest NodeMetric report against the thresholds):"]
    for node, figures in (detail.get("nodes") or {}).items():
        parts = []
        for resource, f in (figures.get("resources") or {}).items():
            sign = ">" if f["percent"] > f["threshold"] else "<="
            parts.append(
                f"{resource} {f['percent']}% {sign} {f['threshold']}% "
                f"({f['usage']} of {f['allocatable']})"
            )
        expired = ", expired" if figures.get("expired") else ""
        lines.append(
            f"  {node}: {figures['compared']} {', '.join(parts) or '(nothing compared)'}; "
            f"report {figures['reportAgeSeconds']}s old{expired}: {figures['verdict']}"
        )
    return lines


def numa_section(detail: Json) -> list[str]:
    lines = ["NUMA zones (available after pending pods):"]
    for node, figures in (detail.get("nodes") or {}).items():
        zones = "; ".join(
            f"{zone} " + ", ".join(f"{k}={v}" for k, v in free.items())
            for zone, free in (figures.get("zones") or {}).items()
        )
        verdict = "fits" if figures.get("fits") else figures.get("reason", "")
        lines.append(f"  {node} ({figures.get('scope')} scope): {verdict}; zones: {zones}")
        pending = figures.get("pending") or {}
        if pending:
            lines.append("    pending: " + ", ".join(f"{k}={v}" for k, v in pending.items()))
    return lines


def preemption_line(preemption: Json) -> str:
    if preemption.get("nominated_node"):
        return (
            f"Preemption: nominated node {preemption['nominated_node']}, evicting "
            f"{preemption['victims']} pod(s)."
        )
    if preemption.get("attempted"):
        detail = preemption.get("message") or "no node where evicting pods would help"
        return f"Preemption: tried, {detail}"
    return "Preemption: not tried (not eligible, or nothing it could help with)."
