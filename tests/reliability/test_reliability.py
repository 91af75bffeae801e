"""Randomized churn and crashes against a real `berth run` (scheduler and operators, the
installed profile), judged throughout by an independent invariant checker.

The short variants run in the suite; `--long` (tox -e reliability) runs 200+ nodes and
thousands of pods. Each test prints its counts: pods, kills, checks, violations.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from tests.integration.processes import BerthRun
from tests.reliability.checker import snapshot, stranded, violations
from tests.reliability.churn import Churn
from tests.support import REPO, eventually


@dataclass(frozen=True)
class Scale:
    nodes: int
    seconds: float
    per_second: float
    kills: int


SHORT = Scale(nodes=20, seconds=45, per_second=25, kills=20)
LONG = Scale(nodes=220, seconds=300, per_second=40, kills=40)


def short(namespace: str) -> str:
    return "rl-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


@pytest.fixture
def scale(request: pytest.FixtureRequest) -> Scale:
    return LONG if request.config.getoption("long") else SHORT


@pytest.fixture
async def namespaces(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """The test's namespace (no quota) and two more with an ElasticQuota each."""
    core = CoreV1Api(api)
    extra = [f"{namespace[:50]}-q{i}" for i in (1, 2)]
    for name in extra:
        await core.create_namespace({"metadata": {"name": name}})
    try:
        yield [namespace, *extra]
    finally:
        for name in extra:
            await core.delete_namespace(name)


@pytest.fixture
def berth(kubeconfig_path: str, crds: None, namespace: str, tmp_path: Path) -> Iterator[BerthRun]:
    """`berth run` with the installed scheduler configuration, under this test's name."""
    configmap = yaml.safe_load((REPO / "manifests" / "scheduler-config.yaml").read_text())
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    config["leaderElection"] = {"leaderElect": False}
    config["podInitialBackoffSeconds"] = 0.5
    config["podMaxBackoffSeconds"] = 2
    config["profiles"][0]["schedulerName"] = short(namespace)
    process = BerthRun.configured(kubeconfig_path, config, tmp_path)
    try:
        yield process
    finally:
        process.stop()


async def judge(
    api: ApiClient, namespaces: list[str], stop: asyncio.Event, found: list[str], checks: list[int]
) -> None:
    """The checker, every second until ``stop``."""
    while not stop.is_set():
        found.extend(violations(await snapshot(api, namespaces)))
        checks[0] += 1
        await asyncio.sleep(1)


async def settle(api: ApiClient, namespaces: list[str], scheduler: str, found: list[str]) -> None:
    """At rest: nothing schedulable left Pending, statuses agree with the pods (30 s)."""
    last: list[str] = []

    async def at_rest() -> bool:
        snap = await snapshot(api, namespaces)
        last[:] = violations(snap, at_rest=True) + [
            f"schedulable yet Pending: {p}" for p in stranded(snap, scheduler)
        ]
        return not last

    try:
        await eventually(at_rest, within=30)
    except AssertionError:
        found.extend(last)


def report(name: str, churn: Churn, checks: int, found: list[str], kills: int = 0) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(churn.counts.items()))
    sys.stderr.write(
        f"\n{name}: {counts}, kills {kills}, invariant checks {checks}, violations {len(found)}\n"
    )
    for line in sorted(set(found))[:20]:
        sys.stderr.write(f"  {line}\n")


async def churned(
    api: ApiClient, namespaces: list[str], berth: BerthRun, scale: Scale, crash: bool
) -> tuple[Churn, int, list[str], int]:
    scheduler = short(namespaces[0])
    churn = Churn(
        api, scheduler, scheduler, namespaces[1:], namespaces[0], random.Random(scheduler)
    )
    await churn.setup(scale.nodes)
    berth.start()
    stop = asyncio.Event()
    found: list[str] = []
    checks = [0]
    checker = asyncio.create_task(judge(api, namespaces, stop, found, checks))
    kills = 0

    async def killer() -> None:
        nonlocal kills
        interval = scale.seconds / scale.kills
        rng = random.Random(scheduler + "-kills")
        while not stop.is_set() and kills < scale.kills:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * interval)
            berth.kill()
            kills += 1
            berth.start()

    killing = asyncio.create_task(killer()) if crash else None
    try:
        await churn.run(scale.seconds, scale.per_second)
        if killing is not None:
            await killing
        stop.set()
        await checker
        await settle(api, namespaces, scheduler, found)
    finally:
        stop.set()
        for task in (checker, killing):
            if task is not None and not task.done():
                task.cancel()
        await churn.close()
    return churn, checks[0], found, kills


async def test_churn_keeps_every_invariant(
    api: ApiClient, namespaces: list[str], berth: BerthRun, scale: Scale
) -> None:
    churn, checks, found, _ = await churned(api, namespaces, berth, scale, crash=False)
    report("churn", churn, checks, found)
    assert checks > 10
    assert churn.counts["pods created"] > 100
    assert found == []


async def test_crashes_keep_every_invariant(
    api: ApiClient, namespaces: list[str], berth: BerthRun, scale: Scale
) -> None:
    churn, checks, found, kills = await churned(api, namespaces, berth, scale, crash=True)
    report("crash", churn, checks, found, kills)
    assert kills >= 20
    assert found == []
