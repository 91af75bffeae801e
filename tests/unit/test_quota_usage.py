"""status.used arithmetic and the operator's patches, without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from berth.operators.elasticquota import PodRequests, QuotaSeen, desired
from berth.quota.usage import as_resource_list, requests_if_counted, used


def pod(cpu: str, memory: str = "0", *, node: str = "n1", phase: str = "Running") -> dict[str, Any]:
    return {
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("body", "counts"),
    [
        (pod("1"), True),
        (pod("1", phase="Pending"), True),  # bound, not started yet: it holds the capacity
        (pod("1", phase="Succeeded"), False),
        (pod("1", phase="Failed"), False),
        (pod("1", node=""), False),  # not bound
    ],
)
def test_which_pods_count(body: dict[str, Any], counts: bool) -> None:
    assert (requests_if_counted(body) is not None) is counts


def test_used_sums_requests_and_names_every_quota_resource() -> None:
    requests = [
        r for r in (requests_if_counted(pod("1500m", "1Gi")), requests_if_counted(pod("500m"))) if r
    ]
    total = used(requests, {"cpu", "nvidia.com/gpu", "pods"})
    assert as_resource_list(total) == {
        "cpu": "2",
        "memory": "1Gi",
        "nvidia.com/gpu": "0",
        "pods": "2",
    }


def seen(
    name: str, created: str, used: dict[str, str], active: tuple[str, str] | None
) -> QuotaSeen:
    return QuotaSeen(name, created, frozenset({"cpu"}), used, active)


GOVERNS = ("True", "governs namespace ns")


def test_nothing_to_write_when_status_is_current() -> None:
    quota = seen("q", "2026-01-01T00:00:00Z", {"cpu": "1"}, GOVERNS)
    assert desired("ns", [quota], [PodRequests("p", {"cpu": 1000})]) == {}


def test_resources_no_longer_used_are_removed_by_the_merge_patch() -> None:
    quota = seen("q", "2026-01-01T00:00:00Z", {"cpu": "1", "memory": "1Gi"}, GOVERNS)
    patches = desired("ns", [quota], [])
    assert patches == {"q": {"used": {"cpu": "0", "memory": None}}}


def test_the_oldest_quota_governs_and_the_others_say_so() -> None:
    old = seen("b-old", "2026-01-01T00:00:00Z", {"cpu": "0"}, GOVERNS)
    new = seen("a-new", "2026-02-01T00:00:00Z", {}, None)
    patches = desired("ns", [new, old], [])
    assert set(patches) == {"a-new"}
    condition = patches["a-new"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Active",
        "False",
        "DuplicateQuota",
    )
    assert "ElasticQuota b-old already governs namespace ns" in condition["message"]
