"""The admission webhook's pure parts: the configuration Berth writes (policies chosen
per kind, where the API server dials), the review answer, and the certificates."""

from __future__ import annotations

import base64
import ipaddress

from cryptography import x509

from berth.operators.admission import POD_PATH, QUOTA_PATH, response, webhooks
from berth.operators.webhookcerts import generate


def test_quotas_fail_closed_and_pods_fail_open_and_only_labelled_pods_are_sent() -> None:
    quota, pod = webhooks(None, "berth-system", b"CA")
    assert quota["failurePolicy"] == "Fail"
    assert quota["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]
    assert quota["clientConfig"] == {
        "service": {
            "namespace": "berth-system",
            "name": "berth-webhook",
            "path": QUOTA_PATH,
            "port": 443,
        },
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert pod["failurePolicy"] == "Ignore"
    assert pod["objectSelector"] == {
        "matchExpressions": [{"key": "quota.scheduling.koordinator.sh/name", "operator": "Exists"}]
    }
    assert all(hook["sideEffects"] == "None" for hook in (quota, pod))


def test_a_url_is_dialled_directly() -> None:
    quota, pod = webhooks("https://127.0.0.1:9443/", "berth-system")
    assert quota["clientConfig"] == {"url": "https://127.0.0.1:9443" + QUOTA_PATH}
    assert pod["clientConfig"] == {"url": "https://127.0.0.1:9443" + POD_PATH}


def test_the_answer_carries_the_uid_and_the_reason() -> None:
    review = {"request": {"uid": "u-1"}}
    assert response(review, None)["response"] == {"uid": "u-1", "allowed": True}
    refused = response(review, "because")["response"]
    assert refused["allowed"] is False
    assert refused["status"] == {"code": 403, "reason": "Forbidden", "message": "because"}


def test_the_serving_certificate_is_signed_by_the_ca_and_names_the_host() -> None:
    material = generate(["127.0.0.1", "berth-webhook.berth-system.svc"])
    ca = x509.load_pem_x509_certificate(material.ca)
    cert = x509.load_pem_x509_certificate(material.cert)
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["berth-webhook.berth-system.svc"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
