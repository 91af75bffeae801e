"""The sides of a gang workload: kube-scheduler with its feature gates, Berth with
Coscheduling; every other workload's sides as they were."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import berth.run
from berth.bench.sides import (
    BERTH,
    INSTALLED,
    KUBE_SCHEDULER,
    berth_plugins,
    compile_like_the_image,
    kube_plugins,
    make_side,
    scheduler_configuration,
    side_plugins,
)


def test_the_gang_workload_s_sides_run_their_gang_plugins_and_the_others_do_not(
    tmp_path: Path,
) -> None:
    gates = ("GenericWorkload", "GangScheduling")

    def side(label: str, with_gates: tuple[str, ...]) -> list[str]:
        return make_side(
            label,
            kubeconfig="/k",
            qps=1000,
            burst=2000,
            workdir=tmp_path,
            kube_scheduler=Path("/bin/kube-scheduler"),
            metrics_port=1,
            gates=with_gates,
        ).argv

    gated = [a for a in side(KUBE_SCHEDULER, gates) if a.startswith("--feature-gates")]
    assert gated == ["--feature-gates=GenericWorkload=true,GangScheduling=true"]
    assert not [a for a in side(KUBE_SCHEDULER, ()) if a.startswith("--feature-gates")]
    assert side_plugins(KUBE_SCHEDULER, gates) == (*kube_plugins(), "GangScheduling")
    assert side_plugins(BERTH, gates) == (*berth_plugins(), "Coscheduling")
    assert side_plugins(BERTH) == berth_plugins()
    (profile,) = scheduler_configuration(BERTH, "/k", 1000, 2000, gangs=True)["profiles"]
    assert profile["plugins"] == {"multiPoint": {"enabled": [{"name": "Coscheduling"}]}}
    # Every other workload's sides are as they were: Berth's default profile as it is.
    (plain,) = scheduler_configuration(BERTH, "/k", 1000, 2000)["profiles"]
    assert plain == {"schedulerName": "berth-scheduler"}
    assert "Coscheduling" in side_plugins(INSTALLED)
    gang_config, plain_config = (
        tmp_path / "berth-scheduler-gangs.yaml",
        tmp_path / "berth-scheduler.yaml",
    )
    side(BERTH, gates)
    side(BERTH, ())
    assert "Coscheduling" in gang_config.read_text()
    assert "Coscheduling" not in plain_config.read_text()


def test_berth_starts_from_bytecode_as_its_image_does() -> None:
    """Every module of the package has its bytecode written before the trials, even where
    the environment tells Python not to write any."""
    compiled = Path(importlib.util.cache_from_source(berth.run.__file__))
    compiled.unlink(missing_ok=True)
    compile_like_the_image()
    assert compiled.is_file()
