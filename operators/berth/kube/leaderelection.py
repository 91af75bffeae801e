"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Only one replica of a controller may act at a time, so replicas campaign for a Lease. The
holder renews it every retry period. A candidate takes it over when nobody holds it, or when
it has seen no change to the record for a whole lease duration. That duration is timed on
the candidate's own monotonic clock from the moment it saw the record change, never from
the holder's timestamps, so clock skew between nodes does not matter (only a difference in
clock *rate* does). Every write carries the resourceVersion that was read, so when two
candidates race for an expired lease only one wins; the other gets 409 Conflict.

A leader that cannot renew within ``renew_deadline`` stops its work. That deadline is
shorter than the lease duration, which is the least time a candidate waits after the
leader's last renewal, so two replicas never believe they lead at the same moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import math
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.client import (
    ApiClient,
    CoordinationV1Api,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log

logger = log.get(__name__)

CONFLICT = 409
NOT_FOUND = 404


def default_identity() -> str:
    """``<hostname>_<uuid>``: the pod is recognisable, and a restart is a new candidate."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaseConfig:
    """Which Lease to campaign for, as whom, and how fast.

    The defaults are kube-scheduler's. ``identity`` must be unique per process; callers use
    ``default_identity()`` so a restarted pod is a new candidate, not the old leader.
    """

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("identity must not be empty: an empty holder means a free lease")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if self.renew_deadline <= self.retry_period:
            raise ValueError("renew_deadline must exceed retry_period to allow one retry")
        if self.lease_duration <= self.renew_deadline:
            # Otherwise a candidate could take over while the old leader still works.
            raise ValueError("lease_duration must exceed renew_deadline")


@dataclass(frozen=True)
class _Record:
    """The election-relevant part of a Lease's spec."""

    holder: str
    duration: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int

    @classmethod
    def of(cls, lease: V1Lease) -> _Record:
        spec = lease.spec
        if spec is None:
            return cls("", 0, None, None, 0)
        return cls(
            holder=spec.holder_identity or "",
            duration=spec.lease_duration_seconds or 0,
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=spec.lease_transitions or 0,
        )


class _Outcome(enum.Enum):
    HELD = "held"  # we hold the lease now: acquired or renewed
    TAKEN = "taken"  # another identity holds an unexpired lease
    FAILED = "failed"  # an API error or a lost write race: try again later


class _End(enum.Enum):
    STOPPED = "stopped"
    LOST = "lost"
    FINISHED = "finished"


def _micro_time(moment: datetime | None) -> datetime | None:
    """A time the client serialises as a valid MicroTime.

    The client writes ``isoformat()``, which drops a zero fraction of a second, and the API
    server's MicroTime parser insists on six fractional digits; one microsecond later is
    the same moment for a lease.
    """
    if moment is None or moment.microsecond:
        return moment
    return moment.replace(microsecond=1)


class LeaderElector:
    """Campaigns for one Lease and runs the caller's work only while holding it.

    One elector serves one ``run``; a process that lost leadership exits and starts afresh.
    """

    def __init__(self, api: ApiClient, config: LeaseConfig) -> None:
        self._leases = CoordinationV1Api(api)
        self._config = config
        # The API takes whole seconds; rounding up only makes candidates wait longer.
        self._duration_seconds = max(1, math.ceil(config.lease_duration))
        self._log = logger.bind(
            namespace=config.namespace, name=config.name, identity=config.identity
        )
        self._lease: V1Lease | None = None  # the last Lease read or written
        self._observed: _Record | None = None
        self._observed_at = 0.0  # monotonic time the record was last seen to change
        self._leading = False
        self._renewed_at = 0.0  # monotonic time the last successful write was sent

    @property
    def is_leader(self) -> bool:
        """True while this process holds the lease.

        Turns false on its own once the renew deadline has passed without a successful
        renewal, before any candidate could consider the lease expired.
        """
        return self._leading and time.monotonic() < self._renewed_at + self._config.renew_deadline

    @property
    def observed_leader(self) -> str:
        """The holder named by the last record seen; empty when none is known."""
        return self._observed.holder if self._observed else ""

    async def run(self, lead: Callable[[], Awaitable[None]], stop: asyncio.Event) -> bool:
        """Campaign until leader or stop; then run lead() while renewing every retry_period.

        Returns True when stopped cleanly: ``stop`` was set (lead() is cancelled, then the
        lease released with an empty holder and a one-second duration so a standby takes
        over at once), or lead() returned by itself (the lease is released too; if lead()
        raised, the error propagates after the release). Returns False when leadership was
        lost, because renewal failed for renew_deadline or another identity took the lease:
        lead() is cancelled first. Callers exit the process on False, as kube-scheduler does.

        Cancelling ``run`` itself cancels lead() without releasing, like a crash.
        """
        if not await self._campaign(stop):
            return True
        work: asyncio.Future[None] = asyncio.ensure_future(lead())
        try:
            end = await self._hold(work, stop)
        except BaseException:
            # Cancelled from outside: stop the work, but leave the lease to expire.
            self._leading = False
            work.cancel()
            await asyncio.wait({work})
            raise
        if end is _End.LOST:
            self._leading = False
            await self._cancel(work)
            return False
        if end is _End.STOPPED:
            await self._cancel(work)
        await self._release()
        if end is _End.FINISHED and not work.cancelled():
            error = work.exception()
            if error is not None:
                raise error
        return True

    async def _campaign(self, stop: asyncio.Event) -> bool:
        """Try every retry period until the lease is ours (True) or stop is set (False)."""
        self._log.info("campaigning for lease")
        period = self._config.retry_period
        while not stop.is_set():
            started = time.monotonic()
            outcome = await self._attempt(within=self._config.renew_deadline)
            if outcome is _Outcome.HELD:
                if stop.is_set():
                    await self._release()
                    return False
                return True
            # Jitter only downwards, so a standby never polls less often than retry_period.
            wake = started + period * random.uniform(0.9, 1.0)
            if outcome is _Outcome.TAKEN and self._observed is not None:
                # Poll again the moment the lease would lapse, not up to a period later:
                # after a crash the standby leads within lease_duration + retry_period.
                wake = min(wake, self._observed_at + self._observed.duration)
            pause = wake - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, pause))
        return False

    async def _hold(self, work: asyncio.Future[None], stop: asyncio.Event) -> _End:
        """Renew every retry period until stop, the end of lead(), or loss of the lease."""
        config = self._config
        stopping = asyncio.ensure_future(stop.wait())
        waiters: set[asyncio.Future[Any]] = {work, stopping}
        next_renewal = self._renewed_at + config.retry_period
        try:
            while True:
                deadline = self._renewed_at + config.renew_deadline
                now = time.monotonic()
                wake = min(next_renewal, deadline)
                if wake > now:
                    await asyncio.wait(
                        waiters, timeout=wake - now, return_when=asyncio.FIRST_COMPLETED
                    )
                    now = time.monotonic()
                if stop.is_set():
                    return _End.STOPPED
                if work.done():
                    self._log.info("lead work ended by itself")
                    return _End.FINISHED
                if now >= deadline:
                    self._log.error(
                        "leadership lost: lease not renewed within the renew deadline",
                        renew_deadline=config.renew_deadline,
                    )
                    return _End.LOST
                if now < next_renewal:
                    continue
                next_renewal = now + config.retry_period
                outcome = await self._attempt(within=deadline - now)
                if outcome is _Outcome.TAKEN:
                    self._log.error("leadership lost: lease taken", holder=self.observed_leader)
                    return _End.LOST
        finally:
            stopping.cancel()

    async def _attempt(self, within: float) -> _Outcome:
        """One round, bounded in time; an unreachable API server is just a failed round."""
        try:
            async with asyncio.timeout(within):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            self._log.warning("lease request timed out", timeout=round(within, 3))
        except (aiohttp.ClientError, OSError) as error:
            self._log.warning("cannot reach the API server", error=str(error) or repr(error))
        return _Outcome.FAILED

    async def _try_acquire_or_renew(self) -> _Outcome:
        """One round of client-go's algorithm: optimistic renewal, else read and decide."""
        identity = self._config.identity
        now = datetime.now(UTC)
        if self._leading and self._lease is not None and self._observed is not None:
            # Fast path: the record we wrote last is very likely still current.
            record = _Record(
                identity,
                self._duration_seconds,
                self._observed.acquire_time,
                now,
                self._observed.transitions,
            )
            sent_at = time.monotonic()
            try:
                lease = await self._replace(record)
            except ApiException as error:
                self._log.info("optimistic renewal failed; reading the lease", status=error.status)
            else:
                self._held(lease, sent_at)
                self._log.debug("lease renewed")
                return _Outcome.HELD

        try:
            lease = await self._leases.read_namespaced_lease(
                self._config.name, self._config.namespace
            )
        except ApiException as error:
            if error.status != NOT_FOUND:
                self._log.warning("cannot read lease", status=error.status, reason=error.reason)
                return _Outcome.FAILED
            return await self._create(now)

        self._observe(lease)
        observed = _Record.of(lease)
        expires_at = self._observed_at + observed.duration
        if observed.holder and observed.holder != identity and time.monotonic() < expires_at:
            self._leading = False
            return _Outcome.TAKEN

        if observed.holder == identity:
            acquired = observed.acquire_time or now
            record = _Record(identity, self._duration_seconds, acquired, now, observed.transitions)
        else:
            record = _Record(identity, self._duration_seconds, now, now, observed.transitions + 1)
        sent_at = time.monotonic()
        try:
            lease = await self._replace(record)
        except ApiException as error:
            if error.status == CONFLICT:
                self._log.info("lost the race for the lease to another writer")
            else:
                self._log.warning("cannot update lease", status=error.status, reason=error.reason)
            return _Outcome.FAILED
        if not self._leading:
            self._log.info(
                "lease acquired", previous=observed.holder, transitions=record.transitions
            )
        self._held(lease, sent_at)
        return _Outcome.HELD

    async def _create(self, now: datetime) -> _Outcome:
        """Create the missing Lease with us as holder; 409 means another candidate did."""
        record = _Record(self._config.identity, self._duration_seconds, now, now, 0)
        body = V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=V1ObjectMeta(name=self._config.name, namespace=self._config.namespace),
            spec=self._spec(record),
        )
        sent_at = time.monotonic()
        try:
            lease = await self._leases.create_namespaced_lease(self._config.namespace, body)
        except ApiException as error:
            if error.status == CONFLICT:
                self._log.info("lost the race to create the lease")
            else:
                self._log.warning("cannot create lease", status=error.status, reason=error.reason)
            return _Outcome.FAILED
        self._log.info("lease acquired", previous="", transitions=0, created=True)
        self._held(lease, sent_at)
        return _Outcome.HELD

    async def _replace(self, record: _Record) -> V1Lease:
        """Write ``record`` over the last Lease seen, guarded by its resourceVersion.

        The metadata goes back as read (labels, annotations and resourceVersion kept),
        except managedFields: an empty list leaves the server's bookkeeping as it is.
        """
        assert self._lease is not None, "replace follows a read or a write"
        metadata = copy.copy(self._lease.metadata)
        metadata.managed_fields = []
        body = V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=metadata,
            spec=self._spec(record),
        )
        return await self._leases.replace_namespaced_lease(
            self._config.name, self._config.namespace, body
        )

    @staticmethod
    def _spec(record: _Record) -> V1LeaseSpec:
        return V1LeaseSpec(
            holder_identity=record.holder,
            lease_duration_seconds=record.duration,
            lease_transitions=record.transitions,
            acquire_time=_micro_time(record.acquire_time),
            renew_time=_micro_time(record.renew_time),
        )

    def _observe(self, lease: V1Lease) -> None:
        """Remember the Lease; restart the expiry clock only when its record changed."""
        self._lease = lease
        record = _Record.of(lease)
        if record != self._observed:
            if self._observed is None or record.holder != self._observed.holder:
                self._log.info("lease holder observed", holder=record.holder)
            self._observed = record
            self._observed_at = time.monotonic()

    def _held(self, lease: V1Lease, sent_at: float) -> None:
        """Our write succeeded: we lead until ``sent_at`` plus the renew deadline."""
        self._observe(lease)
        self._leading = True
        self._renewed_at = sent_at

    async def _release(self) -> None:
        """Hand the lease back so a standby need not wait for it to expire."""
        if not self.is_leader or self._observed is None:
            self._leading = False
            return
        self._leading = False
        remaining = self._renewed_at + self._config.renew_deadline - time.monotonic()
        now = datetime.now(UTC)
        record = _Record("", 1, now, now, self._observed.transitions)
        try:
            async with asyncio.timeout(remaining):
                lease = await self._replace(record)
        except (ApiException, aiohttp.ClientError, OSError) as error:
            self._log.warning(
                "cannot release lease; a standby takes over when it expires", error=repr(error)
            )
            return
        self._observe(lease)
        self._log.info("lease released")

    async def _cancel(self, work: asyncio.Future[None]) -> None:
        """Cancel lead() and wait for it to unwind; its own errors are logged, not raised."""
        work.cancel()
        await asyncio.wait({work})
        if not work.cancelled() and work.exception() is not None:
            self._log.error("lead work failed while stopping", error=repr(work.exception()))
