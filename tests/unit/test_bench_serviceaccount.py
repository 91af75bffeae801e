"""The operators' kubeconfig in benchmarks: the admin's cluster, the ServiceAccount's token."""

from __future__ import annotations

from berth.bench.serviceaccount import SERVICE_ACCOUNT, token_kubeconfig

ADMIN = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "other", "cluster": {"server": "https://127.0.0.1:1"}},
        {
            "name": "berth",
            "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="},
        },
    ],
    "users": [{"name": "admin", "user": {"client-certificate-data": "Y2VydA=="}}],
    "contexts": [
        {"name": "other", "context": {"cluster": "other", "user": "admin"}},
        {"name": "berth", "context": {"cluster": "berth", "user": "admin"}},
    ],
    "current-context": "berth",
}


def test_the_current_cluster_is_reached_with_the_token_and_no_certificate() -> None:
    config = token_kubeconfig(ADMIN, "t0ken")
    assert config["clusters"] == [ADMIN["clusters"][1]]
    assert config["users"] == [{"name": SERVICE_ACCOUNT, "user": {"token": "t0ken"}}]
    context = config["contexts"][0]
    assert config["current-context"] == context["name"]
    assert context["context"] == {"cluster": "berth", "user": SERVICE_ACCOUNT}
