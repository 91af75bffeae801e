"""A side's process during a trial: started, watched for an early exit, its peak memory and
metrics read before it is stopped."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import ssl
import tempfile
from pathlib import Path

import aiohttp

from berth.bench.sides import GROUP_ATTEMPT_HISTOGRAM, Side
from berth.bench.stats import histogram_buckets, histogram_mean, histogram_quantile

STOP_GRACE = 15.0
COLLECTION_HISTOGRAM = "berth_gc_collection_duration_seconds"
PR_SET_PDEATHSIG = 1  # prctl(2)
# Looked up here, not between fork and exec, where the loader's lock may be held.
_PRCTL = ctypes.CDLL(None).prctl


def die_with_parent() -> None:
    """In a side's process before it runs: SIGTERM once the harness is gone, however it
    went (killed, interrupted mid-trial). A side left running would take the machine's CPU
    from the next benchmark."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far (NaN once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    # After the command: state is field 3, utime and stime fields 14 and 15 of proc(5).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apiserver_pid(server: str) -> int | None:
    """The local cluster's API server serving ``server`` (https://127.0.0.1:PORT)."""
    port = server.rsplit(":", 1)[-1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"berth-apiserver")
            and f"--secure-port={port}".encode() in argv
        ):
            return int(entry.name)
    return None


class SideProcess:
    def __init__(self, side: Side) -> None:
        self.side = side
        self.log_path = Path(tempfile.gettempdir()) / f"berth-bench-{side.scheduler_name}.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.side.argv, stdout=log, stderr=log, preexec_fn=die_with_parent
            )

    def exited(self) -> bool:
        return self.process is not None and self.process.returncode is not None

    def peak_rss_mib(self) -> float:
        return peak_rss_mib(self.process.pid) if self.process else float("nan")

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid) if self.process else float("nan")

    async def metrics(self) -> str | None:
        """The side's Prometheus metrics now (None when it has none or they cannot be read)."""
        if self.side.metrics_url is None:
            return None
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            async with (
                aiohttp.ClientSession(trust_env=False) as session,
                session.get(
                    self.side.metrics_url, ssl=context, timeout=aiohttp.ClientTimeout(total=10)
                ) as response,
            ):
                return await response.text()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    def cycle_p99_ms(self, text: str | None) -> float:
        """p99 of the side's scheduling-cycle histogram in ``text``, in ms (NaN when it has
        none)."""
        if text is None or self.side.cycle_histogram is None:
            return float("nan")
        name, labels = self.side.cycle_histogram
        buckets = histogram_buckets(text, name, labels)
        return histogram_quantile(0.99, buckets) * 1000

    def whole_heap_collections(self, before: str | None, after: str | None) -> tuple[int, float]:
        """Berth's whole-heap (generation 2) collections between two readings of its
        metrics: how many, and the bound of the longest in ms (0 when none); (0, NaN) for
        a side that does not time them."""
        if before is None or after is None or COLLECTION_HISTOGRAM not in after:
            return 0, float("nan")
        whole = {"generation": "2"}
        then = dict(histogram_buckets(before, COLLECTION_HISTOGRAM, whole))
        now = histogram_buckets(after, COLLECTION_HISTOGRAM, whole)
        added = [(bound, count - then.get(bound, 0.0)) for bound, count in now]
        total = int(added[-1][1]) if added else 0
        longest = next((bound for bound, count in added if count >= total), 0.0) if total else 0.0
        return total, longest * 1000

    def group_attempts(self, text: str | None) -> tuple[int, float, float]:
        """Its pod groups' scheduled attempts in ``text``: how many, their mean and p99 in
        ms; (0, NaN, NaN) for a side that does not place gangs whole."""
        if text is None or not self.side.gangs:
            return 0, float("nan"), float("nan")
        scheduled = {"result": "scheduled"}
        count, mean = histogram_mean(text, GROUP_ATTEMPT_HISTOGRAM, scheduled)
        p99 = histogram_quantile(0.99, histogram_buckets(text, GROUP_ATTEMPT_HISTOGRAM, scheduled))
        return count, mean * 1000, p99 * 1000

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
