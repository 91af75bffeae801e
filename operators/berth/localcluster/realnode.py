"""The local cluster's real node: a kubelet with containerd and runc that runs real
containers (Berth's own pods), beside the kwok nodes that play the workload's nodes.

It lives in a network namespace of its own (``berth.localcluster.netns``), joined to the
API server on loopback by the node bridge. Its parts come from the cluster's build (the
kubelet), Debian's packages (containerd, runc, the CNI plugins: installed here when
missing, as root) and a pause image built from Kubernetes' own source. It needs root: a
kubelet manages cgroups, mounts and network namespaces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from berth.image.archive import write_archive
from berth.image.rootfs import architecture as architecture_of_this_machine
from berth.image.spec import ImageName, RunConfig
from berth.localcluster import netns, nodeconfig
from berth.localcluster.errors import ClusterError
from berth.localcluster.nodeconfig import NodeLayout
from berth.localcluster.nodepki import issue_client_certificate

PACKAGES = {"containerd": "containerd", "runc": "runc", "cni": "containernetworking-plugins"}
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
PAUSE_SOURCE = "build/pause/linux/pause.c"
CONTAINERD_READY_TIMEOUT = 30.0
IMPORT_TIMEOUT = 300.0


class RealNodeError(ClusterError):
    """The real node could not be set up; the message says why and what to do."""


def check_host() -> None:
    """Root, and the host packages installed (once, with apt) when missing."""
    if os.geteuid() != 0:
        raise RealNodeError(
            "the real node needs root (a kubelet manages cgroups, mounts and network "
            "namespaces); run as root, or without the real node"
        )
    missing = [
        package
        for tool, package in PACKAGES.items()
        if (tool == "cni" and not cni_bin_dir()) or (tool != "cni" and not shutil.which(tool))
    ]
    if missing:
        _apt_install(missing)


def cni_bin_dir() -> str | None:
    return next((d for d in CNI_BIN_DIRS if Path(d, "bridge").is_file()), None)


def _apt_install(packages: list[str]) -> None:
    if not shutil.which("apt-get"):
        raise RealNodeError(f"the real node needs {', '.join(packages)}; install them first")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RealNodeError(f"{' '.join(argv[:2])} {' '.join(packages)} failed: {last}")


def pause_archive(kubernetes_module: Path, cache: Path) -> Path:
    """The pause image built from the pinned Kubernetes' source (static, a few hundred KB),
    as an image archive; once per source."""
    source = kubernetes_module / PAUSE_SOURCE
    if not source.is_file():
        raise RealNodeError(f"pause source not found at {source}; run `berth cluster build`")
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out = cache / f"pause-{key}"
    archive = out / "pause.tar"
    if archive.is_file():
        return archive
    rootfs = out / "rootfs"
    rootfs.mkdir(parents=True, exist_ok=True)
    compiled = subprocess.run(
        ["gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-berth",
         "-o", str(rootfs / "pause"), str(source)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if compiled.returncode != 0:
        raise RealNodeError(f"building pause with gcc failed: {compiled.stderr.strip()[-300:]}")
    repository, tag = nodeconfig.PAUSE_IMAGE.rsplit(":", 1)
    run = RunConfig(user="65535:65535", entrypoint=("/pause",), cmd=(), env=(), exposed_ports=())
    architecture = architecture_of_this_machine()[0]
    write_archive(rootfs, archive, ImageName(repository, tag), 0, architecture, {}, run)
    return archive


def kubernetes_module_dir(tools_dir: Path) -> Path:
    """Where Go keeps the pinned k8s.io/kubernetes module's source."""
    done = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=tools_dir,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RealNodeError(f"cannot find the Kubernetes module: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def prepare_network(layout: NodeLayout) -> None:
    """The namespace and the API server's egress configuration (before the API server)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    netns.create(
        nodeconfig.NETNS,
        (f"{nodeconfig.NODE_ADDRESS}/32", f"{nodeconfig.SERVICE_ADDRESS}/32"),
    )
    layout.egress_config.write_text(yaml.safe_dump(nodeconfig.egress_selector(layout)))


def bridge_argv(python: str, layout: NodeLayout, apiserver_port: int) -> list[str]:
    return [
        python,
        "-m",
        "berth.localcluster.nodebridge",
        f"--netns={nodeconfig.NETNS}",
        f"--apiserver=127.0.0.1:{apiserver_port}",
        f"--listen={nodeconfig.SERVICE_ADDRESS}:{nodeconfig.SERVICE_PORT}",
        f"--egress-socket={layout.egress_socket}",
    ]


def write_node_files(layout: NodeLayout, pki: Path) -> None:
    """containerd's and the kubelet's configuration, the CNI network, the kubelet's
    client certificate and kubeconfig."""
    bin_dir = cni_bin_dir()
    if bin_dir is None:
        raise RealNodeError(
            "the CNI plugins are missing: apt-get install containernetworking-plugins"
        )
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(nodeconfig.containerd_toml(layout, bin_dir))
    (layout.cni_conf_dir / "10-berth.conflist").write_text(json.dumps(nodeconfig.cni_conflist()))
    layout.kubelet_config.write_text(
        yaml.safe_dump(nodeconfig.kubelet_configuration(layout, pki / "ca.crt"))
    )
    cert, key = issue_client_certificate(
        pki,
        layout.pki,
        "kubelet-client",
        f"system:node:{nodeconfig.NODE_NAME}",
        ("system:nodes",),
    )
    server = f"https://{nodeconfig.SERVICE_ADDRESS}:{nodeconfig.SERVICE_PORT}"
    layout.kubelet_kubeconfig.write_text(
        yaml.safe_dump(nodeconfig.kubeconfig(server, pki / "ca.crt", cert, key, "kubelet"))
    )


def containerd_argv(layout: NodeLayout) -> list[str]:
    return netns.command(nodeconfig.NETNS, ["containerd", f"--config={layout.containerd_config}"])


def wait_containerd(layout: NodeLayout, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + CONTAINERD_READY_TIMEOUT
    while time.monotonic() < deadline:
        if not alive():
            raise RealNodeError("containerd exited at start; see its log in the cluster's logs/")
        if _ctr(layout, "version", check=False).returncode == 0:
            return
        time.sleep(0.3)
    raise RealNodeError(f"containerd not ready after {CONTAINERD_READY_TIMEOUT:.0f}s")


def import_images(layout: NodeLayout, archives: Sequence[Path]) -> None:
    """Each archive into containerd's CRI namespace, where the kubelet looks."""
    for archive in archives:
        done = _ctr(layout, "images", "import", str(archive), check=False, timeout=IMPORT_TIMEOUT)
        if done.returncode != 0:
            raise RealNodeError(f"ctr images import {archive.name}: {done.stderr.strip()}")


def _ctr(
    layout: NodeLayout, *args: str, check: bool = True, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", f"--address={layout.containerd_socket}", "-n", "k8s.io", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def kill_containers(layout: NodeLayout) -> None:
    """Every container the node ran, by the cgroups the kubelet made for its pods, then
    the shims of this node's containerd: a stopped kubelet and containerd leave both."""
    for controller in ("pids", "memory", "cpu", "freezer"):
        pods = Path("/sys/fs/cgroup", controller, "kubepods")
        for procs in sorted(pods.rglob("cgroup.procs")) if pods.is_dir() else []:
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
    address = str(layout.containerd_socket)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
                os.kill(int(proc.name), signal.SIGKILL)


def unmount_under(root: Path) -> None:
    """What the kubelet and containerd mounted under the node's state (volumes, rootfs
    overlays, pod network namespaces), deepest first, so the state can be removed."""
    prefix = str(root.resolve()) + "/"
    for _ in range(3):
        mounts = [
            line.split()[1].encode().decode("unicode_escape")
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix)
        ]
        if not mounts:
            return
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
