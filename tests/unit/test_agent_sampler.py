"""Samples from a /proc and a cgroup tree on disk: rates from two readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.agent.sampler import Sampler
from berth.agent.window import Usage
from berth.api.nodemetric import NodeMemoryCollectPolicy as Policy

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
MIB = 1024 * 1024
MEMINFO = "MemTotal: 8000 kB\nMemFree: 2000 kB\nMemAvailable: 5000 kB\nActive(file): 500 kB\n"


def proc(root: Path, busy: int, idle: int) -> Path:
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(
        f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n"
        + "".join(f"cpu{i} 0 0 0 0 0 0 0 0 0 0\n" for i in range(4))
    )
    (root / "meminfo").write_text(MEMINFO)
    return root


def pod(cgroups: Path, usage_usec: int) -> None:
    directory = cgroups / "kubepods" / "burstable" / f"pod{UID}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.stat").write_text(f"usage_usec {usage_usec}\n")
    (directory / "memory.current").write_text(str(64 * MIB))
    (directory / "memory.stat").write_text(f"file {16 * MIB}\ninactive_file {4 * MIB}\n")


@pytest.fixture
def cgroups(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    return root


def test_first_reading_is_the_baseline_then_rates(tmp_path: Path, cgroups: Path) -> None:
    procfs = proc(tmp_path / "proc", busy=1000, idle=9000)
    pod(cgroups, usage_usec=1_000_000)
    sampler = Sampler(procfs, cgroups)
    assert sampler.sample(10.0, Policy.USAGE_WITHOUT_PAGE_CACHE) is None

    proc(procfs, busy=1300, idle=9100)  # 300 of 400 ticks busy, 4 CPUs: 3 cores
    pod(cgroups, usage_usec=4_000_000)  # 3 s of CPU in 2 s: 1.5 cores
    sample = sampler.sample(12.0, Policy.USAGE_WITHOUT_PAGE_CACHE)
    assert sample is not None
    assert (sample.time, sample.since) == (12.0, 10.0)
    assert sample.node == Usage(cpu=3.0, memory=3000 * 1024)
    assert sample.pods == {UID: Usage(cpu=1.5, memory=48 * MIB)}

    # The policy applies to the node and the pods alike.
    sample = sampler.sample(13.0, Policy.USAGE_WITH_HOT_PAGE_CACHE)
    assert sample is not None
    assert sample.node == Usage(cpu=0.0, memory=3500 * 1024)
    assert sample.pods == {UID: Usage(cpu=0.0, memory=60 * MIB)}


def test_a_pod_counter_going_backwards_is_a_new_cgroup(tmp_path: Path, cgroups: Path) -> None:
    procfs = proc(tmp_path / "proc", busy=0, idle=0)
    pod(cgroups, usage_usec=9_000_000)
    sampler = Sampler(procfs, cgroups)
    sampler.sample(1.0, Policy.USAGE_WITH_PAGE_CACHE)
    pod(cgroups, usage_usec=100)
    sample = sampler.sample(2.0, Policy.USAGE_WITH_PAGE_CACHE)
    assert sample is not None
    assert sample.pods == {}
    pod(cgroups, usage_usec=500_100)
    sample = sampler.sample(3.0, Policy.USAGE_WITH_PAGE_CACHE)
    assert sample is not None
    assert sample.pods[UID].cpu == pytest.approx(0.5)


def test_no_cgroup_tree_means_no_pods_and_no_proc_is_an_error(tmp_path: Path) -> None:
    procfs = proc(tmp_path / "proc", busy=0, idle=0)
    sampler = Sampler(procfs, tmp_path / "missing")
    assert sampler.hierarchy is None
    sampler.sample(1.0, Policy.USAGE_WITH_PAGE_CACHE)
    sample = sampler.sample(2.0, Policy.USAGE_WITH_PAGE_CACHE)
    assert sample is not None
    assert sample.pods == {}
    with pytest.raises(FileNotFoundError):
        Sampler(tmp_path / "nowhere", tmp_path).sample(1.0, Policy.USAGE_WITH_PAGE_CACHE)
