"""scheduler_perf's workloads as the benchmark builds them: nodes, pods and sizes."""

from __future__ import annotations

import pytest

from berth.bench.workloads import (
    HIGH_PRIORITY_CLASS,
    INIT_NAMESPACE,
    MEASURED_NAMESPACE,
    WORKLOADS,
    ZONE_KEY,
)
from berth.gang.workload import group_name, parse_gang
from berth.podresources import pod_requests


def test_the_issue_s_workloads_are_all_there() -> None:
    assert {
        "SchedulingBasic",
        "SchedulingPodAntiAffinity",
        "SchedulingPreferredPodAffinity",
        "TopologySpreading",
        "PreferredTopologySpreading",
        "SchedulingNodeAffinity",
        "GangScheduling",
    } <= set(WORKLOADS)


def test_sizes_keep_the_5000_node_proportions() -> None:
    # SchedulingPodAntiAffinity/5000Nodes_2000Pods: 1000 initial, 2000 measured.
    assert WORKLOADS["SchedulingPodAntiAffinity"].sizes(5000) == (1000, 2000)
    assert WORKLOADS["SchedulingPodAntiAffinity"].sizes(1000) == (200, 400)
    # SchedulingNodeAffinity/5000Nodes_10000Pods.
    assert WORKLOADS["SchedulingNodeAffinity"].sizes(5000) == (5000, 10000)
    # An explicit measured count scales the initial pods with it.
    assert WORKLOADS["SchedulingBasic"].sizes(1000, 500) == (50, 500)


def test_bound_pods_per_node_set_the_initial_pods_alone() -> None:
    # The curve of memory against pods: 10 bound a node, whatever the measured count.
    assert WORKLOADS["SchedulingBasic"].sizes(5000, 2000, bound_per_node=10) == (50000, 2000)
    assert WORKLOADS["SchedulingBasic"].sizes(500, None, bound_per_node=10) == (5000, 1000)


def test_nodes_are_scheduler_perf_s_default_node_with_round_robin_zones() -> None:
    spreading = WORKLOADS["TopologySpreading"]
    zones = [spreading.node(i)["metadata"]["labels"][ZONE_KEY] for i in range(4)]
    assert zones == ["moon-1", "moon-2", "moon-3", "moon-1"]
    node = spreading.node(7)
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "32Gi", "pods": "110"}
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
    assert ZONE_KEY not in WORKLOADS["SchedulingBasic"].node(0)["metadata"]["labels"]
    assert WORKLOADS["SchedulingNodeAffinity"].node(5)["metadata"]["labels"][ZONE_KEY] == "zone1"


def test_initial_pods_are_created_bound_round_robin() -> None:
    anti = WORKLOADS["SchedulingPodAntiAffinity"]
    pods = [anti.init_pod(i, nodes=3) for i in range(4)]
    assert [p["spec"]["nodeName"] for p in pods] == [
        "perf-node-0",
        "perf-node-1",
        "perf-node-2",
        "perf-node-0",
    ]
    assert all(p["metadata"]["namespace"] == INIT_NAMESPACE for p in pods)
    assert all("schedulerName" not in p["spec"] for p in pods)


def test_measured_pods_carry_the_templates_terms_and_the_side_s_scheduler() -> None:
    anti = WORKLOADS["SchedulingPodAntiAffinity"].measured_pod(3, "berth-scheduler")
    assert anti["metadata"] == {
        "name": "pod-3",
        "namespace": MEASURED_NAMESPACE,
        "labels": {"color": "green"},
    }
    assert anti["spec"]["schedulerName"] == "berth-scheduler"
    (term,) = anti["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"] == {"matchLabels": {"color": "green"}}
    assert sorted(term["namespaces"]) == [INIT_NAMESPACE, MEASURED_NAMESPACE]
    # On a cluster each batch of pods has names of its own (kwok deletes by name, late).
    named = WORKLOADS["SchedulingBasic"].measured_pod(3, "x", batch=7)
    assert named["metadata"]["name"] == "b7-pod-3"
    assert WORKLOADS["SchedulingBasic"].init_pod(3, 2, batch=8)["metadata"]["name"] == "b8-init-3"

    (spread,) = WORKLOADS["PreferredTopologySpreading"].measured_pod(0, "x")["spec"][
        "topologySpreadConstraints"
    ]
    assert (spread["maxSkew"], spread["whenUnsatisfiable"]) == (5, "ScheduleAnyway")
    (hard,) = WORKLOADS["TopologySpreading"].measured_pod(0, "x")["spec"][
        "topologySpreadConstraints"
    ]
    assert hard["whenUnsatisfiable"] == "DoNotSchedule"

    node_affinity = WORKLOADS["SchedulingNodeAffinity"].measured_pod(0, "x")["spec"]["affinity"]
    (term,) = node_affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][0]["values"] == ["zone1", "zone2"]


def test_every_pod_is_the_pause_container_of_its_template_s_cpu_and_500Mi() -> None:
    cpu = {"low-priority": 900, "high-priority": 3000, "large-cpu": 9000}
    for workload in WORKLOADS.values():
        if workload.gang_size:  # gang-pod.yaml asks for 100Mi: see the gang tests below
            continue
        init = workload.init_pod(0, 1, scheduler="x")
        for pod, template in (
            (init, workload.init_template),
            (workload.measured_pod(0, "x"), workload.measured_template),
        ):
            requests = pod_requests(pod["spec"])
            assert requests["cpu"] == cpu.get(template, 100)  # millicores
            assert requests["memory"] == 500 * 2**20


def test_preemption_victims_go_at_once_as_scheduler_perf_s_do() -> None:
    """pod-low-priority.yaml sets no grace: a victim's deletion removes it, where 30 s of
    grace would leave the workload timing kwok's final deletions, not the scheduler."""
    victim = WORKLOADS["PreemptionBasic"].init_pod(0, 1, scheduler="x")
    assert victim["spec"]["terminationGracePeriodSeconds"] == 0
    preemptor = WORKLOADS["PreemptionBasic"].measured_pod(0, "x")
    assert "terminationGracePeriodSeconds" not in preemptor["spec"]


def test_the_cycle_alone_keeps_one_anti_affinity_pod_per_node() -> None:
    """The in-process run of a workload schedules its measured pods with the plugins'
    decisions: on 10 nodes, 3 bound and 6 measured anti-affinity pods all fit; with 4
    bound and 8 measured, only 6 of the measured find a node of their own."""
    from berth.bench.cycle import workload_cycle_bench

    fits = workload_cycle_bench(["SchedulingPodAntiAffinity"], 10, 6, 1)
    assert "6 pods onto 10 nodes (3 bound before), 6 placed" in fits
    crowded = workload_cycle_bench(["SchedulingPodAntiAffinity"], 10, 8, 1)
    assert "8 pods onto 10 nodes (4 bound before), 6 placed" in crowded


GANGS = WORKLOADS["GangScheduling"]


def test_gang_sizes_are_scheduler_perf_s_gangs_of_three_with_no_initial_pods() -> None:
    # 5000Nodes_1000Gangs_3000Pods; 2000 and 3000 gangs are asked for by pod count.
    assert GANGS.sizes(5000) == (0, 3000)
    assert GANGS.sizes(5000, 6000) == (0, 6000)
    assert GANGS.sizes(1000, 9000) == (0, 9000)
    assert GANGS.gangs(9000) == 3000
    # Scaled to the nodes, the count stays whole gangs.
    assert GANGS.sizes(1000) == (0, 600)
    assert GANGS.sizes(7)[1] % 3 == 0
    with pytest.raises(ValueError, match="GangScheduling needs whole gangs: 3001 pods"):
        GANGS.sizes(5000, 3001)
    assert WORKLOADS["SchedulingBasic"].gangs(3000) == 0


def test_kube_scheduler_runs_the_gang_workload_with_its_gates() -> None:
    assert GANGS.gates == ("GenericWorkload", "GangScheduling")
    assert all(not w.gates for w in WORKLOADS.values() if w is not GANGS)


def test_every_three_measured_pods_name_one_gang_berth_reads_as_kube_scheduler_does() -> None:
    pods = [GANGS.measured_pod(i, "default-scheduler", batch=7) for i in range(6)]
    names = [group_name(p["spec"]) for p in pods]
    assert names == ["b7-gang-0"] * 3 + ["b7-gang-1"] * 3
    group = GANGS.pod_group(1, batch=7)
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["kind"] == "PodGroup"
    assert group["metadata"] == {"name": "b7-gang-1", "namespace": MEASURED_NAMESPACE}
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    # What Coscheduling reads of it: a gang of 3 under the name its pods give.
    gang = parse_gang(group)
    assert gang is not None
    assert (gang.namespace, gang.name, gang.min_member) == (MEASURED_NAMESPACE, "b7-gang-1", 3)
    assert all(p["metadata"]["namespace"] == MEASURED_NAMESPACE for p in pods)
    with pytest.raises(ValueError, match="SchedulingBasic has no gangs"):
        WORKLOADS["SchedulingBasic"].pod_group(0)
    assert "schedulingGroup" not in WORKLOADS["SchedulingBasic"].measured_pod(0, "x")["spec"]


def test_a_gang_pod_is_gang_pod_yaml_100m_and_100Mi_requested_only() -> None:
    (container,) = GANGS.measured_pod(0, "x")["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "100Mi"}}
    assert "ports" not in container
    requests = pod_requests(GANGS.measured_pod(0, "x")["spec"])
    assert (requests["cpu"], requests["memory"]) == (100, 100 * 2**20)
    # The other templates' container is not changed by it.
    (other,) = WORKLOADS["SchedulingBasic"].measured_pod(0, "x")["spec"]["containers"]
    assert other["resources"]["limits"] == {"cpu": "100m", "memory": "500Mi"}


def test_preemption_basic_pods_need_three_victims_a_node() -> None:
    # misc/PreemptionBasic/1000Nodes: 4000 initial pods of 900m, 1000 measured of 3 cpu.
    preemption = WORKLOADS["PreemptionBasic"]
    assert preemption.sizes(1000) == (4000, 1000)
    low = preemption.init_pod(0, nodes=1000)
    high = preemption.measured_pod(0, "berth-scheduler")
    assert low["spec"]["nodeName"] == "perf-node-0"
    assert "priorityClassName" not in low["spec"]
    assert high["spec"]["priorityClassName"] == HIGH_PRIORITY_CLASS
    assert pod_requests(low["spec"])["cpu"] * 4 < 4000 < pod_requests(low["spec"])["cpu"] * 5
    # A 4-cpu node of four low pods takes one high pod once three of them are gone.
    free = 4000 - 4 * pod_requests(low["spec"])["cpu"]
    needs = pod_requests(high["spec"])["cpu"]
    assert free + 2 * 900 < needs <= free + 3 * 900
    assert preemption.init_each_trial
    assert not preemption.init_pending


def test_unschedulable_initial_pods_wait_for_the_side_and_fit_no_node() -> None:
    unschedulable = WORKLOADS["Unschedulable"]
    assert unschedulable.sizes(5000) == (20000, 10000)
    pod = unschedulable.init_pod(3, nodes=10, batch=2, scheduler="berth-scheduler")
    assert "nodeName" not in pod["spec"]
    assert pod["spec"]["schedulerName"] == "berth-scheduler"
    assert pod_requests(pod["spec"])["cpu"] == 9000  # a node has 4 cpus
    with pytest.raises(ValueError, match="pending"):
        unschedulable.init_pod(3, nodes=10)


def test_templates_share_no_container_between_pods() -> None:
    one = WORKLOADS["PreemptionBasic"].measured_pod(0, "x")
    one["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    other = WORKLOADS["PreemptionBasic"].measured_pod(1, "x")
    assert other["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"
