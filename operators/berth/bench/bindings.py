"""Watching the measured pods get bound, on the harness' clock.

An Informer, not a plain watch: on a loaded machine the API server drops watchers that fall
behind, and a plain watch would lose the bindings made meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import time
from types import TracebackType
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.bench.workloads import MEASURED_NAMESPACE
from berth.kube.watch import Informer


class BindWatch:
    """``bound[name]``: when the harness first saw the pod with a node."""

    def __init__(self, api: ApiClient, expected: int) -> None:
        self.expected = expected
        self.bound: dict[str, float] = {}
        self.done = asyncio.Event()
        core = CoreV1Api(api)
        self._informer = Informer(
            "pods", functools.partial(core.list_namespaced_pod, MEASURED_NAMESPACE), self._seen
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _seen(self, kind: str, pod: dict[str, Any]) -> None:
        name = str(pod["metadata"]["name"])
        if kind != "DELETED" and (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound[name] = time.perf_counter()
            if len(self.bound) >= self.expected:
                self.done.set()

    async def __aenter__(self) -> BindWatch:
        self._task = asyncio.create_task(self._informer.run(self._stop))
        await self._informer.synced.wait()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
