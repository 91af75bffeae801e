"""Two `berth run` processes: one leads, the other takes over when the leader is killed,
and no pod is ever bound twice."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from berth.run import EXIT_LOST_LEADERSHIP, run_command
from tests.integration.cluster import Pods, pod_body
from tests.support import eventually

LEASE_SECONDS = 4


def short(namespace: str) -> str:
    return "ha-" + hashlib.sha1(namespace.encode()).hexdigest()[:10]


@pytest.fixture
def processes(
    kubeconfig_path: str, namespace: str, tmp_path: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": True,
            "resourceNamespace": namespace,
            "resourceName": "berth-controller",
            "leaseDuration": f"{LEASE_SECONDS}s",
            "renewDeadline": "3s",
            "retryPeriod": "500ms",
        },
        "profiles": [{"schedulerName": short(namespace)}],
    }
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    started: list[subprocess.Popen[bytes]] = []
    for i in range(2):
        log = (tmp_path / f"berth-{i}.log").open("wb")
        started.append(
            subprocess.Popen(
                run_command(kubeconfig_path, str(path), log_level="info"),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        )
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def identity_of(log: Path) -> str:
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "campaigning for lease":
            return str(record["identity"])
    return ""


async def test_standby_takes_over_and_nothing_is_bound_twice(
    api: ApiClient,
    namespace: str,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    leases = CoordinationV1Api(api)
    holder: list[str] = [""]

    async def led() -> bool:
        try:
            lease = await leases.read_namespaced_lease("berth-controller", namespace)
        except Exception:
            return False
        holder[0] = lease.spec.holder_identity or ""
        return bool(holder[0])

    await eventually(led)
    await eventually(lambda: _all_campaigning(tmp_path))
    identities = [identity_of(tmp_path / f"berth-{i}.log") for i in range(2)]
    leader = identities.index(holder[0])
    standby = 1 - leader

    pods = Pods(api, namespace)
    name = short(namespace)
    for i in range(10):
        await pods.create(pod_body(f"before-{i}", name, cpu="100m"))
    for i in range(10):
        await pods.wait_bound(f"before-{i}")

    last_renewal = (await leases.read_namespaced_lease("berth-controller", namespace)).spec
    processes[leader].kill()  # no release: the standby must wait out the lease
    processes[leader].wait()
    killed_at = time.time()
    for i in range(10):
        await pods.create(pod_body(f"after-{i}", name, cpu="100m"))
    for i in range(10):
        await pods.wait_bound(f"after-{i}", within=60)

    lease = await leases.read_namespaced_lease("berth-controller", namespace)
    assert lease.spec.holder_identity == identities[standby]
    # Timed by the Lease itself: the standby waited out the lease, and then took it
    # within a few retry periods (a loaded machine delays two processes' timers).
    acquired = lease.spec.acquire_time.timestamp()
    assert acquired - last_renewal.renew_time.timestamp() >= LEASE_SECONDS
    assert acquired - killed_at < LEASE_SECONDS + 6, f"took over {acquired - killed_at:.1f}s"
    assert processes[standby].poll() is None

    events = (await CoreV1Api(api).list_namespaced_event(namespace)).items
    scheduled: dict[str, int] = {}
    for event in events:
        if event.reason == "Scheduled":
            scheduled[event.involved_object.name] = scheduled.get(event.involved_object.name, 0) + (
                event.count or 1
            )
    assert len(scheduled) == 20
    assert set(scheduled.values()) == {1}, "a pod was bound more than once"
    failures = [e for e in events if e.reason == "FailedScheduling"]
    assert not failures, [e.message for e in failures]


async def test_a_leader_paused_past_its_lease_writes_nothing_when_it_wakes(
    api: ApiClient,
    namespace: str,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """SIGSTOP the leader past its lease; the standby takes over; SIGSTOP the standby too,
    create pods, and wake the old leader: it sees the pods, believes for a moment that it
    leads, and must neither bind them nor write anything about them. It exits as having
    lost the lease (the decision), and only then is the absence of writes judged."""
    leases = CoordinationV1Api(api)

    async def holder() -> str:
        lease = await leases.read_namespaced_lease("berth-controller", namespace)
        return lease.spec.holder_identity or ""

    async def led() -> bool:
        try:
            return bool(await holder())
        except ApiException:
            return False

    await eventually(led, within=60)
    await eventually(lambda: _all_campaigning(tmp_path), within=60)
    identities = [identity_of(tmp_path / f"berth-{i}.log") for i in range(2)]
    leader = identities.index(await holder())
    standby = 1 - leader
    pods = Pods(api, namespace)
    name = short(namespace)
    await pods.create(pod_body("before", name, cpu="100m"))
    await pods.wait_bound("before", within=60)

    processes[leader].send_signal(signal.SIGSTOP)
    try:
        await pods.create(pod_body("during", name, cpu="100m"))
        await pods.wait_bound("during", within=60)
        assert await holder() == identities[standby]

        processes[standby].send_signal(signal.SIGSTOP)
        for i in range(5):
            await pods.create(pod_body(f"after-{i}", name, cpu="100m"))
    finally:
        processes[leader].send_signal(signal.SIGCONT)
    try:
        # The decision: the woken leader finds its lease gone and exits for a restart.
        code = await asyncio.to_thread(processes[leader].wait, 60)
        assert code == EXIT_LOST_LEADERSHIP
        for i in range(5):
            pod = await pods.get(f"after-{i}")
            assert not pod.spec.node_name, f"after-{i} bound by a leader without a lease"
            assert not pod.status.conditions, f"after-{i} status written without a lease"
        events = (await CoreV1Api(api).list_namespaced_event(namespace)).items
        about = {e.involved_object.name for e in events}
        assert not about & {f"after-{i}" for i in range(5)}
        assert await holder() == identities[standby], "the old leader wrote the lease back"
    finally:
        processes[standby].send_signal(signal.SIGCONT)


async def _all_campaigning(tmp_path: Path) -> bool:
    return all(identity_of(tmp_path / f"berth-{i}.log") for i in range(2))


def test_a_missing_lease_namespace_is_a_clear_error(kubeconfig_path: str, tmp_path: Path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        yaml.safe_dump({"leaderElection": {"resourceNamespace": "no-such-namespace-berth"}})
    )
    result = subprocess.run(
        run_command(kubeconfig_path, str(config), log_level="info"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "the leader-election namespace does not exist" in result.stderr
    assert "no-such-namespace-berth" in result.stderr
