"""`berth quota tree`: the tree drawn from the root, each quota's numbers from spec and
status per resource, refused quotas with why."""

from __future__ import annotations

from typing import Any

from berth.kubectl.treeview import render, tree_rows
from berth.quota.tree import LABEL_IS_PARENT, LABEL_PARENT

GPU = "nvidia.com/gpu"


def eq(
    name: str,
    parent: str | None = None,
    *,
    is_parent: bool = False,
    minimum: int = 2,
    maximum: int = 8,
    status: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    labels = {LABEL_IS_PARENT: "true" if is_parent else "false"}
    if parent:
        labels[LABEL_PARENT] = parent
    return {
        "metadata": {"name": name, "namespace": f"ns-{name}", "labels": labels},
        "spec": {
            "min": {GPU: str(minimum), "cpu": "1"},
            "max": {GPU: str(maximum), "cpu": "4"},
        },
        "status": status or {},
    }


def gpus(**fields: str) -> dict[str, dict[str, str]]:
    return {field: {GPU: value, "cpu": "0"} for field, value in fields.items()}


QUOTAS = [
    eq("team-b", "research", status=gpus(request="2", runtime="2", used="2", borrowed="0")),
    eq(
        "research",
        is_parent=True,
        minimum=4,
        status=gpus(request="8", runtime="8", used="8", borrowed="4", lent="0"),
    ),
    eq("team-a", "research", status=gpus(request="9", runtime="6", used="6", borrowed="4")),
    eq("solo", minimum=1, maximum=2),
    {"metadata": {"name": "flat", "namespace": "flat"}, "spec": {"max": {"cpu": "1"}}},
    eq("orphan", "missing"),
]


def test_the_tree_is_drawn_from_the_root_with_each_resource_per_line() -> None:
    text = render(QUOTAS)
    lines = text.splitlines()
    assert lines[0].split() == [
        "QUOTA", "NAMESPACE", "RESOURCE", "MIN", "MAX", "REQUEST", "RUNTIME", "USED",
        "BORROWED", "LENT",
    ]  # fmt: skip
    assert lines[1].strip() == "koordinator-root-quota"
    # research (parent) first, its teams under it in name order, then solo.
    assert lines[2].split() == ["├─", "research", "(parent)", "ns-research", "cpu", "1", "4",
                                "0", "0", "0", "0", "0"]  # fmt: skip
    assert lines[3].split() == ["│", "nvidia.com/gpu", "4", "8", "8", "8", "8", "4", "0"]
    assert lines[4].split() == ["│", "├─", "team-a", "ns-team-a", "cpu", "1", "4", "0", "0",
                                "0", "0", "-"]  # fmt: skip
    assert lines[5].split() == ["│", "│", "nvidia.com/gpu", "2", "8", "9", "6", "6", "4", "-"]
    assert lines[6].split()[:3] == ["│", "└─", "team-b"]
    assert lines[8].split()[:2] == ["└─", "solo"]
    assert lines[9].split() == ["nvidia.com/gpu", "1", "2", "-", "-", "-", "-", "-"]
    # The flat quota is not in the tree; the orphan is refused with why.
    assert "flat" not in text
    assert lines[-2] == "Refused (not in the tree):"
    assert lines[-1] == "  ns-orphan/orphan: parent ElasticQuota missing does not exist"


def test_rows_carry_the_structure_for_json() -> None:
    rows, refused = tree_rows(QUOTAS)
    team_a = [r for r in rows if r["name"] == "team-a" and r["resource"] == GPU]
    assert team_a == [
        {
            "name": "team-a",
            "parent": "research",
            "depth": 2,
            "isParent": False,
            "namespace": "ns-team-a",
            "resource": GPU,
            "min": "2",
            "max": "8",
            "request": "9",
            "runtime": "6",
            "used": "6",
            "borrowed": "4",
            "lent": "-",
        }
    ]
    assert [r["name"] for r in refused] == ["orphan"]


def test_no_tree_says_so() -> None:
    assert render([QUOTAS[4]]).startswith("No ElasticQuotas in the quota tree")
