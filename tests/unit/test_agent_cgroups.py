"""Pod cgroups on sample trees: v2 and v1, systemd and cgroupfs layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.agent.cgroups import Hierarchy, find_hierarchy, find_pods, parse_flat_keyed
from berth.api.nodemetric import NodeMemoryCollectPolicy as Policy

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
SYSTEMD_UID = UID.replace("-", "_")
OTHER = "11111111-2222-3333-4444-555555555555"
MIB = 1024 * 1024


def write(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)


def v2_pod(directory: Path, usage_usec: int = 2_500_000) -> None:
    write(
        directory,
        {
            "cpu.stat": f"usage_usec {usage_usec}\nuser_usec 2000000\nsystem_usec 500000\n",
            "memory.current": str(100 * MIB),
            "memory.stat": (
                f"anon {70 * MIB}\nfile {30 * MIB}\nactive_file {10 * MIB}\n"
                f"inactive_file {20 * MIB}\n"
            ),
        },
    )


def v1_pod(cpu: Path, memory: Path) -> None:
    write(cpu, {"cpuacct.usage": "7000000000\n"})
    write(
        memory,
        {
            "memory.usage_in_bytes": str(200 * MIB),
            # A pod cgroup's own counters and the hierarchical totals: the totals count.
            "memory.stat": (
                f"cache 0\ninactive_file 0\ntotal_cache {50 * MIB}\n"
                f"total_active_file {10 * MIB}\ntotal_inactive_file {40 * MIB}\n"
            ),
        },
    )


def assert_one_pod(
    hierarchy: Hierarchy, relative: str, cpu_ns: int, memory: tuple[int, int, int]
) -> None:
    """The pod UID at ``relative``, its CPU time, and its memory with page cache, without
    it, and without the inactive part of it."""
    pods = find_pods(hierarchy)
    assert pods == {UID: Path(relative)}
    assert hierarchy.cpu_nanoseconds(pods[UID]) == cpu_ns
    policies = (
        Policy.USAGE_WITH_PAGE_CACHE,
        Policy.USAGE_WITHOUT_PAGE_CACHE,
        Policy.USAGE_WITH_HOT_PAGE_CACHE,
    )
    assert tuple(hierarchy.memory_bytes(pods[UID], p) for p in policies) == memory


def v2_root(tmp_path: Path) -> Path:
    write(tmp_path, {"cgroup.controllers": "cpu memory\n"})
    return tmp_path


@pytest.mark.parametrize(
    "relative",
    [
        # systemd driver; the uid's dashes become underscores
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice",
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice",
        f"kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice",  # Guaranteed
        # cgroupfs driver
        f"kubepods/burstable/pod{UID}",
        f"kubepods/pod{UID}",
        # kind: the kubelet's tree nested under kubelet.slice
        f"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice",
    ],
)
def test_v2_layouts(tmp_path: Path, relative: str) -> None:
    root = v2_root(tmp_path)
    v2_pod(root / relative)
    # Containers inside the pod and unrelated trees are not pods.
    v2_pod(root / relative / "cri-containerd-abc.scope")
    v2_pod(root / "system.slice" / f"pod{OTHER}")
    hierarchy = find_hierarchy(root)
    assert hierarchy is not None
    assert hierarchy.v2
    # 100Mi used; without all file cache (30Mi), without the inactive file cache (20Mi).
    assert_one_pod(hierarchy, relative, 2_500_000_000, (100 * MIB, 70 * MIB, 80 * MIB))


@pytest.mark.parametrize(
    ("cpu_tree", "relative"),
    [
        ("cpuacct", f"kubepods/besteffort/pod{UID}"),
        (
            "cpu,cpuacct",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice",
        ),
    ],
)
def test_v1_layouts(tmp_path: Path, cpu_tree: str, relative: str) -> None:
    v1_pod(tmp_path / cpu_tree / relative, tmp_path / "memory" / relative)
    hierarchy = find_hierarchy(tmp_path)
    assert hierarchy is not None
    assert not hierarchy.v2
    assert hierarchy.cpu == tmp_path / cpu_tree
    assert_one_pod(hierarchy, relative, 7_000_000_000, (200 * MIB, 150 * MIB, 160 * MIB))


def test_no_cgroup_tree_and_no_pods(tmp_path: Path) -> None:
    assert find_hierarchy(tmp_path) is None
    hierarchy = find_hierarchy(v2_root(tmp_path))
    assert hierarchy is not None
    assert find_pods(hierarchy) == {}


def test_flat_keyed_files() -> None:
    assert parse_flat_keyed("usage_usec 12\nthrottled_usec 0\nbad line here\nneg -3\n") == {
        "usage_usec": 12,
        "throttled_usec": 0,
        "neg": -3,
    }
