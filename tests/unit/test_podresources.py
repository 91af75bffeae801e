"""Pod request arithmetic must equal k8s.io/component-helpers resource.PodRequests.

Expected values follow kube-scheduler: the sum of app containers and sidecars, or the
largest one-shot init container plus the sidecars started before it; pod-level requests
replace the containers' cpu and memory; overhead is added last; requests left out but
limited are the limits (the API server's defaulting); for scoring, containers missing a
cpu or memory request count 100m / 200Mi (``NonMissingContainerRequests``).
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.podresources import (
    pod_requests,
    resource_list,
    sum_requests,
    to_units,
)
from tests.unit.scheduler_fixtures import Json, container

Mi = 1024**2
Gi = 1024**3


def spec(*containers: Json, init: tuple[Json, ...] = (), **extra: Any) -> Json:
    out: Json = {"containers": list(containers), **extra}
    if init:
        out["initContainers"] = list(init)
    return out


def sidecar(cpu: str | None = None, memory: str | None = None) -> Json:
    return container(cpu, memory, name="sidecar", restart_policy="Always")


def test_containers_are_summed() -> None:
    requests = pod_requests(spec(container("500m", "1Gi"), container("250m", "512Mi")))
    assert requests == {"cpu": 750, "memory": 1536 * Mi}


def test_empty_pod_requests_nothing() -> None:
    assert pod_requests(spec(container())) == {}


@pytest.mark.parametrize(
    ("init", "containers", "expected_cpu"),
    [
        # One-shot init containers run alone: the largest one counts if above the sum.
        ((container("2"),), (container("1"),), 2000),
        ((container("500m"), container("700m")), (container("1"),), 1000),
        ((container("1500m"), container("2500m")), (container("1"), container("1")), 2500),
    ],
    ids=["init-above-sum", "init-below-sum", "largest-init-wins"],
)
def test_one_shot_init_containers_take_the_maximum(
    init: tuple[Json, ...], containers: tuple[Json, ...], expected_cpu: int
) -> None:
    assert pod_requests(spec(*containers, init=init))["cpu"] == expected_cpu


def test_sidecars_add_to_the_app_containers() -> None:
    assert pod_requests(spec(container("1"), init=(sidecar("500m", "64Mi"),))) == {
        "cpu": 1500,
        "memory": 64 * Mi,
    }


def test_one_shot_init_after_a_sidecar_runs_beside_it() -> None:
    # While the one-shot init container runs, the sidecar started before it runs too:
    # max(1 + 0.5, 2 + 0.5) = 2.5 cpu.
    requests = pod_requests(spec(container("1"), init=(sidecar("500m"), container("2"))))
    assert requests["cpu"] == 2500


def test_one_shot_init_before_a_sidecar_runs_alone() -> None:
    # max(1 + 0.5, 2) = 2 cpu: the sidecar starts only after the one-shot one finished.
    requests = pod_requests(spec(container("1"), init=(container("2"), sidecar("500m"))))
    assert requests["cpu"] == 2000


def test_two_sidecars_accumulate_for_later_init_containers() -> None:
    # sidecars 0.3 + 0.2 running, then a 1 cpu init: 1.5; app phase: 0.5 + 0.5 = 1.
    requests = pod_requests(
        spec(container("500m"), init=(sidecar("300m"), sidecar("200m"), container("1")))
    )
    assert requests["cpu"] == 1500


def test_overhead_is_added_after_the_init_maximum() -> None:
    requests = pod_requests(
        spec(
            container("1", "1Gi"),
            init=(container("2"),),
            overhead={"cpu": "250m", "memory": "120Mi"},
        )
    )
    assert requests == {"cpu": 2250, "memory": Gi + 120 * Mi}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"limits": {"cpu": "2", "memory": "1Gi"}}, {"cpu": 2000, "memory": Gi}),
        (
            {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "1Gi"}},
            {"cpu": 500, "memory": Gi},
        ),
        ({"limits": {"nvidia.com/gpu": "1"}}, {"nvidia.com/gpu": 1}),
    ],
    ids=["limits-only", "request-kept-memory-from-limit", "extended-from-limit"],
)
def test_requests_default_to_limits(resources: Json, expected: dict[str, int]) -> None:
    assert pod_requests(spec({"name": "app", "resources": resources})) == expected


def test_init_container_requests_default_to_limits_too() -> None:
    init = {"name": "init", "resources": {"limits": {"cpu": "3"}}}
    assert pod_requests(spec(container("1"), init=(init,)))["cpu"] == 3000


def test_pod_level_requests_replace_cpu_and_memory() -> None:
    requests = pod_requests(
        spec(
            container("1", "1Gi", requests={"nvidia.com/gpu": "1"}),
            container("1", "1Gi"),
            resources={"requests": {"cpu": "4"}},
        )
    )
    # Pod-level cpu replaces the containers' 2; memory and extended stay aggregated.
    assert requests == {"cpu": 4000, "memory": 2 * Gi, "nvidia.com/gpu": 1}


def test_pod_level_requests_then_overhead() -> None:
    requests = pod_requests(
        spec(
            container("1", "1Gi"),
            resources={"requests": {"cpu": "3", "memory": "4Gi"}},
            overhead={"cpu": "100m"},
        )
    )
    assert requests == {"cpu": 3100, "memory": 4 * Gi}


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ((container(),), {"cpu": 100, "memory": 200 * Mi}),
        ((container("1"),), {"cpu": 1000, "memory": 200 * Mi}),
        ((container(None, "1Gi"),), {"cpu": 100, "memory": Gi}),
        # Each container that misses a request gets the default, not the pod once.
        ((container(), container()), {"cpu": 2 * 100, "memory": 2 * 200 * Mi}),
    ],
    ids=["nothing", "cpu-only", "memory-only", "per-container"],
)
def test_non_zero_defaults_for_scoring(containers: tuple[Json, ...], expected: Json) -> None:
    assert pod_requests(spec(*containers), non_zero=True) == expected


def test_non_zero_defaults_do_not_change_the_filter_view() -> None:
    assert pod_requests(spec(container()), non_zero=False) == {}


def test_non_zero_defaults_apply_to_init_containers() -> None:
    # App: 100m/200Mi defaulted; the init container 500m and defaulted memory: the max.
    requests = pod_requests(spec(container(), init=(container("500m"),)), non_zero=True)
    assert requests == {"cpu": 500, "memory": 200 * Mi}


def test_non_zero_keeps_an_explicit_zero_request() -> None:
    # kube-scheduler replaces only *missing* requests ("If the requests for those resources
    # are explicitly set, even if zero, they will not be modified"): cpu stays 0.
    requests = pod_requests(spec(container("0", "1Gi")), non_zero=True)
    assert requests == {"cpu": 0, "memory": Gi}


def test_extended_resources_are_counted() -> None:
    requests = pod_requests(
        spec(
            container("1", requests={"nvidia.com/gpu": "2"}),
            container("1", requests={"nvidia.com/gpu": "1", "example.com/foo": "3"}),
        )
    )
    assert requests == {"cpu": 2000, "nvidia.com/gpu": 3, "example.com/foo": 3}


@pytest.mark.parametrize(
    ("name", "quantity", "units"),
    [
        ("cpu", "1.5", 1500),
        ("cpu", "1500m", 1500),
        ("cpu", "0.1", 100),
        ("cpu", 2, 2000),
        # MilliValue rounds up: half a millicore still needs one.
        ("cpu", "0.0005", 1),
        ("memory", "2Gi", 2 * Gi),
        ("memory", "1.5Gi", 1536 * Mi),
        ("memory", "100M", 100_000_000),
        ("memory", "129e6", 129_000_000),
        ("memory", "1k", 1000),
        # Value rounds up as well.
        ("memory", "1500m", 2),
        ("nvidia.com/gpu", "1", 1),
        ("pods", "110", 110),
    ],
)
def test_quantity_units(name: str, quantity: Any, units: int) -> None:
    assert to_units(name, quantity) == units


def test_resource_list_converts_every_entry() -> None:
    assert resource_list({"cpu": "250m", "memory": "64Mi", "nvidia.com/gpu": "2"}) == {
        "cpu": 250,
        "memory": 64 * Mi,
        "nvidia.com/gpu": 2,
    }
    assert resource_list(None) == {}


def test_sum_requests_adds_pods() -> None:
    total = sum_requests(
        [spec(container("1", "1Gi")), spec(container("500m"), init=(container("2", "2Gi"),))]
    )
    assert total == {"cpu": 3000, "memory": 3 * Gi}
