"""Capacity-scheduling arithmetic without a cluster: the reference's scenario table and the
rules around it (units, resources a quota does not name, nominated pods, the governing quota).
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.quota.check import OVER_MAX, OVER_MIN_TOTAL, Quota, governing, over_min
from berth.quota.ledger import QuotaLedger

Json = dict[str, Any]


def eq(
    namespace: str,
    minimum: Json,
    maximum: Json,
    *,
    name: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> Json:
    return {
        "metadata": {
            "name": name or namespace,
            "namespace": namespace,
            "creationTimestamp": created,
        },
        "spec": {"min": minimum, "max": maximum},
    }


def ledger(*quotas: Json, used: dict[str, Json] | None = None) -> QuotaLedger:
    book = QuotaLedger()
    book.set_quotas(quotas)
    for namespace, requests in (used or {}).items():
        quota = Quota.from_object({"spec": {"min": requests}})  # requests in scheduler units
        book.add(f"running-{namespace}", namespace, quota.min)
    return book


def check(book: QuotaLedger, namespace: str, request: Json, **nominated: Json) -> str | None:
    quota = book.quota_of(namespace)
    assert quota is not None
    units = Quota.from_object({"spec": {"min": request}}).min
    rejection = book.check(
        quota,
        {**units, "pods": 1},
        nominated.get("in_quota", {}),
        nominated.get("total", {}),
    )
    return None if rejection is None else rejection.message(f"{namespace}/p")


# The reference's table: memory in plain units, each quota min/max/used.
def test_under_max_is_schedulable() -> None:
    book = ledger(eq("ns1", {"memory": 1000}, {"memory": 2000}), used={"ns1": {"memory": 300}})
    assert check(book, "ns1", {"memory": 500}) is None


def test_over_max_is_rejected_with_the_numbers() -> None:
    book = ledger(eq("ns1", {"memory": 1000}, {"memory": 2000}), used={"ns1": {"memory": 300}})
    assert check(book, "ns1", {"memory": 1800}) == (
        "Pod ns1/p is rejected because ElasticQuota ns1 is more than Max "
        "(memory: 300 used + 1800 requested > 2000)"
    )


def test_sum_of_used_over_sum_of_min_is_rejected() -> None:
    book = ledger(
        eq("ns1", {"memory": 1000}, {"memory": 2000}),
        eq("ns2", {"memory": 1000}, {"memory": 2000}),
        used={"ns1": {"memory": 1800}, "ns2": {"memory": 200}},
    )
    assert check(book, "ns2", {"memory": 500}) == (
        "Pod ns2/p is rejected because total ElasticQuota used is more than Min "
        "(memory: 2000 used + 500 requested > 2000)"
    )


def test_a_namespace_without_quota_has_no_quota() -> None:
    book = ledger(eq("ns1", {"memory": 1000}, {"memory": 2000}))
    assert book.quota_of("ns2") is None


def test_equal_to_max_passes() -> None:
    book = ledger(
        eq("a", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}), used={"a": {"nvidia.com/gpu": 5}}
    )
    book.set_quotas([eq("a", {"nvidia.com/gpu": 6}, {"nvidia.com/gpu": 6})])
    assert check(book, "a", {"nvidia.com/gpu": 1}) is None
    assert check(book, "a", {"nvidia.com/gpu": 2}) is not None


def test_units_users_write() -> None:
    book = ledger(eq("a", {"cpu": "1.5", "memory": "1Gi"}, {"cpu": "2000m", "memory": "2Gi"}))
    assert check(book, "a", {"cpu": "1500m", "memory": "1Gi"}) is None
    assert check(book, "a", {"cpu": "2001m"}) == (
        "Pod a/p is rejected because ElasticQuota a is more than Max "
        "(cpu: 0 used + 2001m requested > 2)"
    )
    assert check(book, "a", {"memory": "2049Mi"}) == (
        "Pod a/p is rejected because ElasticQuota a is more than Max "
        "(memory: 0 used + 2049Mi requested > 2Gi)"
    )


def test_resources_no_quota_names_are_not_limited() -> None:
    # GPU quotas: the pods' cpu and memory are nobody's quota business.
    book = ledger(eq("a", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}))
    assert check(book, "a", {"cpu": "64", "memory": "1Ti", "nvidia.com/gpu": 1}) is None


def test_missing_from_max_is_unlimited_but_missing_from_min_is_zero() -> None:
    book = ledger(eq("a", {"memory": 100}, {"memory": 100, "cpu": "1"}))
    # cpu is named (in max) and no quota guarantees any: the sum of mins for cpu is 0.
    message = check(book, "a", {"cpu": "500m"})
    assert message is not None
    assert "total ElasticQuota used is more than Min" in message
    assert check(book, "a", {"memory": 100}) is None


def test_nominated_pods_count_as_used() -> None:
    book = ledger(
        eq("a", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}),
        eq("b", {"nvidia.com/gpu": 6}, {"nvidia.com/gpu": 8}),
        used={"a": {"nvidia.com/gpu": 5}, "b": {"nvidia.com/gpu": 3}},
    )
    assert check(book, "a", {"nvidia.com/gpu": 1}) is None
    assert check(book, "a", {"nvidia.com/gpu": 1}, in_quota={"nvidia.com/gpu": 1}) == (
        "Pod a/p is rejected because ElasticQuota a is more than Max "
        "(nvidia.com/gpu: 5 used + 1 nominated + 1 requested > 6)"
    )
    assert check(book, "a", {"nvidia.com/gpu": 1}, total={"nvidia.com/gpu": 2}) == (
        "Pod a/p is rejected because total ElasticQuota used is more than Min "
        "(nvidia.com/gpu: 8 used + 2 nominated + 1 requested > 10)"
    )


def test_pods_count_when_the_quota_names_pods() -> None:
    book = ledger(eq("a", {"pods": 2}, {"pods": 2}))
    book.add("p1", "a", {})
    book.add("p2", "a", {})
    message = check(book, "a", {})
    assert message is not None
    assert "(pods: 2 used + 1 requested > 2)" in message
    book.remove("p1")
    assert check(book, "a", {}) is None


def test_freed_victims_are_taken_out_of_used() -> None:
    book = ledger(eq("a", {"memory": 100}, {"memory": 100}), used={"a": {"memory": 100}})
    quota = book.quota_of("a")
    assert quota is not None
    request = {"memory": 50, "pods": 1}
    assert book.check(quota, request, {}, {}) is not None
    rejection = book.check(quota, request, {}, {}, freed={"a": {"memory": 50, "pods": 1}})
    assert rejection is None
    assert book.used_of("a")["memory"] == 100  # the dry run changed nothing


@pytest.mark.parametrize(
    ("used", "borrowing"),
    [({"nvidia.com/gpu": 4}, False), ({"nvidia.com/gpu": 5}, True), ({}, False)],
)
def test_borrowing_is_strictly_over_min(used: Json, borrowing: bool) -> None:
    quota = Quota.from_object(eq("a", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}))
    assert over_min(quota, used, {}) is borrowing


def test_the_oldest_quota_of_a_namespace_governs() -> None:
    quotas = governing(
        [
            eq("a", {}, {"cpu": "1"}, name="newer", created="2026-02-01T00:00:00Z"),
            eq("a", {}, {"cpu": "2"}, name="older", created="2026-01-01T00:00:00Z"),
            eq("a", {}, {"cpu": "3"}, name="also-older", created="2026-01-01T00:00:00Z"),
            eq("b", {}, {"cpu": "4"}),
        ]
    )
    assert {ns: q.name for ns, q in quotas.items()} == {"a": "also-older", "b": "b"}


def test_reasons_are_stable_names() -> None:
    book = ledger(eq("a", {"memory": 10}, {"memory": 10}))
    quota = book.quota_of("a")
    assert quota is not None
    over = book.check(quota, {"memory": 11}, {}, {})
    assert over is not None
    assert over.reason == OVER_MAX
    book.set_quotas([eq("a", {"memory": 10}, {"memory": 20})])
    quota = book.quota_of("a")
    assert quota is not None
    total = book.check(quota, {"memory": 11}, {}, {})
    assert total is not None
    assert total.reason == OVER_MIN_TOTAL
