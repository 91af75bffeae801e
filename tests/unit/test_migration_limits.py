"""Migration limits: Koordinator's defaults and arithmetic, the filters, arbitration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from berth.api.podmigrationjob import PodMigrationJob
from berth.migration.arbitration import Passed, Workload, hold, passed_annotations, passed_of
from berth.migration.args import MigrationControllerArgs
from berth.migration.filters import refusal
from berth.migration.ratelimit import TokenBucket
from berth.migration.workload import max_migrating, max_unavailable

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [(1, 1), (3, 1), (4, 2), (10, 2), (11, 2), (20, 2), (21, 3), (100, 10)],
)
def test_default_max_unavailable(replicas: int, expected: int) -> None:
    """10% (rounded up) over 10 replicas, 2 for 4 to 10, 1 below."""
    assert max_unavailable(replicas, None) == expected
    assert max_migrating(replicas, None) == expected


def test_configured_limits_scale_and_never_reach_zero() -> None:
    assert max_unavailable(10, "25%") == 3
    assert max_unavailable(10, 5) == 5
    assert max_unavailable(3, "10%") == 1
    assert max_migrating(10, 0) == 1
    assert max_migrating(40, "5%") == 2


def test_defaults_are_koordinators() -> None:
    args = MigrationControllerArgs()
    assert args.max_migrating_per_node == 2
    assert args.max_migrating_per_namespace is None
    assert args.max_migrating_globally is None
    assert args.evict_qps == 10
    assert args.evict_burst == 1
    assert args.object_limiters["workload"].window() == timedelta(minutes=5)
    assert args.default_job_ttl == "5m"


def test_koordinators_names_are_read() -> None:
    """Koordinator writes the acronyms whole (``defaultJobTTL``, ``evictQPS``)."""
    args = MigrationControllerArgs.from_dict({"defaultJobTTL": "60s", "evictQPS": 5})
    assert args.default_job_ttl == "60s"
    assert args.evict_qps == 5


def test_unknown_args_are_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="maxMigratingPerZone"):
        MigrationControllerArgs.from_dict({"maxMigratingPerZone": 1})


def pod(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web",
                    "uid": "rs-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        body[section][field] = value
    return body


def test_a_replicaset_pod_may_move() -> None:
    assert refusal(pod(), MigrationControllerArgs()) is None


@pytest.mark.parametrize(
    ("changes", "args", "says"),
    [
        ({"metadata__ownerReferences": []}, {}, "bare pod"),
        ({"spec__priority": 2_000_000_000}, {}, "evictSystemCriticalPods"),
        ({"spec__volumes": [{"name": "v", "emptyDir": {}}]}, {}, "evictLocalStoragePods"),
        (
            {"spec__volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "x"}}]},
            {"ignorePvcPods": True},
            "ignorePvcPods",
        ),
        ({"spec__priority": 100}, {"priorityThreshold": {"value": 100}}, "priorityThreshold 100"),
        ({}, {"namespaces": {"exclude": ["shop"]}}, "namespace shop"),
        ({}, {"labelSelector": {"matchLabels": {"app": "db"}}}, "labelSelector"),
    ],
)
def test_filters_refuse_naming_the_rule(
    changes: dict[str, Any], args: dict[str, Any], says: str
) -> None:
    why = refusal(pod(**changes), MigrationControllerArgs.from_dict(args))
    assert why is not None
    assert says in why


def test_filters_can_be_opened() -> None:
    args = MigrationControllerArgs.from_dict(
        {"evictSystemCriticalPods": True, "evictLocalStoragePods": True}
    )
    critical = pod(spec__priority=2_000_000_000, spec__volumes=[{"name": "v", "emptyDir": {}}])
    assert refusal(critical, args) is None
    failed_bare = pod(metadata__ownerReferences=[], status__phase="Failed")
    assert refusal(failed_bare, MigrationControllerArgs(evict_failed_bare_pods=True)) is None


def passed(job: str, node: str = "n1", workload: str | None = "rs-1", **kw: Any) -> Passed:
    values: dict[str, Any] = {
        "at": NOW - timedelta(minutes=10),
        "namespace": "shop",
        "pod": f"pod-{job}",
    }
    values.update(kw)
    return Passed(job=job, node=node, workload=workload, **values)


WEB = Workload(uid="rs-1", kind="ReplicaSet", name="web", replicas=6, unavailable=frozenset())


def test_per_node_limit_holds_the_third_job() -> None:
    args = MigrationControllerArgs()
    running = [passed("a", workload="x"), passed("b", workload="y")]
    why = hold(passed("c", workload=None), None, running, running, args, NOW)
    assert why is not None
    assert why.startswith("maxMigratingPerNode 2 reached on node n1")
    assert hold(passed("c", node="n2", workload=None), None, running, running, args, NOW) is None


def test_global_and_namespace_limits() -> None:
    running = [passed("a", node="n1", workload=None), passed("b", node="n2", workload=None)]
    candidate = passed("c", node="n3", workload=None)
    args = MigrationControllerArgs(max_migrating_globally=2)
    assert "maxMigratingGlobally 2" in (hold(candidate, None, running, running, args, NOW) or "")
    args = MigrationControllerArgs(max_migrating_per_namespace=1)
    assert "maxMigratingPerNamespace 1" in (
        hold(candidate, None, running, running, args, NOW) or ""
    )


def test_per_workload_limits() -> None:
    args = MigrationControllerArgs()
    running = [passed("a", node="n2"), passed("b", node="n3")]
    why = hold(passed("c", node="n4"), WEB, running, running, args, NOW)
    assert why is not None
    assert why.startswith("maxMigratingPerWorkload 2 reached for ReplicaSet")
    # Unavailable pods count with migrating ones.
    sick = Workload(
        uid="rs-1", kind="ReplicaSet", name="web", replicas=6, unavailable=frozenset({"web-9"})
    )
    why = hold(passed("c", node="n4"), sick, running[:1], running[:1], args, NOW)
    assert why is not None
    assert why.startswith("maxUnavailablePerWorkload 2 reached")
    assert hold(passed("c", node="n4"), WEB, running[:1], running[:1], args, NOW) is None


def test_a_workload_as_small_as_its_limit_is_held_unless_told() -> None:
    one = Workload(uid="rs-1", kind="ReplicaSet", name="web", replicas=1, unavailable=frozenset())
    why = hold(passed("c"), one, [], [], MigrationControllerArgs(), NOW)
    assert why is not None
    assert "skipCheckExpectedReplicas" in why
    args = MigrationControllerArgs(skip_check_expected_replicas=True)
    assert hold(passed("c"), one, [], [], args, NOW) is None


def test_the_workload_limiter_counts_migrations_within_its_window() -> None:
    args = MigrationControllerArgs()
    done = [passed("a", at=NOW - timedelta(minutes=1)), passed("b", at=NOW - timedelta(minutes=2))]
    why = hold(passed("c"), WEB, [], done, args, NOW)
    assert why is not None
    assert "allows 2 migrations of ReplicaSet shop/web per 5m" in why
    old = [passed("a", at=NOW - timedelta(minutes=6)), done[1]]
    assert hold(passed("c"), WEB, [], old, args, NOW) is None


def test_the_arbitration_record_round_trips_through_annotations() -> None:
    record = passed("c", at=NOW)
    job = PodMigrationJob.from_dict(
        {
            "metadata": {"name": "c", "annotations": passed_annotations(record)},
            "spec": {"podRef": {"namespace": "shop", "name": "pod-c"}},
        }
    )
    assert passed_of(job) == record
    job.metadata.annotations = {}
    assert passed_of(job) is None


def test_eviction_rate_is_ten_a_second_with_a_burst_of_one() -> None:
    bucket = TokenBucket(10, 1)
    assert bucket.take(100.0) == 0
    assert bucket.take(100.0) == pytest.approx(0.1)
    assert bucket.take(100.05) == pytest.approx(0.05)
    assert bucket.take(100.2) == 0
