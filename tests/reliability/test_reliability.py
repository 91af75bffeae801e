"""Randomized churn and crashes against a real `berth run` (scheduler and operators, the
installed profile, with reclaim reserving before it evicts), judged throughout by an
independent checker (checker.py): safety every second, liveness with stated bounds (a
placeable pod is bound within 30 s, a pod within its quota's min, flat or in the quota
tree, within 45 s by reclaim, reservation transitions within 30 s), and the at-rest checks
after the load; the gangs' rules (gang_invariants.py), the NUMA zones'
(numa_invariants.py), the PodMigrationJobs' (migration_invariants.py) and load-aware
placement's (load_invariants.py) beside them.

The short variants run in the suite (alone: tox -e reliability-short); `--long`
(tox -e reliability) runs 200+ nodes and thousands of pods. Each test prints its counts:
pods, bindings per namespace, evictions judged, kills, checks, violations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.integration.processes import BerthRun
from tests.reliability.harness import (
    Outcome,
    Scale,
    berth_run,
    churn_config,
    churn_namespaces,
    churned,
    short,
)

SHORT = Scale(nodes=20, seconds=45, per_second=25, kills=20)
# The long variants together run about 30 minutes (13 minutes of load each), with as
# many pods per node at most as the short ones reach (about 10), so that the Pending
# backlog stays what the short runs see instead of growing to thousands.
LONG = Scale(nodes=220, seconds=780, per_second=40, kills=60, pods_per_node=10)


@pytest.fixture
def scale(request: pytest.FixtureRequest) -> Scale:
    return LONG if request.config.getoption("long") else SHORT


@pytest.fixture
async def namespaces(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """The test's namespace (no quota), two more with a flat ElasticQuota each and two
    for the quota tree's children."""
    async with churn_namespaces(api, namespace) as names:
        yield names


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with the churn's scheduler configuration, under this test's name."""
    process = berth_run(kubeconfig_path, churn_config(short(namespace)), tmp_path)
    try:
        yield process
    finally:
        process.stop()


def admitted_everywhere(outcome: Outcome, namespaces: list[str], gangs: int) -> None:
    """A churn that admits nothing (or nothing in some namespace, or too few gangs)
    proves nothing."""
    for namespace in namespaces:
        assert outcome.checker.bound_per_namespace[namespace] >= 10, namespace
    assert outcome.checker.counts["checks"] > 10
    assert outcome.gangs.counts["gangs placed"] >= gangs


def tree_exercised(outcome: Outcome, *, reclaims: bool = True) -> None:
    """A churn in which no child of the quota tree borrowed (or, ``reclaims``, none got
    its min back by reclaim) judged the tree's rules on nothing."""
    counts = outcome.checker.counts
    assert counts["tree borrows"] > 0, "no tree quota borrowed"
    assert not reclaims or counts["tree reclaims"] > 0, "no tree reclaim was judged"


def numa_exercised(outcome: Outcome) -> None:
    """A churn that bound no exclusive pod on a NUMA node judged its zones on nothing."""
    assert outcome.numa.counts["exclusive pods bound on numa nodes"] > 0, "no NUMA pod bound"


def migrations_exercised(outcome: Outcome, *, moved: bool = True) -> None:
    """A churn that made no PodMigrationJob (or, ``moved``, in which none moved its pod)
    judged reserve first and maxUnavailable on nothing."""
    assert outcome.churn.counts["migration jobs created"] > 0, "no migration job made"
    counts = outcome.migrations.counts()
    assert not moved or counts["migrations succeeded"] > 0, f"no migration succeeded: {counts}"


def load_exercised(outcome: Outcome, *, balanced: bool = True) -> None:
    """A churn in which no node ran hot (or no binding was judged against the reports, or,
    ``balanced``, the balancer moved nothing off a hot node) judged load-aware placement
    on nothing."""
    counts = outcome.load.counts
    assert outcome.node_load.counts["load spikes"] > 0, "no node was made hot"
    assert counts["hot reports seen"] > 0, "no hot report was seen"
    assert counts["bindings judged against reports"] > 0, "no binding judged against reports"
    assert not balanced or counts["jobs made by the balancer"] > 0, "the balancer made no job"


# The kills wait for each restart to sync, which on a loaded machine takes longer than the
# suite's default timeout; the long variants take up to an hour either way.
@pytest.mark.timeout(3600)
async def test_churn_keeps_every_invariant(
    api: ApiClient, namespaces: list[str], berth: BerthRun, scale: Scale
) -> None:
    outcome = await churned(api, namespaces, berth, scale)
    text = outcome.report("churn")
    assert outcome.churn.counts["pods created"] > 100
    admitted_everywhere(outcome, namespaces, gangs=3)
    tree_exercised(outcome)
    numa_exercised(outcome)
    migrations_exercised(outcome)
    load_exercised(outcome)
    assert outcome.found == [], text


@pytest.mark.timeout(3600)
async def test_crashes_keep_every_invariant(
    api: ApiClient, namespaces: list[str], berth: BerthRun, scale: Scale
) -> None:
    outcome = await churned(api, namespaces, berth, scale, crash=True)
    text = outcome.report("crash")
    assert outcome.kills >= scale.kills
    # Killed every few seconds, the scheduler places a gang now and then only.
    admitted_everywhere(outcome, namespaces, gangs=1)
    tree_exercised(outcome, reclaims=False)
    numa_exercised(outcome)
    # Its scheduler is down most of the time: a job may not get to move its pod.
    migrations_exercised(outcome, moved=False)
    load_exercised(outcome, balanced=False)
    assert outcome.found == [], text
