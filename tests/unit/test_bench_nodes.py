"""The benchmark's nodes: a node of another zone is relabelled, never deleted and made
again under its name (kwok stopped keeping some of those)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from berth.bench.fixture import Fixture
from berth.bench.workloads import WORKLOADS, ZONE_KEY


class Core:
    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        self.nodes = nodes

    async def list_node(self) -> SimpleNamespace:
        items = [
            SimpleNamespace(metadata=SimpleNamespace(name=name, labels=dict(labels)))
            for name, labels in self.nodes.items()
        ]
        return SimpleNamespace(items=items)


class Writer:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.calls: list[tuple[str, str]] = []

    async def create(self, kind: Any, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        self.core.nodes[name] = body["metadata"]["labels"]

    async def patch(self, kind: Any, name: str, body: dict[str, Any]) -> None:
        self.calls.append(("patch", name))
        for key, value in body["metadata"]["labels"].items():
            if value is None:
                self.core.nodes[name].pop(key, None)
            else:
                self.core.nodes[name][key] = value

    async def delete(self, kind: Any, name: str) -> None:
        self.calls.append(("delete", name))
        del self.core.nodes[name]


class Cluster(Fixture):
    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        core = Core(nodes)
        self.core = core  # type: ignore[assignment]
        self.writer = Writer(core)  # type: ignore[assignment]
        self.say = lambda line: None

    async def _wait_ready(self, names: set[str]) -> None:
        pass


async def test_nodes_of_another_zone_are_relabelled_and_no_name_is_deleted_then_made() -> None:
    basic, spread = WORKLOADS["SchedulingBasic"], WORKLOADS["TopologySpreading"]
    cluster = Cluster({"kwok-node-0": {}})
    await cluster.nodes(basic, 4)
    await cluster.nodes(spread, 6)
    calls = cluster.writer.calls  # type: ignore[attr-defined]
    deleted = {name for verb, name in calls if verb == "delete"}
    created = {name for verb, name in calls if verb == "create"}
    assert deleted == {"kwok-node-0"}
    assert not deleted & created
    assert sorted(name for verb, name in calls if verb == "patch") == sorted(
        spread.node(i)["metadata"]["name"] for i in range(4)
    )
    for i in range(6):
        body = spread.node(i)
        labels = cluster.core.nodes[body["metadata"]["name"]]  # type: ignore[attr-defined]
        assert labels.get(ZONE_KEY) == body["metadata"]["labels"][ZONE_KEY]
    await cluster.nodes(basic, 6)  # back to no zones: the label is taken off
    assert all(ZONE_KEY not in labels for labels in cluster.core.nodes.values())  # type: ignore[attr-defined]
