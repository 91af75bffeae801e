"""The no-op binder: binds every pending pod that names it to the next node round robin,
deciding nothing, with the same client QPS and burst as the schedulers it is measured
beside. Whatever it reaches is as fast as binding goes on this API server and machine, so
no scheduler should beat it.

It keeps ``--concurrency`` bindings in flight (the token bucket, not the number of
connections, is the limit), and watches only unbound pods with its scheduler name, as
kube-scheduler's informer does for its pending pods.

Run as ``python -m berth.bench.ceiling --kubeconfig=... --scheduler-name=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import Configuration, CoreV1Api

from berth import log
from berth.kube.client import api_client, load_configuration
from berth.kube.watch import Informer
from berth.scheduler.writer import TokenBucket

logger = log.get(__name__)

DEFAULT_CONCURRENCY = 256


async def _node_names(core: CoreV1Api) -> list[str]:
    nodes = await core.list_node()
    return sorted(
        n.metadata.name
        for n in nodes.items
        if not (n.spec.unschedulable or any(t.effect == "NoSchedule" for t in n.spec.taints or []))
    )


def _session(configuration: Configuration, concurrency: int) -> aiohttp.ClientSession:
    """A bare HTTP session to the API server with the kubeconfig's credentials: bindings
    skip the generated client's per-request work, which would be the limit otherwise."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    token = configuration.api_key.get("authorization") or configuration.api_key.get("BearerToken")
    if token:
        headers["Authorization"] = token if token.startswith("Bearer") else f"Bearer {token}"
    return aiohttp.ClientSession(
        base_url=configuration.host,
        connector=aiohttp.TCPConnector(ssl=context, limit=concurrency),
        headers=headers,
        trust_env=False,
    )


async def bind_all(
    kubeconfig: str, scheduler_name: str, qps: float, burst: int, concurrency: int
) -> None:
    configuration = await load_configuration(kubeconfig)
    async with api_client(configuration) as api, _session(configuration, concurrency) as http:
        core = CoreV1Api(api)
        nodes = await _node_names(core)
        bucket = TokenBucket(qps, burst)
        pending: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
        queued: set[str] = set()

        def seen(kind: str, pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            if kind == "DELETED" or (pod.get("spec") or {}).get("nodeName"):
                return
            if meta["uid"] not in queued:
                queued.add(meta["uid"])
                pending.put_nowait((meta["namespace"], meta["name"], meta["uid"]))

        informer = Informer(
            "pods",
            functools.partial(
                core.list_pod_for_all_namespaces,
                field_selector=f"spec.schedulerName={scheduler_name},spec.nodeName=",
            ),
            seen,
        )
        turn = 0

        async def worker() -> None:
            nonlocal turn
            while True:
                namespace, name, uid = await pending.get()
                node = nodes[turn % len(nodes)]
                turn += 1
                await bucket.take()
                body = orjson.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": name, "namespace": namespace, "uid": uid},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    }
                )
                url = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
                async with http.post(url, data=body) as response:
                    if response.status >= 300:  # deleted or bound meanwhile: nothing to do
                        logger.info(
                            "binding refused",
                            namespace=namespace,
                            name=name,
                            status=response.status,
                        )
                    await response.read()

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        watching = asyncio.create_task(informer.run(stop))
        await stop.wait()
        for task in [*workers, watching]:
            task.cancel()
        await asyncio.gather(*workers, watching, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m berth.bench.ceiling", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--qps", type=float, required=True)
    parser.add_argument("--burst", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    args = parser.parse_args(argv)
    log.configure("warning")
    asyncio.run(
        bind_all(args.kubeconfig, args.scheduler_name, args.qps, args.burst, args.concurrency)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
