"""Coscheduling without a cluster: its args as scheduler-plugins defaults and validates
them, its configurations loading unchanged, and gangs through the scheduling loop: placed
whole or not at all, their quota checked once, nothing held while they wait."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from berth.gang import hold, workload
from berth.kubectl.why import report
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.cache.reservations import ReservationBook
from berth.scheduler.cache.view import ClusterView
from berth.scheduler.config import ConfigError, Profile, load, parse
from berth.scheduler.framework.interface import CycleState
from berth.scheduler.metrics import SchedulerMetrics
from berth.scheduler.plugins.coscheduling import CoschedulingArgs
from berth.scheduler.plugins.registry import build
from tests.unit.scheduler_fixtures import Json, info, node
from tests.unit.test_schedule_one import Loop, berth_pod, reservation

COSCHEDULING = {
    "schedulerName": "berth-scheduler",
    "plugins": {
        "multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "CapacityScheduling"}]}
    },
}


def framework(profile: Json) -> Any:
    view = ClusterView()
    return build(Profile.model_validate(profile), view, ReservationBook(view))


def test_args_defaults_are_scheduler_plugins() -> None:
    args = CoschedulingArgs.parse({})
    assert args.permit_waiting_time_seconds == 60
    assert args.pod_group_backoff_seconds == 0
    assert args.pod_group_reject_percentage == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"permitWaitingTimeSeconds": -1},
            "permitWaitingTimeSeconds: Invalid value: -1: must be greater than 0",
        ),
        (
            {"podGroupBackoffSeconds": -5},
            "podGroupBackoffSeconds: Invalid value: -5: must be greater than 0",
        ),
        (
            {"podGroupRejectPercentage": 101},
            "podGroupRejectPercentage: Invalid value: 101: must be between 0 and 100",
        ),
        ({"permitWaitingTimeSeconds": "60s"}, "permitWaitingTimeSeconds"),
    ],
)
def test_args_are_validated_with_upstream_messages(args: Json, message: str) -> None:
    profile = {**COSCHEDULING, "pluginConfig": [{"name": "Coscheduling", "args": args}]}
    with pytest.raises(ConfigError, match=f"pluginConfig Coscheduling: {message}"):
        framework(profile)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"podGroupRejectPercent": 10},
            "podGroupRejectPercent: unknown field of CoschedulingArgs; did you mean "
            "podGroupRejectPercentage?",
        ),
        (
            {"defaultTimeout": "600s"},
            "defaultTimeout: not supported: Koordinator's Coscheduling argument",
        ),
    ],
)
def test_unknown_and_koordinator_s_args_are_refused_by_name(args: Json, message: str) -> None:
    profile = {**COSCHEDULING, "pluginConfig": [{"name": "Coscheduling", "args": args}]}
    with pytest.raises(ValueError, match=f"pluginConfig\\[0\\].args.{message}"):
        framework(profile)


SCHEDULER_PLUGINS_SAMPLE = """
apiVersion: kubescheduler.config.k8s.io/v1beta3
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
  plugins:
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
    preFilter:
      enabled:
      - name: Coscheduling
    postFilter:
      enabled:
      - name: Coscheduling
    permit:
      enabled:
      - name: Coscheduling
    reserve:
      enabled:
      - name: Coscheduling
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 10
      podGroupBackoffSeconds: 5
"""


def test_scheduler_plugins_sample_configuration_loads_unchanged() -> None:

    config = parse(yaml.safe_load(SCHEDULER_PLUGINS_SAMPLE))
    fwk = framework(config.profiles[0].model_dump(by_alias=True))
    assert [p.name for p in fwk.permit] == ["Coscheduling"]
    assert fwk.group is fwk.instances["Coscheduling"]
    assert fwk.group.backoff.seconds == 5


def test_coscheduling_cannot_be_disabled_at_a_point_it_folds() -> None:
    profile = {
        "plugins": {
            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
            "postFilter": {"disabled": [{"name": "Coscheduling"}]},
        }
    }
    with pytest.raises(ConfigError, match="Coscheduling cannot be disabled at postFilter"):
        framework(profile)


# -- gangs through the loop ---------------------------------------------------------------


def pod_group(name: str, min_member: int, **spec: Any) -> Json:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}"},
        "spec": {"minMember": min_member, **spec},
    }


def member(name: str, group: str, cpu: str = "1") -> Json:
    raw = berth_pod(name, cpu)
    raw["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return raw


def quota(cpu: str) -> Json:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "default", "uid": "q"},
        "spec": {"min": {"cpu": cpu}, "max": {"cpu": cpu}},
    }


def gang_loop(*objects: Json, groups: tuple[Json, ...] = (), quotas: tuple[Json, ...] = ()) -> Loop:
    loop = Loop(profile=COSCHEDULING)
    for obj in groups:
        loop.parts.events.on_custom("PodGroup")("ADDED", obj)
    for obj in quotas:
        loop.parts.events.on_custom("ElasticQuota")("ADDED", obj)
    for obj in objects:
        if obj["kind"] == "Node":
            loop.parts.events.on_node("ADDED", obj)
        else:
            loop.parts.events.on_pod("ADDED", obj)
    return loop


def bound(loop: Loop) -> dict[str, str]:
    return dict(c[1] for c in loop.writer.calls if c[0] == "bind")


def reasons(loop: Loop, pod: str) -> list[str]:
    return [c[1][1] for c in loop.writer.calls if c[0] == "unschedulable" and c[1][0] == pod]


async def drain(loop: Loop) -> None:
    while loop.queue.counts()["active"]:
        await loop.attempt()


async def test_a_gang_that_fits_is_bound_whole_and_none_before_its_quorum() -> None:
    loop = gang_loop(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        member("a", "train"),
        member("b", "train"),
        groups=(pod_group("train", 3),),
    )
    await drain(loop)
    assert bound(loop) == {}  # two of three: nothing bound
    assert "PodGroup default/train is waiting for members: 2 of 3 (minMember) exist" in reasons(
        loop, "a"
    )
    assert loop.parts.view.assumed == {}
    loop.parts.events.on_pod("ADDED", member("c", "train"))
    await drain(loop)
    assert sorted(bound(loop)) == ["a", "b", "c"]
    assert loop.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


async def test_a_gang_that_does_not_fit_holds_nothing_and_says_why_on_every_member() -> None:
    loop = gang_loop(
        node("n1", cpu="2"),
        *(member(n, "train") for n in "abc"),
        groups=(pod_group("train", 3),),
    )
    await drain(loop)
    assert bound(loop) == {}
    assert loop.parts.view.assumed == {}
    assert loop.parts.view.nodes.requested[0, 0] == 0  # nothing left counted on the node
    for name in "abc":
        [why, *_] = reasons(loop, name)
        assert why.startswith("PodGroup default/train cannot be placed: 2 of the 3 members")
        assert "Insufficient cpu" in why
    assert loop.queue.counts()["unschedulable"] == 3
    events = [c[1] for c in loop.writer.calls if c[0] == "event" and c[1][0] == "PodGroup"]
    assert events[0][2] == "NoPlacement"


async def test_two_gangs_on_one_quota_one_placed_whole_the_other_holds_no_quota() -> None:
    loop = gang_loop(
        node("n1", cpu="8"),
        *(member(f"a{i}", "first", "1") for i in range(3)),
        *(member(f"b{i}", "second", "1") for i in range(3)),
        groups=(pod_group("first", 3), pod_group("second", 3)),
        quotas=(quota("5"),),
    )
    await drain(loop)
    assert sorted(bound(loop)) == ["a0", "a1", "a2"]
    capacity: Any = loop.parts.profile().framework.instances["CapacityScheduling"]
    assert capacity.ledger.used_of("default")["cpu"] == 3000  # the first gang's, only
    [why, *_] = reasons(loop, "b0")
    assert why.startswith("PodGroup default/second is waiting for quota for its 3 members")
    assert "ElasticQuota default is more than Max (cpu: 3 used + 3 requested > 5)" in why


async def test_a_gang_s_own_nominations_are_not_held_against_its_quota() -> None:
    """A gang of three 1-cpu members that preempted is nominated, member by member; its
    quota (3 cpu) fits the three. Its members' nominations are its demand, not others':
    counted besides it (3 requested + 2 nominated > 3), the gang waited for quota it held
    itself, and its nominations kept that share from every other pod for good."""
    loop = gang_loop(
        node("n1", cpu="8"),
        *(member(f"a{i}", "train") for i in range(3)),
        groups=(pod_group("train", 3),),
        quotas=(quota("3"),),
    )
    view = loop.parts.view
    for uid in [u for u, p in view.pods.items() if p.name.startswith("a")]:
        view.nominate(view.pods[uid], "n1")
    await drain(loop)
    assert sorted(bound(loop)) == ["a0", "a1", "a2"], reasons(loop, "a0")


async def test_a_member_without_its_podgroup_waits_saying_so() -> None:
    loop = gang_loop(node("n1", cpu="2"), member("a", "missing"))
    await drain(loop)
    assert bound(loop) == {}
    assert "PodGroup default/missing not found" in reasons(loop, "a")[0]


async def test_a_large_gang_backs_off_and_smaller_pods_behind_it_are_placed() -> None:
    profile = {
        **COSCHEDULING,
        "pluginConfig": [{"name": "Coscheduling", "args": {"podGroupBackoffSeconds": 60}}],
    }
    loop = Loop(profile=profile)
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("big", 4))
    loop.parts.events.on_node("ADDED", node("n1", cpu="3"))
    for name in ("g0", "g1", "g2", "g3"):
        loop.parts.events.on_pod("ADDED", member(name, "big"))
    loop.parts.events.on_pod("ADDED", berth_pod("small", "1"))
    await drain(loop)
    assert bound(loop) == {"small": "n1"}
    # Room freed: the gang is tried again, and is told it is backed off; its members wait
    # out the backoff, to be tried when it ends (no event would bring them back).
    loop.queue.move_all()
    await drain(loop)
    assert "failed recently and is backed off until" in reasons(loop, "g0")[-1]
    assert loop.queue.counts() == {"active": 0, "backoff": 4, "unschedulable": 0, "gated": 0}


async def test_a_gang_short_by_no_more_than_the_reject_percentage_is_not_backed_off() -> None:
    args = {"podGroupBackoffSeconds": 60, "podGroupRejectPercentage": 25}
    loop = Loop(profile={**COSCHEDULING, "pluginConfig": [{"name": "Coscheduling", "args": args}]})
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("big", 4))
    loop.parts.events.on_node("ADDED", node("n1", cpu="3"))
    for name in ("g0", "g1", "g2", "g3"):
        loop.parts.events.on_pod("ADDED", member(name, "big"))
    await drain(loop)
    assert "cannot be placed: 3 of the 4 members" in reasons(loop, "g0")[-1]
    loop.queue.move_all()  # one member short of four is 25 %: tried again, not backed off
    await drain(loop)
    assert len(reasons(loop, "g0")) == 2
    assert "cannot be placed: 3 of the 4 members" in reasons(loop, "g0")[-1]


async def test_a_podgroups_timeout_is_its_hold_else_the_plugins_wait() -> None:
    args = {"permitWaitingTimeSeconds": 20}
    loop = Loop(profile={**COSCHEDULING, "pluginConfig": [{"name": "Coscheduling", "args": args}]})
    plugin: Any = loop.parts.profile().framework.instances["Coscheduling"]
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("own", 1, scheduleTimeoutSeconds=5))
    loop.parts.events.on_custom("PodGroup")("ADDED", pod_group("plain", 1))
    for name, group in (("a", "own"), ("b", "plain")):
        loop.parts.events.on_pod("ADDED", member(name, group))
    assert plugin.group_of(info(member("a", "own"))).gang.wait_seconds == 5.0
    assert plugin.group_of(info(member("b", "plain"))).gang.wait_seconds == 20.0


async def test_members_beyond_min_member_are_placed_when_they_fit() -> None:
    loop = gang_loop(
        node("n1", cpu="3"),
        *(member(n, "train") for n in "abcd"),
        groups=(pod_group("train", 3),),
    )
    await drain(loop)
    assert len(bound(loop)) == 3
    [left] = {"a", "b", "c", "d"} - set(bound(loop))
    assert reasons(loop, left)[0].startswith("0/1 nodes are available: 1 Insufficient cpu")


async def test_min_resources_beyond_the_cluster_is_a_resource_gap() -> None:
    loop = gang_loop(
        node("n1", cpu="4"),
        *(member(n, "train") for n in "ab"),
        groups=(pod_group("train", 2, minResources={"cpu": "6"}),),
    )
    await drain(loop)
    assert bound(loop) == {}
    assert "short of cpu 2" in reasons(loop, "a")[0]


def test_permit_passes_a_member_only_within_a_placement_that_reached_the_number() -> None:
    plugin = framework(COSCHEDULING).instances["Coscheduling"]
    pod = info(member("a", "train"))
    assert not plugin.permit(CycleState(), pod, "n1").ok  # not placed with its gang
    assert not plugin.permit(CycleState(group=(2, 3)), pod, "n1").ok
    assert plugin.permit(CycleState(group=(3, 3)), pod, "n1").ok
    assert plugin.permit(CycleState(), info(berth_pod("alone", "1")), "n1").ok


async def test_gang_attempts_are_counted_under_kube_schedulers_names() -> None:
    loop = gang_loop(
        node("n1", cpu="3"),
        *(member(n, "train") for n in "ab"),
        groups=(pod_group("train", 3),),
    )
    metrics = SchedulerMetrics(["berth-scheduler"])
    loop.schedule_one.metrics = metrics
    await drain(loop)
    loop.parts.events.on_pod("ADDED", member("c", "train", "500m"))
    await drain(loop)
    assert len(bound(loop)) == 3

    def attempts(result: str) -> float | None:
        labels = {"result": result, "profile": "berth-scheduler"}
        return metrics.registry.get_sample_value(
            "scheduler_podgroup_schedule_attempts_total", labels
        )

    assert attempts("scheduled") == 1
    assert attempts("unschedulable") == 1  # a and b decided together: short of members
    assert (
        metrics.registry.get_sample_value(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds_count", {}
        )
        == 2
    )


async def test_a_members_failed_binding_retries_into_the_same_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hold, "FIRST_RETRY_SECONDS", 0.0)
    loop = gang_loop(
        node("n1", cpu="2"),
        *(member(n, "train") for n in "ab"),
        groups=(pod_group("train", 2),),
    )
    original = loop.writer.bind
    refused: list[str] = []

    async def bind_once_refused(pod: PodInfo, where: str) -> None:
        if pod.name == "b" and not refused:
            refused.append(where)
            assert loop.parts.view.assumed.get(pod.uid) == where  # still held meanwhile
            raise ApiException(status=500, reason="Internal Server Error")
        await original(pod, where)

    loop.writer.bind = bind_once_refused  # type: ignore[method-assign]
    await drain(loop)
    assert bound(loop) == {"a": "n1", "b": "n1"}
    assert refused == ["n1"]
    assert loop.writer.events("FailedScheduling") == []


def koordinator_member(name: str, gang: str, minimum: str = "2", cpu: str = "1") -> Json:
    raw = berth_pod(name, cpu)
    raw["metadata"]["annotations"] = {
        "gang.scheduling.koordinator.sh/name": gang,
        "gang.scheduling.koordinator.sh/min-available": minimum,
    }
    return raw


async def test_a_koordinator_gang_is_placed_whole_by_the_same_cycle() -> None:
    loop = gang_loop(node("n1", cpu="2"), koordinator_member("a", "train"))
    await drain(loop)
    assert bound(loop) == {}
    assert reasons(loop, "a") == [
        "Gang default/train is waiting for members: 1 of 2 (minMember) exist"
    ]
    loop.parts.events.on_pod("ADDED", koordinator_member("b", "train"))
    await drain(loop)
    assert bound(loop) == {"a": "n1", "b": "n1"}


async def test_a_koordinator_gang_that_does_not_fit_binds_nothing() -> None:
    loop = gang_loop(node("n1", cpu="2"), *(koordinator_member(n, "train", "3") for n in "abc"))
    await drain(loop)
    assert bound(loop) == {}
    assert reasons(loop, "c")[0].startswith("Gang default/train cannot be placed: 2 of the 3")


async def test_a_koordinator_gang_berth_cannot_read_waits_saying_why() -> None:
    raw = koordinator_member("a", "train")
    raw["metadata"]["annotations"]["gang.scheduling.koordinator.sh/groups"] = "default/x"
    loop = gang_loop(node("n1", cpu="2"), raw)
    await drain(loop)
    assert bound(loop) == {}
    assert reasons(loop, "a") == [
        "default/a: annotation gang.scheduling.koordinator.sh/groups must be a JSON list of "
        "\"namespace/name\", not 'default/x'"
    ]


GROUP_KEY = "gang.scheduling.koordinator.sh/groups"


def grouped(name: str, gang: str, cpu: str = "1") -> Json:
    """A member of a 2-member Koordinator gang in the gang group of train and eval."""
    raw = koordinator_member(name, gang, cpu=cpu)
    raw["metadata"]["annotations"][GROUP_KEY] = '["default/train", "default/eval"]'
    return raw


async def test_a_gang_group_is_placed_only_when_every_gang_of_it_can_be() -> None:
    loop = gang_loop(
        node("n1", cpu="8"), grouped("t0", "train"), grouped("t1", "train"), grouped("e0", "eval")
    )
    await drain(loop)
    assert bound(loop) == {}  # train could go alone; eval has 1 of its 2
    [why, *_] = reasons(loop, "t0")
    assert why == (
        "Gang default/train's gang group: Gang default/eval is waiting for members: 1 of 2 "
        "(minMember) exist"
    )
    loop.parts.events.on_pod("ADDED", grouped("e1", "eval"))
    await drain(loop)
    assert sorted(bound(loop)) == ["e0", "e1", "t0", "t1"]


async def test_a_gang_group_that_does_not_fit_whole_binds_nothing() -> None:
    loop = gang_loop(
        node("n1", cpu="5"),
        *(grouped(n, "train", cpu="2") for n in ("t0", "t1")),
        *(grouped(n, "eval", cpu="1") for n in ("e0", "e1")),
    )
    await drain(loop)
    assert bound(loop) == {}  # either gang fits alone (4 or 2 of 5 cpu), not both
    assert loop.parts.view.assumed == {}
    assert loop.parts.view.nodes.requested[0, 0] == 0
    # train (first by creation) is placed, then eval finds 1 cpu left: both are taken back.
    for member in ("t0", "e0"):
        assert reasons(loop, member)[0].startswith(
            "Gang default/train's gang group: Gang default/eval cannot be placed: 1 of the 2 "
            "members it needs fit; default/e1: 0/1 nodes are available: 1 Insufficient cpu."
        )


async def test_a_podgroup_and_a_koordinator_gang_of_one_name_are_two_gangs() -> None:
    loop = gang_loop(
        node("n1", cpu="4"),
        member("a", "train"),
        koordinator_member("b", "train", "1"),
        groups=(pod_group("train", 2),),
    )
    await drain(loop)
    assert bound(loop) == {"b": "n1"}  # the annotated gang of one; the PodGroup waits
    assert "PodGroup default/train is waiting for members: 1 of 2" in reasons(loop, "a")[0]


async def test_why_a_gang_waits_is_recorded_for_kubectl_berth_why() -> None:
    loop = gang_loop(
        node("n1", cpu="8"),
        *(member(f"a{i}", "first", "1") for i in range(3)),
        *(member(f"b{i}", "second", "1") for i in range(3)),
        groups=(pod_group("first", 3), pod_group("second", 3)),
        quotas=(quota("5"),),
    )
    await drain(loop)
    waiting = next(
        d
        for name in ("a0", "b0")
        if (d := loop.schedule_one.decisions.get("default", name)) is not None
    )
    text = report(waiting.to_json())
    assert "Refused before any node was looked at, by Coscheduling:" in text
    assert "is waiting for quota for its 3 members: ElasticQuota default is more than Max" in text
    assert "room in the quota for the whole gang at once" in text


def test_the_installed_profile_places_gangs() -> None:
    installed = load(None).profiles[0]
    assert framework(installed.model_dump(by_alias=True)).group is not None


async def test_a_pod_naming_a_gang_in_both_schemes_is_told_which_decides() -> None:
    raw = member("a", "train")
    raw["metadata"]["annotations"] = koordinator_member("x", "other")["metadata"]["annotations"]
    loop = gang_loop(node("n1", cpu="2"), raw, groups=(pod_group("train", 1),))
    await drain(loop)
    await drain(loop)
    assert bound(loop) == {"a": "n1"}
    assert loop.writer.events("GangScheme") == [
        "the pod is a member of PodGroup default/train (label scheduling.x-k8s.io/pod-group); "
        "its Koordinator gang other is not used"
    ]


async def test_a_failure_inside_the_group_cycle_takes_the_gang_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = gang_loop(
        node("n1", cpu="4"), *(member(n, "train") for n in "abc"), groups=(pod_group("train", 3),)
    )
    cycle = loop.parts.profile().cycle
    schedule = cycle.schedule

    def broken_for_b(state: CycleState, pod: PodInfo) -> Any:
        if pod.name == "b":
            raise RuntimeError("a plugin's bug")
        return schedule(state, pod)

    monkeypatch.setattr(cycle, "schedule", broken_for_b)
    await drain(loop)
    assert bound(loop) == {}
    assert loop.parts.view.assumed == {}
    assert "b: the scheduler failed" in reasons(loop, "a")[0]
    assert loop.queue.counts()["unschedulable"] == 3


async def test_a_failure_before_placing_leaves_no_member_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = gang_loop(
        node("n1", cpu="4"), *(member(n, "train") for n in "ab"), groups=(pod_group("train", 2),)
    )
    plugin = loop.parts.profile().framework.instances["Coscheduling"]

    def broken(*_: Any) -> None:
        raise RuntimeError("a plugin's bug")

    monkeypatch.setattr(plugin, "before_placing", broken)
    await drain(loop)
    assert bound(loop) == {}
    assert reasons(loop, "b") == ["PodGroup default/train: the scheduler failed"]
    assert loop.queue.counts()["unschedulable"] == 2


async def test_a_gated_member_neither_counts_nor_is_placed() -> None:
    gated = member("c", "train")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    loop = gang_loop(
        node("n1", cpu="4"),
        member("a", "train"),
        member("b", "train"),
        gated,
        groups=(pod_group("train", 3),),
    )
    await drain(loop)
    assert bound(loop) == {}
    assert reasons(loop, "a") == [
        "PodGroup default/train is waiting for members: 2 of 3 (minMember) exist, 1 more "
        "held by scheduling gates"
    ]
    assert loop.queue.counts()["gated"] == 1


# -- kube-scheduler 1.36's PodGroup (scheduling.k8s.io/v1alpha2, spec.schedulingGroup) ----


def workload_group(name: str, min_count: int | None, **spec: Any) -> Json:
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"wpg-{name}"},
        "spec": {"schedulingPolicy": policy, **spec},
    }


def workload_member(name: str, group: str, cpu: str = "1") -> Json:
    raw = berth_pod(name, cpu)
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    return raw


def workload_loop(*objects: Json, groups: tuple[Json, ...] = ()) -> Loop:
    loop = gang_loop(*objects)
    for obj in groups:
        loop.parts.events.on_custom(workload.VIEW_KIND)("ADDED", obj)
    return loop


def conditions(loop: Loop) -> list[tuple[str, str, str]]:
    return [
        (c[1][1]["status"], c[1][1]["reason"], c[1][1]["message"])
        for c in loop.writer.calls
        if c[0] == "pod_group_scheduled"
    ]


async def test_a_kube_scheduler_podgroup_gang_is_bound_whole_and_none_before_min_count() -> None:
    loop = workload_loop(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        workload_member("a", "train"),
        workload_member("b", "train"),
        groups=(workload_group("train", 3),),
    )
    await drain(loop)
    assert bound(loop) == {}
    waiting = (
        "PodGroup.scheduling.k8s.io default/train is waiting for members: 2 of 3 (minCount) exist"
    )
    assert waiting in reasons(loop, "a")[0]
    assert conditions(loop)[-1][:2] == ("False", "Unschedulable")
    assert waiting in conditions(loop)[-1][2]
    loop.parts.events.on_pod("ADDED", workload_member("c", "train"))
    await drain(loop)
    assert sorted(bound(loop)) == ["a", "b", "c"]
    assert conditions(loop)[-1] == ("True", "Scheduled", "")


async def test_a_kube_scheduler_podgroup_gang_that_does_not_fit_binds_nothing() -> None:
    loop = workload_loop(
        node("n1", cpu="2"),
        *(workload_member(n, "train") for n in "abc"),
        groups=(workload_group("train", 3),),
    )
    await drain(loop)
    assert bound(loop) == {}
    assert loop.parts.view.assumed == {}
    [why, *_] = reasons(loop, "a")
    assert why.startswith("PodGroup.scheduling.k8s.io default/train cannot be placed")


@pytest.mark.parametrize(
    ("kind", "group", "join"),
    [
        ("PodGroup", pod_group("train", 3), member),
        (workload.VIEW_KIND, workload_group("train", 3), workload_member),
    ],
    ids=["scheduler-plugins", "kube-scheduler"],
)
async def test_a_podgroup_s_status_written_does_not_try_its_waiting_gang_again(
    kind: str, group: Json, join: Any
) -> None:
    """The Scheduled or PodGroupScheduled condition written about a waiting gang changes
    no answer; its spec changed does."""
    loop = gang_loop(node("n1", cpu="2"), *(join(n, "train") for n in "abc"))
    loop.parts.events.on_custom(kind)("ADDED", group)
    await drain(loop)
    assert bound(loop) == {}
    assert loop.queue.counts()["unschedulable"] == 3
    condition = {"type": "Scheduled", "status": "False", "reason": "Unschedulable"}
    written = {**group, "status": {"conditions": [condition]}}
    loop.parts.events.on_custom(kind)("MODIFIED", written)
    assert loop.queue.counts()["unschedulable"] == 3
    changed = {**written, "spec": {**group["spec"], "priority": 5}}
    loop.parts.events.on_custom(kind)("MODIFIED", changed)
    assert loop.queue.counts()["unschedulable"] == 0


async def test_a_basic_podgroup_schedules_each_pod_alone() -> None:
    loop = workload_loop(
        node("n1", cpu="1"),
        *(workload_member(n, "web") for n in "ab"),
        groups=(workload_group("web", None),),
    )
    await drain(loop)
    assert len(bound(loop)) == 1  # one fits, and it binds without its sibling
    assert conditions(loop) == []


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"schedulingConstraints": {"topology": [{"key": "zone"}]}}, "schedulingConstraints"),
        ({"disruptionMode": "PodGroup"}, "spec.disruptionMode PodGroup is not supported"),
        ({"resourceClaims": [{"name": "gpu"}]}, "spec.resourceClaims is not supported"),
    ],
)
async def test_what_berth_cannot_honour_in_a_kube_scheduler_podgroup_is_refused_by_name(
    spec: Json, named: str
) -> None:
    loop = workload_loop(
        node("n1", cpu="4"),
        workload_member("a", "train"),
        groups=(workload_group("train", 1, **spec),),
    )
    await drain(loop)
    assert bound(loop) == {}
    assert named in reasons(loop, "a")[0]


async def test_a_pod_without_its_kube_scheduler_podgroup_waits_saying_so() -> None:
    loop = workload_loop(node("n1", cpu="2"), workload_member("a", "missing"))
    await drain(loop)
    assert bound(loop) == {}
    assert "PodGroup.scheduling.k8s.io default/missing not found" in reasons(loop, "a")[0]


async def test_schedulinggroup_decides_over_the_other_schemes_and_the_pod_is_told() -> None:
    raw = workload_member("a", "train")
    raw["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "other"}
    loop = workload_loop(node("n1", cpu="2"), raw, groups=(workload_group("train", 1),))
    await drain(loop)
    assert bound(loop) == {"a": "n1"}
    assert loop.writer.events("GangScheme") == [
        "the pod is a member of PodGroup.scheduling.k8s.io default/train "
        "(spec.schedulingGroup.podGroupName); its PodGroup default/other (label "
        "scheduling.x-k8s.io/pod-group) is not used"
    ]


async def test_a_gang_s_demand_is_checked_against_its_tree_quota_once() -> None:
    """A tree quota of 2 cpu and a gang of three 1-cpu members: refused as one demand before
    any member is placed (not placed two by two and undone at the third)."""
    tree = "quota.scheduling.koordinator.sh/"
    team = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "team", "namespace": "default", "uid": "eq-team",
            "labels": {f"{tree}is-parent": "false"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"min": {"cpu": "2"}, "max": {"cpu": "2"}},
    }  # fmt: skip
    members = [member(n, "train") for n in "abc"]
    for raw in members:
        raw["metadata"]["labels"][f"{tree}name"] = "team"
    loop = gang_loop(node("n1", cpu="8"), *members, groups=(pod_group("train", 3),), quotas=(team,))
    await drain(loop)
    assert bound(loop) == {}
    [why, *_] = reasons(loop, "a")
    assert why.startswith("PodGroup default/train is waiting for quota for its 3 members: ")
    assert "team" in why


# -- Reservations as gang members ---------------------------------------------------------

GANG_AND_RESERVATION = {
    "schedulerName": "berth-scheduler",
    "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "Reservation"}]}},
}


def member_reservation(name: str, gang: str, cpu: str = "1") -> Json:
    """A Reservation of the gang by Koordinator's annotations on the Reservation itself."""
    raw = reservation(name, cpu)
    raw["metadata"]["annotations"] = {
        "gang.scheduling.koordinator.sh/name": gang,
        "gang.scheduling.koordinator.sh/min-available": "3",
    }
    raw["spec"]["template"]["metadata"] = {"namespace": "default"}
    return raw


def placed_reservations(loop: Loop) -> dict[str, str]:
    return {
        c[1][0]: c[1][1]["nodeName"]
        for c in loop.writer.calls
        if c[0] == "reservation_status" and c[1][1].get("phase") == "Available"
    }


async def test_a_reservation_is_a_gang_member_placed_with_the_pods_all_or_nothing() -> None:
    loop = Loop(profile=GANG_AND_RESERVATION)
    loop.parts.events.on_node("ADDED", node("n1", cpu="2"))
    loop.parts.events.on_custom("Reservation")("ADDED", member_reservation("r", "train"))
    loop.parts.events.on_pod("ADDED", koordinator_member("a", "train", minimum="3"))
    await drain(loop)
    # Two members of three exist (the Reservation counts): nothing placed, the Reservation
    # says why as the pod does.
    assert placed_reservations(loop) == {}
    assert bound(loop) == {}
    said = [c[1] for c in loop.writer.calls if c[0] == "event" and c[1][0] == "Reservation"]
    assert "Gang default/train is waiting for members: 2 of 3" in said[-1][3]
    loop.parts.events.on_pod("ADDED", koordinator_member("b", "train", minimum="3"))
    await drain(loop)
    # Three members on two cpus: none fits whole, nothing held by the Reservation either.
    assert placed_reservations(loop) == {}
    assert bound(loop) == {}
    assert loop.parts.view.nodes.requested[0, 0] == 0
    loop.parts.events.on_node("ADDED", node("n2", cpu="2"))
    await drain(loop)
    assert len(bound(loop)) == 2
    assert list(placed_reservations(loop)) == ["r"]


async def test_a_placed_reservation_counts_towards_its_gangs_minimum() -> None:
    loop = Loop(profile=GANG_AND_RESERVATION)
    loop.parts.events.on_node("ADDED", node("n1", cpu="4"))
    held = member_reservation("r", "train")
    held["status"] = {"phase": "Available", "nodeName": "n1"}
    loop.parts.events.on_custom("Reservation")("ADDED", held)
    for name in "ab":
        loop.parts.events.on_pod("ADDED", koordinator_member(name, "train", minimum="3"))
    await drain(loop)
    assert sorted(bound(loop)) == ["a", "b"]  # 2 pending + the Reservation placed = 3
