"""The nominations by pod and by node: every way the scheduler writes one keeps the pods
filed under their node, and a pod renominated elsewhere leaves its old node."""

from __future__ import annotations

import pytest

from berth.scheduler.cache.nominations import Nominations
from berth.scheduler.cache.view import ClusterView
from tests.unit.scheduler_fixtures import info, pod


def names(nominations: Nominations, node: str) -> list[str]:
    return sorted(p.name for p in nominations.on(node))


def test_every_write_files_the_pod_under_its_node() -> None:
    a, b, c = info(pod("a", "1")), info(pod("b", "1")), info(pod("c", "1"))
    held = Nominations()
    held[a.uid] = ("n1", a)
    held.update({b.uid: ("n1", b)})
    held.setdefault(c.uid, ("n2", c))
    assert names(held, "n1") == ["a", "b"]
    assert names(held, "n2") == ["c"]

    held[a.uid] = ("n2", a)  # renominated: gone from n1
    assert names(held, "n1") == ["b"]
    assert names(held, "n2") == ["a", "c"]

    assert held.pop(b.uid)[0] == "n1"
    assert held.pop(b.uid, None) is None
    del held[c.uid]
    assert names(held, "n1") == []
    assert names(held, "n2") == ["a"]
    with pytest.raises(KeyError):
        held.pop(c.uid)

    held |= {c.uid: ("n3", c)}
    assert names(held, "n3") == ["c"]
    held.clear()
    assert names(held, "n2") == []
    assert names(held, "n3") == []
    assert not held


def test_the_view_keeps_them_by_node_through_the_watch() -> None:
    view = ClusterView()
    raw = pod("p", "1")
    raw["status"] = {"nominatedNodeName": "n1"}
    got, _ = view.on_pod("ADDED", raw)
    assert [p.uid for p in view.nominated.on("n1")] == [got.uid]
    view.on_pod("DELETED", raw)
    assert list(view.nominated.on("n1")) == []
