"""The installed-profile side: the profile the manifests install, under its own scheduler
name, and objects its plugins accept and must check on every pod."""

from __future__ import annotations

from berth.api.elasticquota import ElasticQuota
from berth.api.nodemetric import NodeMetricStatus
from berth.api.reservation import Reservation, ReservationStatus
from berth.bench import installed
from berth.bench.sides import (
    BERTH,
    INSTALLED,
    berth_plugins,
    installed_plugins,
    scheduler_configuration,
)
from berth.bench.workloads import NAMESPACES
from berth.scheduler.config import parse


def test_the_installed_side_runs_the_manifests_profile_under_its_own_name() -> None:
    config = parse(scheduler_configuration(INSTALLED, "kubeconfig", 5000, 5000))
    (profile,) = config.profiles
    assert profile.scheduler_name == "berth-installed"
    assert config.client_connection.qps == 5000
    assert not config.leader_election.leader_elect
    plugins = installed_plugins()
    for plugin in ("CapacityScheduling", "LoadAwareScheduling", "Reservation"):
        assert plugin in plugins
        assert plugin not in berth_plugins()
    assert "DefaultPreemption" not in plugins
    default = parse(scheduler_configuration(BERTH, "kubeconfig", 5000, 5000)).profiles[0]
    assert default.plugins.multi_point.enabled == []


def test_quotas_cover_the_whole_cluster_so_that_none_refuses() -> None:
    for namespace in NAMESPACES:
        quota = ElasticQuota.model_validate(installed.quota(namespace, 1000))
        assert quota.metadata.namespace == namespace
        assert quota.spec.min == quota.spec.max == {"cpu": "4000", "memory": "32000Gi"}


def test_reservations_are_available_for_owners_no_benchmark_pod_matches() -> None:
    body = installed.reservation(3, "perf-node-60")
    body["status"] = installed.reservation_status("perf-node-60")
    reservation = Reservation.model_validate(body)
    assert reservation.status == ReservationStatus.model_validate(body["status"])
    assert reservation.status.phase == "Available"
    (owner,) = reservation.spec.owners
    assert owner.label_selector is not None
    assert owner.label_selector.match_labels == {installed.OWNER_LABEL: "3"}


def test_reports_are_fresh_and_below_the_load_thresholds() -> None:
    status = NodeMetricStatus.model_validate(installed.report())
    assert status.update_time is not None
    assert status.node_metric is not None
    assert status.node_metric.node_usage is not None
