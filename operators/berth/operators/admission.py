"""The ElasticQuota admission webhook: the quota tree's rules checked before a change is
stored (:mod:`berth.quota.treevalidation` decides; this serves it).

A small aiohttp HTTPS server of Berth's own rather than Kopf's admission support: Kopf
serves webhooks only inside the operator, which in ``berth run`` runs on the elected leader
alone, while the Service in front of the webhook reaches every replica; Kopf's self-signed
certificates need extra packages, and its managed configuration dials a URL, not a
Service. Here every replica serves the webhook (reading the API on each review, so a
standby answers as well as the leader), and the CA and serving certificate are made at
start: kept in a Secret so both replicas serve the same one, and written as ``caBundle``
into the ValidatingWebhookConfiguration. With ``url`` (Berth outside the cluster, as on
the local cluster), the certificate names the URL's host and the configuration dials it.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from berth import log
from berth.api.elasticquota import GROUP, VERSION
from berth.kube.client import checked
from berth.kube.write import ApiWriter, Conflict, Kind, api_message
from berth.operators.webhookcerts import TLSMaterial, generate
from berth.podstate import TERMINAL_PHASES
from berth.quota.tree import LABEL_NAME, PREFIX
from berth.quota.treevalidation import (
    LivePod,
    needs_pods,
    review_pod,
    review_quota,
    touches_tree,
)

logger = log.get(__name__)

CONFIGURATION: Final = "berth-elasticquota"
SERVICE: Final = "berth-webhook"
SECRET: Final = "berth-webhook-tls"
QUOTA_PATH: Final = "/validate-elasticquota"
POD_PATH: Final = "/validate-pod"
PLURAL: Final = "elasticquotas"
SECRETS: Final = Kind("", "v1", "secrets", namespaced=True)
WEBHOOK_CONFIGURATIONS: Final = Kind(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)


def _client_config(path: str, url: str | None, namespace: str, ca: bytes) -> dict[str, Any]:
    config: dict[str, Any] = (
        {"url": url.rstrip("/") + path}
        if url
        else {"service": {"namespace": namespace, "name": SERVICE, "path": path, "port": 443}}
    )
    if ca:
        config["caBundle"] = base64.b64encode(ca).decode()
    return config


def webhooks(url: str | None, namespace: str, ca: bytes = b"") -> list[dict[str, Any]]:
    """The webhooks of the ValidatingWebhookConfiguration Berth writes.

    ElasticQuotas: ``failurePolicy: Fail``, an unchecked change could break the tree's
    invariants, and quota changes are rare administrator actions that can wait for Berth.
    Pods: ``Ignore``, Berth being down must never stop pods from being created; the
    scheduler refuses a pod that names a parent quota anyway. Only pods carrying the quota
    label are sent.
    """
    return [
        {
            "name": "elasticquotas.berth.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": [VERSION],
                    "resources": [PLURAL],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "scope": "Namespaced",
                }
            ],
            "clientConfig": _client_config(QUOTA_PATH, url, namespace, ca),
        },
        {
            "name": "pods.quota.berth.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "objectSelector": {"matchExpressions": [{"key": LABEL_NAME, "operator": "Exists"}]},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["pods"],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": "Namespaced",
                }
            ],
            "clientConfig": _client_config(POD_PATH, url, namespace, ca),
        },
    ]


def response(review: Mapping[str, Any], refusal: str | None) -> dict[str, Any]:
    """The AdmissionReview answer: allowed, or refused with the reason as its message."""
    answer: dict[str, Any] = {"uid": (review.get("request") or {}).get("uid", ""), "allowed": True}
    if refusal is not None:
        answer["allowed"] = False
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": refusal}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}


def _meta(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    meta = (obj or {}).get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or meta.get("generateName") or ""


class AdmissionServer:
    """Serves the reviews over HTTPS and keeps the webhook configuration pointing at it."""

    def __init__(
        self, api: ApiClient, host: str, port: int, namespace: str, url: str | None = None
    ) -> None:
        self.api = api
        self.writer = ApiWriter(api)
        self.host = host
        self.port = port
        self.namespace = namespace
        self.url = url
        self._runner: web.AppRunner | None = None
        self._directory: Path | None = None

    async def start(self) -> None:
        material = await self._material()
        self._directory = Path(tempfile.mkdtemp(prefix="berth-webhook-"))
        cert, key = self._directory / "tls.crt", self._directory / "tls.key"
        cert.write_bytes(material.cert)
        key.write_bytes(material.key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_post(QUOTA_PATH, self._quota)
        app.router.add_post(POD_PATH, self._pod)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, ssl_context=context).start()
            await self._configure(material.ca)
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        logger.info(
            "admission webhook serving",
            name=CONFIGURATION,
            address=f"{self.host}:{self.port}",
            url=self.url,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    async def _material(self) -> TLSMaterial:
        """For a URL: a certificate naming its host, made now. In the cluster: the one in
        the Secret, made by whichever replica came first."""
        if self.url:
            return generate([urlsplit(self.url).hostname or "localhost"])
        core = CoreV1Api(self.api)
        try:
            return self._from_secret(await core.read_namespaced_secret(SECRET, self.namespace))
        except ApiException as err:
            if err.status != 404:
                raise
        dns = f"{SERVICE}.{self.namespace}.svc"
        material = generate([dns, f"{dns}.cluster.local"])
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "labels": {"app.kubernetes.io/part-of": "berth"}},
            "data": {
                "ca.crt": base64.b64encode(material.ca).decode(),
                "tls.crt": base64.b64encode(material.cert).decode(),
                "tls.key": base64.b64encode(material.key).decode(),
            },
        }
        try:
            await self.writer.create(SECRETS, secret, namespace=self.namespace)
            logger.info("webhook certificate made", namespace=self.namespace, name=SECRET)
            return material
        except Conflict:  # the other replica made it first
            return self._from_secret(await core.read_namespaced_secret(SECRET, self.namespace))

    @staticmethod
    def _from_secret(secret: Any) -> TLSMaterial:
        data = secret.data or {}
        return TLSMaterial(
            *(base64.b64decode(data.get(k) or "") for k in ("ca.crt", "tls.crt", "tls.key"))
        )

    async def _configure(self, ca: bytes) -> None:
        """The webhooks, with this CA, into the configuration (created when missing)."""
        hooks = webhooks(self.url, self.namespace, ca)
        metadata: dict[str, Any] = {
            "name": CONFIGURATION,
            "labels": {"app.kubernetes.io/part-of": "berth"},
        }
        if not self.url:
            # Uninstalling Berth (its namespace deleted) takes the configuration with it:
            # a Fail policy left dialling nobody would refuse every quota change.
            owner = await CoreV1Api(self.api).read_namespace(self.namespace)
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "name": self.namespace,
                    "uid": owner.metadata.uid,
                }
            ]
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": hooks,
        }
        try:
            await self.writer.create(WEBHOOK_CONFIGURATIONS, body)
        except Conflict:
            await self.writer.patch(WEBHOOK_CONFIGURATIONS, CONFIGURATION, {"webhooks": hooks})
        logger.info("webhook configuration written", name=CONFIGURATION)

    async def _quotas(self) -> list[dict[str, Any]]:
        listed = await CustomObjectsApi(self.api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return list(listed.get("items") or [])

    async def _live_pods(self) -> list[LivePod]:
        raw = await checked(
            await CoreV1Api(self.api).list_pod_for_all_namespaces(_preload_content=False)
        )
        listed = orjson.loads(await raw.read())
        raw.release()
        pods = []
        for pod in listed.get("items") or ():
            if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                continue
            meta = pod.get("metadata") or {}
            labels = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(PREFIX)}
            pods.append(LivePod(meta.get("namespace") or "", meta.get("name") or "", labels))
        return pods

    async def _quota(self, request: web.Request) -> web.Response:
        review = await request.json()
        req = review.get("request") or {}
        operation = req.get("operation") or ""
        old, new = req.get("oldObject"), req.get("object")
        namespace, name = _meta(new or old)
        refusal = None
        if touches_tree(operation, old, new):
            try:
                others = [q for q in await self._quotas() if _meta(q) != (namespace, name)]
                pods = await self._live_pods() if needs_pods(operation, old, new) else []
            except ApiException as err:
                refusal = f"Berth could not read the quota tree to check this: {api_message(err)}"
            else:
                refusal = review_quota(operation, old, new, others, pods)
        if refusal is not None:
            logger.info(
                "quota change refused",
                namespace=namespace,
                name=name,
                operation=operation,
                reason=refusal,
            )
        return web.json_response(response(review, refusal), dumps=_dumps)

    async def _pod(self, request: web.Request) -> web.Response:
        review = await request.json()
        req = review.get("request") or {}
        pod = req.get("object") or {}
        namespace, name = _meta(pod)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        old = req.get("oldObject")
        old_labels = ((old.get("metadata") or {}).get("labels") or {}) if old else None
        refusal = None
        if any(k.startswith(PREFIX) for k in labels):
            try:
                refusal = review_pod(labels, await self._quotas(), old_labels)
            except ApiException as err:
                refusal = f"Berth could not read the quota tree to check this: {api_message(err)}"
        if refusal is not None:
            logger.info("pod refused", namespace=namespace, name=name, reason=refusal)
        return web.json_response(response(review, refusal), dumps=_dumps)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
