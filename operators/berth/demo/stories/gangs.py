"""Two training jobs sharing one quota (docs/gang.md): each needs all three of its workers
and 3 of the quota's 5 cpu, so only one can run. One is placed whole; the other waits with
its reason and not a pod bound, holding no quota; when the first ends, it is placed whole."""

from __future__ import annotations

from berth.demo.console import Console, check, eventually
from berth.demo.objects import (
    Json,
    apply_made,
    elastic_quota,
    live_pods,
    namespace,
    node_of,
    scale_away,
)
from berth.demo.story import Context, Story

NAMESPACE = "demo-gang"
JOBS = ("first", "second")
WORKERS = 3
DECIDED = 120.0


def play(ctx: Context) -> None:
    console = ctx.console
    try:
        apply_made(console, namespace(NAMESPACE), f"Namespace {NAMESPACE}")
        apply_made(
            console, elastic_quota("quota", NAMESPACE, "5", "5"), "ElasticQuota: min and max 5 cpu"
        )
        for job in JOBS:
            apply_made(console, _pod_group(job), f"PodGroup {job}: minMember {WORKERS}")
            apply_made(
                console, _trainer(job), f"Deployment {job}: {WORKERS} workers of 1 cpu, all needed"
            )
        ctx.say("each job needs 3 of the quota's 5 cpu: one is placed whole, the other waits")
        placed, waiting = _one_placed(console)
        console.show("-n", NAMESPACE, "get", "podgroups.scheduling.x-k8s.io")
        console.show("-n", NAMESPACE, "get", "pods", "-o", "wide")
        pending = next(p for p in _pods(console, waiting) if not node_of(p))["metadata"]["name"]
        report = console.show_plugin("berth", "why", pending, "-n", NAMESPACE)
        check("is waiting for quota for its 3 members" in report, report)
        check(not any(node_of(p) for p in _pods(console, waiting)), f"a pod of {waiting} bound")
        console.show("-n", NAMESPACE, "get", "elasticquota", "quota")

        ctx.say(f"job {placed} ends (scaled away): job {waiting} is placed whole")
        scale_away(console, NAMESPACE, placed, f"app={placed}")

        def whole() -> str | None:
            bound = sum(1 for p in _pods(console, waiting) if node_of(p))
            return None if bound == WORKERS else f"{bound} of {waiting}'s workers bound"

        eventually(f"job {waiting} placed whole", whole, DECIDED)
        console.show("-n", NAMESPACE, "get", "podgroups.scheduling.x-k8s.io")
    finally:
        console.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def _pods(console: Console, job: str) -> list[Json]:
    return live_pods(console, NAMESPACE, "-l", f"app={job}")


def _one_placed(console: Console) -> tuple[str, str]:
    """(the job placed whole, the one waiting with none of its pods bound)."""
    found: list[str] = []

    def decided() -> str | None:
        bound = {job: sum(1 for p in _pods(console, job) if node_of(p)) for job in JOBS}
        placed = [job for job, count in bound.items() if count == WORKERS]
        if len(placed) != 1 or sum(bound.values()) != WORKERS:
            return f"workers bound: {bound}"
        found[:] = placed
        return None

    eventually("one job placed whole, the other with no worker bound", decided, DECIDED)
    placed = found[0]
    return placed, next(job for job in JOBS if job != placed)


def _pod_group(name: str) -> Json:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minMember": WORKERS},
    }


def _trainer(name: str) -> Json:
    """A Deployment (kwok would complete a Job's pods at once: these keep running)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": WORKERS,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "scheduling.x-k8s.io/pod-group": name}},
                "spec": {
                    "schedulerName": "berth-scheduler",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.local/trainer",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


STORY = Story("j", "two training jobs on one quota: one placed whole, the other waits", play)
