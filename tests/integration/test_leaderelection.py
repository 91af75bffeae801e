"""Leader election against a real kube-apiserver: one leader at a time, quick hand-over on a
clean stop, hand-over after the lease duration on a crash, and a leader that gives up its
work as soon as it can no longer be sure it leads.

Durations are short (lease 3s, renew deadline 2s, retry 0.5s) to keep the tests fast; the
algorithm only depends on their ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, V1Lease

from berth import log
from berth.kube.client import load_configuration
from berth.kube.leaderelection import LeaderElector, LeaseConfig, default_identity
from tests.support import eventually

logger = log.get(__name__)

LEASE = "berth-controller"
LEASE_DURATION = 3.0
RENEW_DEADLINE = 2.0
RETRY_PERIOD = 0.5


@dataclass
class Candidate:
    """One replica: an elector, its stop event, and what its lead() work went through."""

    identity: str
    elector: LeaderElector
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    started_at: float = 0.0  # monotonic, when lead() began
    started_wall: float = 0.0  # wall clock, to compare with the Lease's timestamps
    cancelled_wall: float = 0.0
    cancelled: bool = False
    task: asyncio.Task[bool] | None = None

    async def lead(self) -> None:
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled_wall = time.time()
            self.cancelled = True
            raise

    def start(self) -> Candidate:
        self.task = asyncio.create_task(self.elector.run(self.lead, self.stop))
        return self

    async def result(self, within: float) -> bool:
        assert self.task is not None
        return await asyncio.wait_for(asyncio.shield(self.task), within)


Start = Callable[..., Candidate]


@pytest.fixture
async def start(api: ApiClient, namespace: str) -> AsyncIterator[Start]:
    """Starts candidates for the test's Lease; cancels whatever still runs afterwards."""
    started: list[Candidate] = []

    def make(identity: str, client: ApiClient | None = None) -> Candidate:
        config = LeaseConfig(
            namespace=namespace,
            name=LEASE,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
        )
        candidate = Candidate(identity, LeaderElector(client or api, config)).start()
        started.append(candidate)
        return candidate

    yield make
    for candidate in started:
        if candidate.task is not None:
            candidate.task.cancel()
            with contextlib.suppress(BaseException):
                await candidate.task


@pytest.mark.parametrize(
    ("durations", "complaint"),
    [
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease_duration"),
        ({"renew_deadline": 2.0, "retry_period": 2.0}, "renew_deadline"),
        ({"retry_period": 0.0}, "retry_period"),
    ],
)
def test_config_refuses_durations_that_allow_two_leaders(
    durations: dict[str, float], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        LeaseConfig("berth-system", LEASE, "alpha", **durations)
    with pytest.raises(ValueError, match="identity"):
        LeaseConfig("berth-system", LEASE, "")


def test_default_identity_is_hostname_and_unique() -> None:
    first, second = default_identity(), default_identity()
    assert first != second
    assert first.rsplit("_", 1)[0] == second.rsplit("_", 1)[0] != ""


async def sees(candidate: Candidate, holder: str) -> bool:
    return candidate.elector.observed_leader == holder


async def read_lease(api: ApiClient, namespace: str) -> V1Lease:
    return await CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)


async def test_single_candidate_acquires_renews_and_releases(
    api: ApiClient, namespace: str, start: Start
) -> None:
    alpha = start("alpha")
    await asyncio.wait_for(alpha.started.wait(), 10)
    assert alpha.elector.is_leader

    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == "alpha"
    assert lease.spec.lease_duration_seconds == int(LEASE_DURATION)
    assert lease.spec.lease_transitions == 0
    assert lease.spec.acquire_time is not None
    first_renewal = lease.spec.renew_time

    async def renewed() -> bool:
        lease = await read_lease(api, namespace)
        assert lease.spec.holder_identity == "alpha"
        return bool(lease.spec.renew_time > first_renewal)

    await eventually(renewed, within=RENEW_DEADLINE)  # the leader renews every retry period
    assert alpha.elector.is_leader

    alpha.stop.set()
    assert await alpha.result(within=5) is True
    assert alpha.cancelled, "lead() is cancelled on stop"
    assert not alpha.elector.is_leader
    lease = await read_lease(api, namespace)
    assert not lease.spec.holder_identity, "a clean stop releases the lease"
    assert lease.spec.lease_duration_seconds == 1


async def test_two_candidates_never_lead_at_once(
    api: ApiClient, namespace: str, start: Start
) -> None:
    alpha, beta = start("alpha"), start("beta")

    async def someone_leads() -> bool:
        return alpha.elector.is_leader or beta.elector.is_leader

    await eventually(someone_leads, within=10)
    # Sample for longer than a lease duration, so several renewals fall inside.
    samples = []
    for _ in range(200):
        samples.append((alpha.elector.is_leader, beta.elector.is_leader))
        await asyncio.sleep(0.02)
    leaders_per_sample = [sum(sample) for sample in samples]
    assert set(leaders_per_sample) == {1}, samples

    leader = alpha if alpha.elector.is_leader else beta
    standby = beta if leader is alpha else alpha
    assert leader.started.is_set()
    assert not standby.started.is_set(), "the standby's lead() never ran"
    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == leader.identity
    assert standby.elector.observed_leader == leader.identity


async def test_clean_stop_hands_over_well_before_the_lease_expires(
    api: ApiClient, namespace: str, start: Start
) -> None:
    alpha = start("alpha")
    await asyncio.wait_for(alpha.started.wait(), 10)
    beta = start("beta")
    await eventually(lambda: sees(beta, "alpha"), within=10)
    assert not beta.started.is_set()

    stopped_at = time.monotonic()
    alpha.stop.set()
    assert await alpha.result(within=5) is True
    await asyncio.wait_for(beta.started.wait(), LEASE_DURATION + 2 * RETRY_PERIOD)
    hand_over = beta.started_at - stopped_at
    logger.info("clean hand-over", seconds=round(hand_over, 3))

    assert alpha.cancelled
    assert alpha.cancelled_wall <= beta.started_wall, "alpha stopped before beta started"
    # Well before the lease could have expired: beta took the released lease.
    assert hand_over < LEASE_DURATION, f"hand-over took {hand_over:.2f}s"
    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == "beta"
    assert lease.spec.lease_transitions == 1


async def test_crashed_leader_is_replaced_after_the_lease_duration(
    api: ApiClient, namespace: str, start: Start
) -> None:
    alpha = start("alpha")
    await asyncio.wait_for(alpha.started.wait(), 10)
    beta = start("beta")
    await eventually(lambda: sees(beta, "alpha"), within=10)
    assert not beta.started.is_set()

    assert alpha.task is not None
    alpha.task.cancel()  # a crash: no release
    crashed_at = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await alpha.task
    assert alpha.cancelled
    await asyncio.sleep(0.2)  # let any renewal still in flight land
    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == "alpha", "a crash does not release the lease"
    last_renewal = lease.spec.renew_time.timestamp()

    await asyncio.wait_for(beta.started.wait(), LEASE_DURATION + 2 * RETRY_PERIOD + 2)
    hand_over = beta.started_at - crashed_at
    waited = beta.started_wall - last_renewal
    logger.info("crash hand-over", seconds=round(hand_over, 3), since_last_renewal=round(waited, 3))

    assert waited >= LEASE_DURATION, f"beta took over {waited:.2f}s after the last renewal"
    # Promptly once it expired: within the lease and a couple of polls (plus what a loaded
    # machine adds to two processes' timers).
    assert hand_over <= LEASE_DURATION + 2 * RETRY_PERIOD + 1, f"hand-over took {hand_over:.2f}s"
    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == "beta"
    assert lease.spec.lease_transitions == 1


async def test_leader_whose_lease_is_taken_stops_leading(
    api: ApiClient, namespace: str, start: Start
) -> None:
    alpha = start("alpha")
    await asyncio.wait_for(alpha.started.wait(), 10)

    lease = await read_lease(api, namespace)
    now = datetime.now(UTC).replace(microsecond=123456)
    lease.spec.holder_identity = "intruder"
    lease.spec.lease_duration_seconds = 60
    lease.spec.acquire_time = now
    lease.spec.renew_time = now
    lease.spec.lease_transitions += 1
    await CoordinationV1Api(api).replace_namespaced_lease(LEASE, namespace, lease)
    taken_at = time.monotonic()

    assert await alpha.result(within=RENEW_DEADLINE + 2) is False
    noticed = time.monotonic() - taken_at
    logger.info("theft noticed", seconds=round(noticed, 3))
    assert alpha.cancelled, "lead() is cancelled when leadership is lost"
    assert not alpha.elector.is_leader
    # Noticed at a renewal, not only when the renew deadline runs out (that comes at least
    # RENEW_DEADLINE - RETRY_PERIOD after the theft, as a renewal preceded it by at most
    # RETRY_PERIOD).
    assert noticed < RENEW_DEADLINE - RETRY_PERIOD, f"took {noticed:.2f}s to notice"
    lease = await read_lease(api, namespace)
    assert lease.spec.holder_identity == "intruder", "the loser does not write the lease back"


async def test_leader_cut_off_from_the_api_stops_before_anyone_takes_over(
    api: ApiClient,
    namespace: str,
    start: Start,
    kubeconfig_path: str,
) -> None:
    own = ApiClient(await load_configuration(kubeconfig_path))
    async with own:
        alpha = start("alpha", own)
        await asyncio.wait_for(alpha.started.wait(), 10)
        beta = start("beta")
        await eventually(lambda: sees(beta, "alpha"), within=10)
        # Every request alpha makes from now on is refused at the TCP level.
        own.configuration.host = "https://127.0.0.1:9"
        cut_at = time.monotonic()

        assert await alpha.result(within=RENEW_DEADLINE + 2) is False
        gave_up = time.monotonic() - cut_at
        logger.info("cut-off leader gave up", seconds=round(gave_up, 3))
        assert alpha.cancelled
        assert not alpha.elector.is_leader
        # Before the lease could expire for anyone else (it was renewed before the cut).
        assert gave_up < LEASE_DURATION, f"gave up after {gave_up:.2f}s"

        await asyncio.wait_for(beta.started.wait(), LEASE_DURATION + 2 * RETRY_PERIOD + 2)
        assert alpha.cancelled_wall < beta.started_wall, "two leaders at once"
        lease = await read_lease(api, namespace)
        assert lease.spec.holder_identity == "beta"
