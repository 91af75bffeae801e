"""Every YAML file under docs/examples/ is checked against the real API server, so that the
examples cannot rot: each file, exactly as written, passes ``kubectl apply
--dry-run=server`` (the CRDs' schemas and validation rules, the built-in kinds'
validation); a scheduler configuration loads and resolves into Berth's plugins.

The story tests also apply many of them, under their own names, and check what they do;
STORY_TESTS says which, and a test below keeps that list true.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.localcluster.kubectl import Kubectl
from berth.scheduler.assembly import assemble
from berth.scheduler.config import load
from tests.support import REPO

EXAMPLES = REPO / "docs" / "examples"
FILES = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.y*ml"))
SCHEDULER_CONFIGURATION = "KubeSchedulerConfiguration"

# Files a story test applies and checks the behaviour of (tests/integration/...).
STORY_TESTS: dict[str, str] = {
    "quota-walkthrough/gpu-nodes.yaml": "test_capacity_scheduling.py",
    "quota-walkthrough/quotas.yaml": "test_capacity_scheduling.py",
    "quota-walkthrough/workloads.yaml": "test_capacity_scheduling.py",
    "quota-walkthrough/scheduler-config.yaml": "test_capacity_scheduling.py",
    "quota-tree/gpu-nodes.yaml": "test_quota_tree.py",
    "quota-tree/quotas.yaml": "test_quota_tree.py",
    "quota-tree/workloads.yaml": "test_quota_tree.py",
    "quota-tree/non-preemptible.yaml": "test_quota_tree.py",
    "quota-tree/scheduler-config.yaml": "test_quota_tree.py",
    "reservations/scale-up.yaml": "test_reservation_scheduling.py",
    "reservations/preemption-with-reservation.yaml": "test_reservation_scheduling.py",
    "reservations/descheduling.yaml": "test_reservation_scheduling.py",
    "reservations/preemption.yaml": "test_reservation_scheduling.py",
    "reservations/pre-allocation.yaml": "test_reservation_scheduling.py",
    "migration/job.yaml": "test_migration.py",
    "migration/evict-directly.yaml": "test_migration.py",
    "migration/web.yaml": "test_migration.py",
    "gang/scheduler-config.yaml": "test_gang.py",
}


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def is_scheduler_configuration(name: str) -> bool:
    return all(d.get("kind") == SCHEDULER_CONFIGURATION for d in documents(name))


OBJECT_FILES = [name for name in FILES if not is_scheduler_configuration(name)]
CONFIGURATION_FILES = [name for name in FILES if is_scheduler_configuration(name)]


@pytest.fixture
def kubectl(kubeconfig_path: str, crds: None) -> Kubectl:
    return Kubectl(kubeconfig_path)


@contextlib.contextmanager
def namespaces_of(kubectl: Kubectl, name: str) -> Iterator[None]:
    """The namespaces the file's objects live in, made for real: a dry run creates none, and
    a namespaced object is refused in a namespace that does not exist."""
    wanted = {d["metadata"].get("namespace") for d in documents(name) if d["kind"] != "Namespace"}
    existing = set(kubectl("get", "namespaces", "-o", "name").split())
    made = [ns for ns in sorted(wanted - {None}) if f"namespace/{ns}" not in existing]
    for namespace in made:
        kubectl("create", "namespace", namespace)
    try:
        yield
    finally:
        for namespace in made:
            kubectl("delete", "namespace", namespace)


@pytest.mark.parametrize("name", OBJECT_FILES)
def test_the_file_as_written_is_accepted_by_the_api_server(kubectl: Kubectl, name: str) -> None:
    with namespaces_of(kubectl, name):
        out = kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES / name))
    assert out.count("(server dry run)") == len(documents(name)), out


@pytest.mark.parametrize("name", CONFIGURATION_FILES)
def test_the_scheduler_configuration_resolves_into_plugins(name: str) -> None:
    config = load(EXAMPLES / name)
    for profile in config.profiles:
        assert assemble([profile]).profile().framework.instances


def test_the_story_tests_listed_do_apply_their_files() -> None:
    assert set(STORY_TESTS) <= set(FILES), set(STORY_TESTS) - set(FILES)
    for name, test_file in STORY_TESTS.items():
        source = (Path(__file__).parent / test_file).read_text()
        assert Path(name).name in source, f"{test_file} does not apply {name}"
