"""The pods' list asked for as ``berth run`` starts, against the real API server: read
over the kubeconfig's TLS and certificate, it is the list the informer would have asked
for, and the informer asks the server for none of its pages."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from berth.kube import earlylist
from berth.kube.watch import Informer

pytestmark = pytest.mark.integration


async def test_the_informer_takes_the_list_read_as_the_process_started(
    api: ApiClient, kubeconfig_path: str, namespace: str
) -> None:
    core = CoreV1Api(api)
    names = [f"early-{i}" for i in range(3)]
    for name in names:
        await core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        )
    earlylist.start(["run", "--no-operators", f"--kubeconfig={kubeconfig_path}"])
    early = earlylist.claim(str(api.configuration.host))
    assert early is not None, "the session's kubeconfig is one the early list reads"
    asked: list[dict[str, Any]] = []

    async def pods(**kwargs: Any) -> Any:
        asked.append(kwargs)
        return await core.list_pod_for_all_namespaces(**kwargs)

    seen: set[str] = set()
    informer = Informer(
        "pods",
        pods,
        lambda _, obj: seen.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"),
        early=early,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(informer.run(stop))
    try:
        await asyncio.wait_for(informer.synced.wait(), 60)
    finally:
        stop.set()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert {f"{namespace}/{name}" for name in names} <= seen
    assert not [call for call in asked if not call.get("watch")], "no page asked again"
    assert informer.stats.lists == 1
    assert informer.resource_version, "the watch goes on from the early list's version"
