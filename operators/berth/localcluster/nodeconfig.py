"""What the real node's parts are told: containerd's, the CNI network's, the kubelet's and
the API server's egress configuration, as plain functions of the node's layout.

The facts of this machine they encode (see docs/local-cluster.md#the-real-node): crun
refuses the cgroup layout, so runc; a negative ``oom_score_adj`` is refused even to root,
so containerd restricts it and the kubelet asks for none; the cgroup controllers are v1,
so the kubelet is told to accept them, with the cgroupfs driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

NETNS = "berth-node"
NODE_NAME = "berth-node"
NODE_ADDRESS = "10.250.0.2"
"""The node's InternalIP, on the loopback of its own network namespace."""
SERVICE_ADDRESS = "10.96.0.1"
"""The ``kubernetes`` Service's ClusterIP (the first of --service-cluster-ip-range): the
node bridge listens on it inside the namespace, where kube-proxy would route it."""
SERVICE_PORT = 443
POD_SUBNET = "10.250.1.0/24"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
NODE_LABEL = "berth.dev/real-node"
"""Label and NoSchedule taint of the real node: the cluster's workloads stay on the kwok
nodes, and what is meant to run here (Berth itself) tolerates it."""
KUBELET_PORT = 10250


@dataclass(frozen=True)
class NodeLayout:
    """Where the real node keeps its state (under the cluster's state directory)."""

    root: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def egress_socket(self) -> Path:
        return self.root / "egress.sock"

    @property
    def egress_config(self) -> Path:
        return self.root / "egress-selector.yaml"

    @property
    def pki(self) -> Path:
        return self.root / "pki"


def containerd_toml(layout: NodeLayout, cni_bin_dir: str) -> str:
    """containerd 1.6's configuration (version 2) for the CRI plugin with runc."""
    state = layout.root / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{state / "root"}"',
            f'state = "{state / "state"}"',
            "[grpc]",
            f'  address = "{layout.containerd_socket}"',
            "[ttrpc]",
            f'  address = "{state / "ttrpc.sock"}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  restrict_oom_score_adj = true",
            # The pods' network namespaces beside the node's state, not in /var/run/netns.
            "  netns_mounts_under_state_dir = true",
            "  enable_selinux = false",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{cni_bin_dir}"',
            f'  conf_dir = "{layout.cni_conf_dir}"',
            "",
        ]
    )


def cni_conflist() -> dict[str, Any]:
    """A bridge inside the node's namespace; no masquerade: pods talk only to what is in
    that namespace (the node bridge's listener) and to each other."""
    return {
        "cniVersion": "0.4.0",
        "name": "berth-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_configuration(layout: NodeLayout, ca_file: Path) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration: authenticated by client certificates and
    webhook tokens, authorized by the API server, registered tainted and labelled."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_ADDRESS,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "maxPods": 30,
        "serializeImagePulls": False,
        "evictionHard": {"memory.available": "100Mi"},
        "registerWithTaints": [{"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "resolvConf": "/etc/resolv.conf",
    }


def kubelet_argv(kubelet: Path, layout: NodeLayout) -> list[str]:
    return [
        str(kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.pki}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_ADDRESS}",
        f"--node-labels={NODE_LABEL}=true",
        "--v=1",
    ]


def egress_selector(layout: NodeLayout) -> dict[str, Any]:
    """The API server reaches the cluster (webhooks behind Services, the service proxy, the
    kubelet) through the node bridge's CONNECT proxy; the control plane and etcd directly."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(layout.egress_socket)}},
                },
            },
            {"name": "controlplane", "connection": {"proxyProtocol": "Direct"}},
            {"name": "etcd", "connection": {"proxyProtocol": "Direct"}},
        ],
    }


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with a client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "berth-local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "berth-local", "context": {"cluster": "berth-local", "user": user}}],
        "current-context": "berth-local",
    }
