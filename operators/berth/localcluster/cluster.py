"""The local cluster: kube-apiserver with embedded etcd, kube-controller-manager and kwok.

``up`` starts the processes detached (each in its own session, logs in ``logs/``), records
their pids and returns when the API is ready and every node is Ready; ``down`` stops them
and wipes the cluster's data, keeping only the PKI so an exported kubeconfig stays valid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from berth.localcluster import netns, nodeconfig, realnode
from berth.localcluster.build import Binaries, ensure_built
from berth.localcluster.errors import ClusterError
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.nodeconfig import NodeLayout
from berth.localcluster.nodes import KWOK_ANNOTATION, node_manifests
from berth.localcluster.paths import CACHE_DIR, CLUSTER_DIR, TOOLS_DIR

API_READY_TIMEOUT = 120.0
NODES_READY_BASE = 120.0
NODES_READY_PER_NODE = 0.05
"""The bound on nodes becoming Ready: two minutes, and 50 ms more a node (kwok marks a
thousand in well under a minute on two cores; the margin is for a loaded machine)."""
REAL_NODE_READY_TIMEOUT = 180.0
KUBELET_STARTS = 10
KUBELET_SETTLE = 5.0
"""A kubelet still running this long after its start got past its runtime's checks."""
STOP_GRACE = 10.0
START_ATTEMPTS = 3
CREATE_BATCH = 500
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
NODE_FACTS = (
    "{range .items[*]}{.metadata.name}{' '}"
    "{.status.conditions[?(@.type=='Ready')].status}{' '}{.spec.taints[*].key}{'\\n'}{end}"
)
"""One line a node: its name, its Ready status and its taints' keys."""
BASE_PROCESSES = frozenset({"apiserver", "controller-manager", "kwok"})

# Flags of kube-apiserver beyond those berth-apiserver adds (etcd, PKI, service accounts).
# ServiceAccount admission is on, as in any cluster: pods get projected service-account
# tokens (the real node's pods use them). Services resolve to their endpoints, not to
# ClusterIPs (there is no kube-proxy). Priority and fairness is off so that benchmarks
# measure the schedulers, not the API server's queues. kube-scheduler 1.36's gangs are
# served (the PodGroup of scheduling.k8s.io/v1alpha2 and the pod field
# spec.schedulingGroup), as on a cluster that enables them.
WORKLOAD_GATES = "--feature-gates=GenericWorkload=true,GangScheduling=true"
APISERVER_FLAGS = (
    "--bind-address=127.0.0.1",
    "--authorization-mode=Node,RBAC",
    "--service-cluster-ip-range=10.96.0.0/16",
    "--allow-privileged=true",
    "--enable-aggregator-routing=true",
    "--enable-priority-and-fairness=false",
    "--max-requests-inflight=2000",
    "--max-mutating-requests-inflight=1000",
    "--event-ttl=2h",
    "--profiling=false",
    WORKLOAD_GATES,
    "--runtime-config=scheduling.k8s.io/v1alpha2=true",
    "--v=1",
)


class EarlyExit(ClusterError):
    """The API server exited during start-up."""


@dataclass(frozen=True)
class Process:
    name: str
    pid: int
    argv: tuple[str, ...] = ()
    """As started: a process started in the node's namespace has exec'd past the
    ``nsenter`` its command line began with."""


class LocalCluster:
    """One local cluster, living in a state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @classmethod
    def default(cls) -> LocalCluster:
        return cls(CLUSTER_DIR)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user in system:masters)."""
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "data" / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def _pidfile(self) -> Path:
        return self.state_dir / "processes.json"

    @property
    def node(self) -> NodeLayout:
        """The real node's state."""
        return NodeLayout(self.state_dir / "node")

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One ``up`` or ``down`` at a time, across processes."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def up(
        self,
        nodes: int = 3,
        say: Callable[[str], None] | None = None,
        *,
        real_node: bool = False,
    ) -> None:
        """Start the cluster (or reuse a running one) and make sure it has ``nodes`` nodes
        (0: a control plane alone, for callers that create their own nodes).

        ``real_node`` readies the network the real node needs (its namespace, the node
        bridge, the API server's egress through it); ``start_real_node`` then starts it.
        """
        if nodes < 0:
            raise ClusterError(f"--nodes must be 0 or more, not {nodes}")
        if real_node:
            realnode.check_host()
        binaries = ensure_built(say)
        with self._locked():
            self._up(binaries, nodes, say or (lambda _msg: None), real_node)

    def _up(
        self, binaries: Binaries, nodes: int, report: Callable[[str], None], real_node: bool
    ) -> None:
        if not self.is_up(real_node=real_node):
            self._down()
            started = time.monotonic()
            self._start_retrying(binaries, report, real_node)
            report(f"control plane ready in {time.monotonic() - started:.1f}s")
        kubectl = Kubectl(str(self.kubeconfig), binaries["kubectl"])
        existing = set(kubectl("get", "nodes", "-o", "name").split())
        wanted = node_manifests(nodes)
        missing = [n for n in wanted if f"node/{n['metadata']['name']}" not in existing]
        started = time.monotonic()
        if missing:
            report(f"creating {len(missing)} kwok node(s)")
            for start in range(0, len(missing), CREATE_BATCH):
                batch = missing[start : start + CREATE_BATCH]
                kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(batch))
                report(f"  {start + len(batch)} of {len(missing)} created")
        # The cluster's own nodes only: with none asked for there is nothing to wait for,
        # and nodes a test created are that test's business.
        wait_nodes_ready(
            lambda: kubectl("get", "nodes", "--chunk-size=1000", "-o", f"jsonpath={NODE_FACTS}"),
            {n["metadata"]["name"] for n in wanted},
            report,
        )
        took = time.monotonic() - started
        report(f"{nodes} kwok node(s) Ready in {took:.1f}s; KUBECONFIG={self.kubeconfig}")

    def _start_retrying(
        self, binaries: Binaries, say: Callable[[str], None], real_node: bool
    ) -> None:
        """Start, trying again when the API server dies at once.

        Its port and embedded etcd's are picked free a moment before they are bound, so
        another process can take one in between; a fresh attempt picks fresh ports.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(binaries, say, real_node)
                return
            except EarlyExit as err:
                if attempt == START_ATTEMPTS:
                    raise ClusterError(str(err)) from err
                say(f"API server exited at start ({err}); trying again")

    def _start(self, binaries: Binaries, say: Callable[[str], None], real_node: bool) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        data = self.state_dir / "data"
        processes: list[Process] = []
        flags = [
            f"--kubelet-client-certificate={self.pki / 'admin.crt'}",
            f"--kubelet-client-key={self.pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]
        if real_node:
            realnode.prepare_network(self.node)
            flags.append(f"--egress-selector-config-file={self.node.egress_config}")
            argv = realnode.bridge_argv(sys.executable, self.node, port)
            processes.append(self._spawn("node-bridge", argv))
        processes.append(
            self._spawn(
                "apiserver",
                [
                    str(binaries["berth-apiserver"]),
                    f"--berth-data-dir={data}",
                    f"--secure-port={port}",
                    *APISERVER_FLAGS,
                    *flags,
                ],
            )
        )
        self._record(processes)
        try:
            self._wait_api_ready(port, processes[-1])
            self._write_kubeconfig(port)
            kubeconfig = str(self.kubeconfig)
            processes.append(
                self._spawn(
                    "controller-manager",
                    [
                        str(binaries["kube-controller-manager"]),
                        *_component_kubeconfig(kubeconfig),
                        "--bind-address=127.0.0.1",
                        "--secure-port=0",
                        "--leader-elect=false",
                        "--use-service-account-credentials=false",
                        f"--service-account-private-key-file={self.pki / 'sa.key'}",
                        f"--root-ca-file={self.pki / 'ca.crt'}",
                        "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                        WORKLOAD_GATES,  # its controller lets a deleted PodGroup go
                        "--kube-api-qps=200",
                        "--kube-api-burst=400",
                        # kwok renews every node's lease from one process; on a loaded
                        # 2-core machine with a thousand nodes it falls behind, and with the
                        # default grace (50 s) nodes would flap NotReady and be tainted.
                        # Nothing here needs a node to go NotReady by silence: tests that
                        # lose a node delete it.
                        "--node-monitor-grace-period=180s",
                        "--v=1",
                    ],
                )
            )
            self._record(processes)
            stages = self.state_dir / "kwok-stages.yaml"
            stages.write_text(
                subprocess.run(
                    [str(binaries["kwok-stages"])], check=True, capture_output=True, text=True
                ).stdout
            )
            processes.append(
                self._spawn(
                    "kwok",
                    [
                        str(binaries["kwok"]),
                        f"--kubeconfig={kubeconfig}",
                        f"--config={stages}",
                        # The nodes the cluster and the tests make; the real node is its
                        # kubelet's.
                        "--manage-all-nodes=false",
                        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}",
                        "--cidr=10.244.0.1/16",
                        "--node-ip=10.0.0.1",
                        "--node-lease-duration-seconds=40",
                    ],
                )
            )
            self._record(processes)
        except Exception:
            self._down()
            raise
        say(f"apiserver on https://127.0.0.1:{port}, logs in {self.logs}")

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port and data: what a
        control-plane upgrade or crash looks like to every client (for fault tests).

        The controller manager stops first and starts again once the new server is ready,
        as in a cluster: there it holds a leader lease, so an outage longer than its renew
        deadline (10 s) ends it, and started again it waits for the server's health. Left
        running here (without leader election), it asked the new server for discovery in
        the second before readiness when no custom resource group is listed yet, and
        finished namespaces being deleted without their custom resources."""
        with self._locked():
            self._restart(("apiserver", "controller-manager"))

    def restart_node_runtime(self) -> None:
        """Stop the real node's kubelet and containerd and start them again, leaving its
        containers running: what a node's runtime upgrade or crash looks like to its pods
        (for fault tests). Returns once containerd answers and the node is Ready again."""
        with self._locked():
            processes = self._recorded()
            kubelet, containerd = (
                next(p for p in processes if p.name == name) for name in ("kubelet", "containerd")
            )
            for proc in (kubelet, containerd):
                _stop(proc)
            restarted = self._spawn("containerd", containerd.argv)
            realnode.wait_containerd(self.node, lambda: not _exited(restarted.pid))
            started = self._start_kubelet(kubelet.argv)
            by_name = {"containerd": restarted, "kubelet": started}
            self._record([by_name.get(p.name, p) for p in processes])

    def _start_kubelet(self, argv: Sequence[str]) -> Process:
        """The kubelet, started again while it exits at once: it refuses a containerd whose
        CRI service is still initialising (which ``ctr version`` does not show)."""
        for _ in range(KUBELET_STARTS):
            kubelet = self._spawn("kubelet", argv)
            deadline = time.monotonic() + KUBELET_SETTLE
            while time.monotonic() < deadline and not _exited(kubelet.pid):
                time.sleep(0.2)
            if not _exited(kubelet.pid):
                return kubelet
            _reap(kubelet.pid)
        raise ClusterError(f"the kubelet exits at start: {self._tail('kubelet')}")

    def _restart(self, names: Sequence[str]) -> None:
        """Stops the named processes (in reverse order: clients first) and starts them again
        with the same command lines (in order, those after the API server once it is ready),
        recording each as it starts."""
        processes = self._recorded()
        chosen = [next((p for p in processes if p.name == n), None) for n in names]
        if any(p is None or not p.argv for p in chosen):
            raise ClusterError(f"not running here, or started by an older berth: {names}")
        for proc in reversed(chosen):
            assert proc is not None
            _stop(proc)
        for proc in chosen:
            assert proc is not None
            started = self._spawn(proc.name, proc.argv)
            processes = [started if p.name == proc.name else p for p in processes]
            self._record(processes)
            if started.name == "apiserver":
                self._wait_api_ready(_secure_port(started.argv), started)

    def start_real_node(
        self, images: Sequence[Path], say: Callable[[str], None] | None = None
    ) -> str:
        """The real node (containerd, the kubelet) and kube-scheduler for the pods of the
        default scheduler, with ``images`` (archives) loaded; returns the node's name once
        it is Ready. The cluster must be up with ``real_node=True``."""
        report = say or (lambda _msg: None)
        binaries = ensure_built(say)
        with self._locked():
            names = {p.name for p in self._recorded()}
            if "node-bridge" not in names:
                raise ClusterError(
                    "the cluster was started without the real node's network: "
                    "berth cluster down, then berth cluster up --real-node"
                )
            if "kubelet" not in names:
                self._start_real_node(binaries, images, report)
        return nodeconfig.NODE_NAME

    def _start_real_node(
        self, binaries: Binaries, images: Sequence[Path], report: Callable[[str], None]
    ) -> None:
        started = time.monotonic()
        layout = self.node
        realnode.write_node_files(layout, self.pki)
        pause = realnode.pause_archive(
            realnode.kubernetes_module_dir(TOOLS_DIR), CACHE_DIR / "images"
        )
        processes = self._recorded()
        containerd = self._spawn("containerd", realnode.containerd_argv(layout))
        processes.append(containerd)
        self._record(processes)
        try:
            realnode.wait_containerd(layout, lambda: not _exited(containerd.pid))
            realnode.import_images(layout, [pause, *images])
            report(f"containerd ready with {1 + len(images)} image(s) loaded")
            kubelet = self._start_kubelet(
                netns.command(
                    nodeconfig.NETNS, nodeconfig.kubelet_argv(binaries["kubelet"], layout)
                )
            )
            processes.append(kubelet)
            kubeconfig = str(self.kubeconfig)
            processes.append(
                self._spawn(
                    "scheduler",
                    [
                        str(binaries["kube-scheduler"]),
                        *_component_kubeconfig(kubeconfig),
                        "--leader-elect=false",
                        "--secure-port=0",
                        WORKLOAD_GATES,
                        "--v=1",
                    ],
                )
            )
            self._record(processes)
            kubectl = Kubectl(kubeconfig, binaries["kubectl"])
            wait_nodes_ready(
                lambda: kubectl("get", "nodes", "-o", f"jsonpath={NODE_FACTS}"),
                {nodeconfig.NODE_NAME},
                report,
                timeout=REAL_NODE_READY_TIMEOUT,
                alive=lambda: not _exited(kubelet.pid),
            )
        except Exception:
            self._stop_real_node()
            raise
        report(f"real node {nodeconfig.NODE_NAME} Ready in {time.monotonic() - started:.1f}s")

    def stop_real_node(self) -> None:
        """Stop the real node's kubelet, containers and containerd, and remove its Node."""
        with self._locked():
            self._stop_real_node()
            with contextlib.suppress(Exception):
                Kubectl(str(self.kubeconfig))(
                    "delete", "node", nodeconfig.NODE_NAME, "--ignore-not-found", "--wait=false"
                )

    def _stop_real_node(self) -> None:
        # The namespace and the pods' cgroups have machine-wide names: only the cluster
        # that made the node (its state holds the node's folder) tears them down.
        if not self.node.root.exists():
            return
        recorded = self._recorded()
        node_parts = [p for p in recorded if p.name in ("scheduler", "kubelet", "containerd")]
        for proc in node_parts:
            _stop(proc)
        realnode.kill_containers(self.node)
        realnode.unmount_under(self.node.root)
        self._record([p for p in recorded if p not in node_parts])

    def down(self) -> None:
        """Stop every process of the cluster and wipe its data (the PKI stays)."""
        with self._locked():
            self._down()

    def _down(self) -> None:
        self._stop_real_node()
        # Clients first: an API server with open watches drains them before it exits.
        for proc in reversed(self._recorded()):
            _stop(proc)
        self._pidfile.unlink(missing_ok=True)
        if self.node.root.exists():
            netns.delete(nodeconfig.NETNS)
            shutil.rmtree(self.node.root, ignore_errors=True)
        etcd = self.state_dir / "data" / "etcd"
        shutil.rmtree(etcd, ignore_errors=True)

    def is_up(self, *, real_node: bool = False) -> bool:
        """True when every recorded process is alive and the API answers /readyz (with
        the real node's network when ``real_node``)."""
        recorded = self._recorded()
        names = {p.name for p in recorded}
        if not names >= BASE_PROCESSES or (real_node and "node-bridge" not in names):
            return False
        if not all(_alive(p) for p in recorded):
            return False
        try:
            server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        except (OSError, KeyError, IndexError, TypeError):
            return False
        return self._ready(server)

    def env(self, binaries: Binaries) -> str:
        """Shell exports that point kubectl at this cluster."""
        return f'export KUBECONFIG={self.kubeconfig}\nexport PATH={binaries.directory}:"$PATH"\n'

    # -- helpers ---------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> Process:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        with log:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.state_dir,
            )
        return Process(name, child.pid, tuple(argv))

    def _record(self, processes: list[Process]) -> None:
        self._pidfile.write_text(json.dumps([p.__dict__ for p in processes]))

    def _recorded(self) -> list[Process]:
        try:
            return [
                Process(p["name"], p["pid"], tuple(p.get("argv", ())))
                for p in json.loads(self._pidfile.read_text())
            ]
        except (OSError, ValueError, TypeError):
            return []

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def _ready(self, server: str) -> bool:
        try:
            with urllib.request.urlopen(
                f"{server}/readyz", context=self._ssl_context(), timeout=5
            ) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def _wait_api_ready(self, port: int, apiserver: Process) -> None:
        deadline = time.monotonic() + API_READY_TIMEOUT
        server = f"https://127.0.0.1:{port}"
        while time.monotonic() < deadline:
            if not _alive(apiserver):
                time.sleep(0.5)  # let its last words reach the log
                raise EarlyExit(f"kube-apiserver exited during start-up: {self._tail('apiserver')}")
            if (self.pki / "admin.crt").exists() and self._ready(server):
                return
            time.sleep(0.3)
        raise ClusterError(
            f"kube-apiserver not ready after {API_READY_TIMEOUT:.0f}s: {self._tail('apiserver')}"
        )

    def _tail(self, name: str) -> str:
        try:
            lines = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-5:])

    def _write_kubeconfig(self, port: int) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "berth-local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority": str(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "berth-admin",
                    "user": {
                        "client-certificate": str(self.pki / "admin.crt"),
                        "client-key": str(self.pki / "admin.key"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "berth-local",
                    "context": {"cluster": "berth-local", "user": "berth-admin"},
                }
            ],
            "current-context": "berth-local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)


def _component_kubeconfig(kubeconfig: str) -> tuple[str, ...]:
    """A control-plane component's client, authentication and authorization kubeconfig."""
    return (
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    )


def _secure_port(argv: Sequence[str]) -> int:
    """The API server's port, from its command line."""
    return next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--secure-port="))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


_BINARY_OF = {
    "apiserver": "berth-apiserver",
    "controller-manager": "kube-controller-manager",
    "kwok": "kwok",
    "node-bridge": "berth.localcluster.nodebridge",
    "containerd": "containerd",
    "kubelet": "kubelet",
    "scheduler": "kube-scheduler",
}


def wait_nodes_ready(
    list_nodes: Callable[[], str],
    names: set[str],
    report: Callable[[str], None],
    *,
    timeout: float | None = None,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Until every node of ``names`` is Ready and rid of the not-ready taints the
    controller manager puts on new nodes: one list a poll (never a wait per node),
    progress every ten seconds, and a bound that grows with the number of nodes."""
    if not names:
        return
    bound = timeout or NODES_READY_BASE + NODES_READY_PER_NODE * len(names)
    started = time.monotonic()
    last_said = started
    poll = min(5.0, max(0.5, len(names) / 2000))
    ready = 0
    while True:
        ready = count_ready(list_nodes(), names)
        if ready == len(names):
            return
        now = time.monotonic()
        if not alive():
            raise ClusterError(f"the node's process exited before it was Ready ({ready} Ready)")
        if now - started > bound:
            raise ClusterError(
                f"only {ready} of {len(names)} node(s) Ready after {bound:.0f}s; "
                "see the logs in the cluster's logs/ folder"
            )
        if now - last_said >= 10.0:
            last_said = now
            report(f"  {ready} of {len(names)} node(s) Ready after {now - started:.0f}s")
        time.sleep(poll)


def count_ready(listed: str, names: set[str]) -> int:
    """How many of ``names`` are Ready without a not-ready taint, from NODE_FACTS lines."""
    ready = 0
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0] not in names:
            continue
        if fields[1] == "True" and not any(key in NOT_READY_TAINTS for key in fields[2:]):
            ready += 1
    return ready


def _alive(proc: Process) -> bool:
    """Alive and still the program we started (pids get reused)."""
    return not _exited(proc.pid) and _BINARY_OF[proc.name] in _cmdline(proc.pid)


def _exited(pid: int) -> bool:
    """Gone or a zombie. Not judged by the command line: an exiting process loses it
    before it has finished exiting."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return True
    return state in "ZX"


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child, so no zombie lingers."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stop(proc: Process) -> None:
    _stop_alive(proc)
    _reap(proc.pid)


def _stop_alive(proc: Process) -> None:
    """Signal the process's group once it is known to be ours, then wait for its exit."""
    if not _alive(proc):
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and not _exited(proc.pid):
        time.sleep(0.1)
    if not _exited(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and not _exited(proc.pid):
            time.sleep(0.05)
