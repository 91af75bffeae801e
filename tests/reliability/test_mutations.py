"""The checker catches a broken Berth: each case runs the churn against `berth run` with
one rule switched off through configuration alone (a plugin disabled, a component not
run), and the checker must report the violation that rule prevents. A checker that
passed these would pass a scheduler that ignores the rule. Reserve first, which no
configuration turns off, is broken in code instead: `berth run` patched to evict at once
(evict_early.py).

Each run stops as soon as the expected violation appears, or fails after the churn.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.integration.processes import BerthRun
from tests.reliability.checker import RECLAIM_WITHIN
from tests.reliability.harness import (
    Outcome,
    Scale,
    berth_run,
    churn_config,
    churn_namespaces,
    churned,
    short,
)

SCALE = Scale(nodes=12, seconds=90, per_second=20, kills=0)


@dataclass(frozen=True)
class Mutation:
    """How Berth is broken, and (a pattern of) the violation the checker must then report."""

    change: Callable[[dict[str, Any]], None]
    expected: str
    scheduler: bool = True
    operators: bool = True
    node_deletions: bool = True
    seconds: float = SCALE.seconds
    quiet: float = 0.0  # seconds the checker goes on after the load
    reclaim_finale: bool = False  # see Churn.lend_and_reclaim
    module: str | None = None  # run in place of Berth's CLI


def disable(*names: str, point: str = "multiPoint") -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        plugins = config["profiles"][0].setdefault("plugins", {})
        at = plugins.setdefault(point, {})
        at.setdefault("disabled", []).extend({"name": n} for n in names)
        enabled = at.get("enabled") or []
        at["enabled"] = [e for e in enabled if e["name"] not in names]

    return change


def quota_blind_preemption(config: dict[str, Any]) -> None:
    """Priority preemption in place of the quota rules."""
    disable("CapacityScheduling", point="postFilter")(config)
    plugins = config["profiles"][0]["plugins"]
    multi = plugins["multiPoint"]
    multi["disabled"] = [d for d in multi["disabled"] if d["name"] != "DefaultPreemption"]


def unchanged(_config: dict[str, Any]) -> None:
    pass


def evicting_before_reserving(config: dict[str, Any]) -> None:
    """Reclaim evicts at once, with no Reservation of its preemptor made first."""
    for entry in config["profiles"][0]["pluginConfig"]:
        if entry["name"] == "Reservation":
            entry["args"]["reservePreemptedCapacity"] = False


def numa_ledger_off(config: dict[str, Any]) -> None:
    """NUMA zones read as reported, with no pod counted pending."""
    for entry in config["profiles"][0]["pluginConfig"]:
        if entry["name"] == "NodeResourceTopologyMatch":
            entry["args"]["cacheResyncPeriodSeconds"] = 0


MUTATIONS = {
    "taints ignored": Mutation(disable("TaintToleration"), "despite untolerated"),
    # A cordon reaches a scheduler twice: spec.unschedulable (NodeUnschedulable) and the
    # node.kubernetes.io/unschedulable taint the node lifecycle controller adds for it
    # within moments (TaintToleration). Ignoring the cordon is ignoring both.
    # A node cordoned for more than SLACK with room on it, and a pod bound there: a churn
    # of 90 s made one in some runs and none in others.
    "cordon ignored": Mutation(
        disable("NodeUnschedulable", "TaintToleration"), "after it was cordoned", seconds=240
    ),
    "node affinity ignored": Mutation(disable("NodeAffinity"), "nodeSelector/affinity not met"),
    "capacity ignored": Mutation(disable("NodeResourcesFit"), "allocatable"),
    # Two pods of one namespace that exclude each other by zone, both bound SLACK apart:
    # likewise.
    "pod anti-affinity ignored": Mutation(
        disable("InterPodAffinity"), "anti-affinity", seconds=240
    ),
    # The default scores spread pods too: a skew past maxSkew needs the churn to crowd a
    # zone, which 90 s does not always do (stopped as soon as it is caught).
    "topology spread ignored": Mutation(disable("PodTopologySpread"), "skew", seconds=240),
    "quotas ignored": Mutation(disable("CapacityScheduling"), "sum of mins"),
    # Without node deletions: a reservation is reported once one node has had room for it
    # throughout the bound, and the nodes kept for reservations were deleted before that
    # in some runs.
    "reservations ignored": Mutation(
        disable("Reservation"), r"^reservation \S+ Pending", node_deletions=False
    ),
    # Without node deletions: pods left on a deleted node count for their quota until
    # they are collected, which keeps the quotas from the state reclaim is about. Under
    # the load, deletions give a quota under its min its room soon enough without any
    # reclaim; after it, only a reclaim would: the checker goes on past its bound. The
    # load's end did not always leave a quota within its min waiting (once in a whole
    # pass, the longest such wait was 35 s): the finale makes one borrow the other's
    # min and the other's pods come back.
    "no reclaim": Mutation(
        disable("CapacityScheduling", point="postFilter"),
        "quota's min",
        node_deletions=False,
        quiet=RECLAIM_WITHIN + 30,
        reclaim_finale=True,
    ),
    "quota-blind preemption": Mutation(quota_blind_preemption, "preempted"),
    # Without Coscheduling a gang's members would be refused by name (PlacementFields):
    # with both off they are placed one by one, each as soon as it fits.
    "gangs placed pod by pod": Mutation(
        disable("Coscheduling", "PlacementFields"), "of minimum|each partly placed"
    ),
    # The same, caught by the second gang invariant alone: two gangs each holding part of
    # the room while their other members wait. That takes two gangs short of room at
    # once, which a 90 s churn does not always bring about: it gets longer (the run stops
    # as soon as it is caught).
    "gangs placed pod by pod, two at once": Mutation(
        disable("Coscheduling", "PlacementFields"), "each partly placed", seconds=240
    ),
    # The quota tree. CapacityScheduling off: the tree's children and its parent fill up
    # past their max (the tree's line, not the flat quotas' sum of mins). Once, in a whole
    # pass, 90 s of load kept the parent within its max (caught after 6 looks alone): 240 s,
    # stopping as soon as caught.
    "tree quotas ignored": Mutation(
        disable("CapacityScheduling"), "its subtree's bound pods use", seconds=240
    ),
    # No reclaim: a child whose pods came back within its min waits while its sibling
    # holds what it borrowed. As for "no reclaim", only after the load is that surely so.
    # The load ends 95 s in, within a turn in which a child's pods come back (churn.py's
    # TREE_TURN_SECONDS): the next turn would delete them.
    "no tree reclaim": Mutation(
        disable("CapacityScheduling", point="postFilter"),
        "a reclaim in its quota tree would place it",
        node_deletions=False,
        seconds=95,
        quiet=RECLAIM_WITHIN + 30,
    ),
    # A victim of the tree's children (namespaces -t1, -t2) evicted before any Reservation.
    "tree reclaim without a reservation": Mutation(
        evicting_before_reserving, r"^Pod \S+-t\d/\S+ was evicted to reclaim quota"
    ),
    # NUMA: the churn's topologies are never reported again, so with the plugin off, or
    # with its pending ledger off (each zone then looks as empty as when it was written),
    # exclusive pods pile onto a NUMA node past its largest zone.
    "numa ignored": Mutation(disable("NodeResourceTopologyMatch"), "largest NUMA zone"),
    "numa pending ledger off": Mutation(numa_ledger_off, "largest NUMA zone"),
    # Load-aware placement: pods bound to a node its NodeMetric says is hot (node_load.py
    # makes one so for 20 s every 30 s).
    "load ignored": Mutation(disable("LoadAwareScheduling"), "while its NodeMetric said"),
    # A migration's pod evicted as its reservation is made: caught once the reservation
    # is placed a second or more after the eviction, or never.
    "migrations evicting before reserving": Mutation(
        unchanged, r"^migration \S+: pod \S+ evicted by", module="tests.reliability.evict_early"
    ),
    "no scheduler": Mutation(unchanged, "some node could take it", scheduler=False),
    "no operators": Mutation(unchanged, "reservation", operators=False),
}


@pytest.fixture
async def namespaces(api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    async with churn_namespaces(api, namespace) as names:
        yield names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(MUTATIONS))
async def test_the_checker_catches_a_broken_berth(
    name: str,
    api: ApiClient,
    kubeconfig_path: str,
    crds: None,
    namespaces: list[str],
    tmp_path: Path,
) -> None:
    mutation = MUTATIONS[name]
    config = churn_config(short(namespaces[0]))
    mutation.change(config)
    berth = berth_run(
        kubeconfig_path,
        config,
        tmp_path,
        mutation.module,
        scheduler=mutation.scheduler,
        operators=mutation.operators,
    )

    def caught(found: list[str]) -> bool:
        return any(re.search(mutation.expected, line) for line in found)

    outcome = await _churned_as(mutation, api, namespaces, berth, caught)
    text = outcome.report(f"mutation {name!r}")
    assert caught(outcome.found), text


@pytest.mark.timeout(600)
async def test_unbroken_berth_reclaims_what_the_finale_lent(
    api: ApiClient,
    kubeconfig_path: str,
    crds: None,
    namespaces: list[str],
    tmp_path: Path,
) -> None:
    """The control of "no reclaim": with Berth whole, the pods the finale makes within
    their quota's min are placed by a reclaim within the bound, so the case's report is
    the broken rule's, not a situation no scheduler could resolve."""
    mutation = MUTATIONS["no reclaim"]
    berth = berth_run(kubeconfig_path, churn_config(short(namespaces[0])), tmp_path, None)
    outcome = await _churned_as(mutation, api, namespaces, berth, lambda _found: False)
    text = outcome.report("unbroken, with the reclaim finale")
    assert outcome.churn.counts["finale pods made within min"] > 0, text
    assert not [line for line in outcome.found if re.search(mutation.expected, line)], text


async def _churned_as(
    mutation: Mutation,
    api: ApiClient,
    namespaces: list[str],
    berth: BerthRun,
    until: Callable[[list[str]], bool],
) -> Outcome:
    """The churn with the case's load (length, node deletions, quiet time, finale), until
    ``until``; Berth stopped after it whatever happens."""
    try:
        return await churned(
            api,
            namespaces,
            berth,
            dataclasses.replace(SCALE, seconds=mutation.seconds),
            until=until,
            node_deletions=mutation.node_deletions,
            quiet=mutation.quiet,
            reclaim_finale=mutation.reclaim_finale,
        )
    finally:
        berth.stop()
