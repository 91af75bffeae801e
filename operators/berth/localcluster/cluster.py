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
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from berth.localcluster.build import Binaries, ensure_built
from berth.localcluster.kubectl import Kubectl
from berth.localcluster.nodes import node_manifests
from berth.localcluster.paths import CLUSTER_DIR

API_READY_TIMEOUT = 120.0
NODES_READY_TIMEOUT = 120.0
STOP_GRACE = 10.0
START_ATTEMPTS = 3
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

# Flags of kube-apiserver beyond those berth-apiserver adds (etcd, PKI, service accounts).
# ServiceAccount admission is off: it rejects pods in a namespace until the controller
# manager has created its default ServiceAccount, a race every per-test namespace would hit,
# and kwok's fake kubelet mounts no tokens anyway. Priority and fairness is off so that
# benchmarks measure the schedulers, not the API server's queues.
APISERVER_FLAGS = (
    "--bind-address=127.0.0.1",
    "--authorization-mode=Node,RBAC",
    "--service-cluster-ip-range=10.96.0.0/16",
    "--allow-privileged=true",
    "--disable-admission-plugins=ServiceAccount",
    "--enable-priority-and-fairness=false",
    "--max-requests-inflight=2000",
    "--max-mutating-requests-inflight=1000",
    "--event-ttl=2h",
    "--profiling=false",
    "--v=1",
)


class ClusterError(RuntimeError):
    """The local cluster could not be started; the message says why."""


class EarlyExit(ClusterError):
    """The API server exited during start-up."""


@dataclass(frozen=True)
class Process:
    name: str
    pid: int


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

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One ``up`` or ``down`` at a time, across processes."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def up(self, nodes: int = 3, say: Callable[[str], None] | None = None) -> None:
        """Start the cluster (or reuse a running one) and make sure it has ``nodes`` nodes
        (0: a control plane alone, for callers that create their own nodes)."""
        if nodes < 0:
            raise ClusterError(f"--nodes must be 0 or more, not {nodes}")
        binaries = ensure_built(say)
        with self._locked():
            self._up(binaries, nodes, say or (lambda _msg: None))

    def _up(self, binaries: Binaries, nodes: int, report: Callable[[str], None]) -> None:
        if not self.is_up():
            self._down()
            started = time.monotonic()
            self._start_retrying(binaries, report)
            report(f"control plane ready in {time.monotonic() - started:.1f}s")
        kubectl = Kubectl(str(self.kubeconfig), binaries["kubectl"])
        existing = set(kubectl("get", "nodes", "-o", "name").split())
        wanted = node_manifests(nodes)
        missing = [n for n in wanted if f"node/{n['metadata']['name']}" not in existing]
        if missing:
            kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(missing))
        if wanted:
            # The cluster's own nodes only: with none asked for there is nothing to wait
            # for, and nodes a test created are that test's business.
            kubectl(
                "wait",
                "--for=condition=Ready",
                *(f"node/{n['metadata']['name']}" for n in wanted),
                f"--timeout={int(NODES_READY_TIMEOUT)}s",
            )
            self._wait_taints_lifted(kubectl, [n["metadata"]["name"] for n in wanted])
        report(f"{nodes} kwok node(s) Ready; KUBECONFIG={self.kubeconfig}")

    def _wait_taints_lifted(self, kubectl: Kubectl, names: list[str]) -> None:
        """The controller manager taints new nodes not-ready until it sees them Ready."""
        deadline = time.monotonic() + NODES_READY_TIMEOUT
        template = "{range .items[*]}{.metadata.name}{' '}{.spec.taints[*].key}{'\\n'}{end}"
        while time.monotonic() < deadline:
            listed = kubectl("get", "nodes", "-o", f"jsonpath={template}").splitlines()
            keys = [
                key for line in listed if line.split(" ", 1)[0] in names for key in line.split()[1:]
            ]
            if not any(key in NOT_READY_TAINTS for key in keys):
                return
            time.sleep(0.5)
        raise ClusterError("nodes still tainted not-ready after they became Ready")

    def _start_retrying(self, binaries: Binaries, say: Callable[[str], None]) -> None:
        """Start, trying again when the API server dies at once.

        Its port and embedded etcd's are picked free a moment before they are bound, so
        another process can take one in between; a fresh attempt picks fresh ports.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(binaries, say)
                return
            except EarlyExit as err:
                if attempt == START_ATTEMPTS:
                    raise ClusterError(str(err)) from err
                say(f"API server exited at start ({err}); trying again")

    def _start(self, binaries: Binaries, say: Callable[[str], None]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        data = self.state_dir / "data"
        processes = [
            self._spawn(
                "apiserver",
                [
                    str(binaries["berth-apiserver"]),
                    f"--berth-data-dir={data}",
                    f"--secure-port={port}",
                    *APISERVER_FLAGS,
                ],
            )
        ]
        self._record(processes)
        try:
            self._wait_api_ready(port, processes[0])
            self._write_kubeconfig(port)
            kubeconfig = str(self.kubeconfig)
            processes.append(
                self._spawn(
                    "controller-manager",
                    [
                        str(binaries["kube-controller-manager"]),
                        f"--kubeconfig={kubeconfig}",
                        f"--authentication-kubeconfig={kubeconfig}",
                        f"--authorization-kubeconfig={kubeconfig}",
                        "--bind-address=127.0.0.1",
                        "--secure-port=0",
                        "--leader-elect=false",
                        "--use-service-account-credentials=false",
                        f"--service-account-private-key-file={self.pki / 'sa.key'}",
                        f"--root-ca-file={self.pki / 'ca.crt'}",
                        "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
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
                        "--manage-all-nodes=true",
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
        control-plane upgrade or crash looks like to every client (for fault tests)."""
        with self._locked():
            processes = self._recorded()
            apiserver = next((p for p in processes if p.name == "apiserver"), None)
            if apiserver is None:
                raise ClusterError("the local cluster is not up")
            argv = _cmdline(apiserver.pid).split()
            port = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--secure-port="))
            _stop(apiserver)
            restarted = self._spawn("apiserver", argv)
            processes = [restarted if p.name == "apiserver" else p for p in processes]
            self._record(processes)
            self._wait_api_ready(port, restarted)

    def down(self) -> None:
        """Stop every process of the cluster and wipe its data (the PKI stays)."""
        with self._locked():
            self._down()

    def _down(self) -> None:
        # Clients first: an API server with open watches drains them before it exits.
        for proc in reversed(self._recorded()):
            _stop(proc)
        self._pidfile.unlink(missing_ok=True)
        etcd = self.state_dir / "data" / "etcd"
        shutil.rmtree(etcd, ignore_errors=True)

    def is_up(self) -> bool:
        """True when every recorded process is alive and the API answers /readyz."""
        recorded = self._recorded()
        if {p.name for p in recorded} != {"apiserver", "controller-manager", "kwok"}:
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
        return Process(name, child.pid)

    def _record(self, processes: list[Process]) -> None:
        self._pidfile.write_text(json.dumps([p.__dict__ for p in processes]))

    def _recorded(self) -> list[Process]:
        try:
            return [Process(**p) for p in json.loads(self._pidfile.read_text())]
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
}


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
