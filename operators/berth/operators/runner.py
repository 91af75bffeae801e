"""Running the Kopf operators inside ``berth run``'s event loop."""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

import kopf
from kubernetes_asyncio.client import Configuration

from berth import log
from berth.kube.client import api_client
from berth.operators.cluster import Cluster
from berth.operators.registry import REGISTRY

# The operator modules; each registers its handlers in REGISTRY when imported.
OPERATOR_MODULES: tuple[str, ...] = (
    "berth.operators.elasticquota",
    "berth.operators.nodemetric",
    "berth.operators.podgroup",
    "berth.operators.podmigrationjob",
    "berth.operators.reservation",
)

logger = log.get(__name__)


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    """Kopf connects exactly as the rest of Berth does: from the same Configuration."""
    keys = configuration.api_key or {}
    token = keys.get("authorization") or keys.get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token[len("bearer ") :]
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        token=token,
    )


@kopf.on.login(registry=REGISTRY)
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    return connection_info(memo.configuration)


@kopf.on.startup(registry=REGISTRY)
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = "berth.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="berth.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="berth.dev", key="last-handled-configuration"
    )


async def run_operators(configuration: Configuration, stop: asyncio.Event, **memo: Any) -> None:
    """Run every operator module until ``stop`` is set; ``memo`` is handed to all of them
    (e.g. the metrics they count into), with the pods and nodes they share (``cluster``).

    Standalone: only the elected leader of ``berth run`` runs the operators, so Kopf's own
    peering is not needed.
    """
    for module in OPERATOR_MODULES:
        importlib.import_module(module)
    # Kopf logs every handled event per object; Berth's handlers log what they change.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logger.info("operators starting", modules=list(OPERATOR_MODULES))
    api = api_client(configuration)
    cluster = Cluster(api)
    following = asyncio.create_task(cluster.run(stop), name="operators-cluster")
    try:
        await kopf.operator(
            registry=REGISTRY,
            clusterwide=True,
            standalone=True,
            stop_flag=stop,
            memo=kopf.Memo(configuration=configuration, cluster=cluster, **memo),
        )
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await api.close()
