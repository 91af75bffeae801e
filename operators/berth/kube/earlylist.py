"""The list of every pod asked for as ``berth run`` starts, read while its modules import.

A scheduler's start is its imports (about 0.7 s of Python) and then the list of every pod
(at 1000 nodes and 12,000 pods about 1.4 s, most of it the API server encoding JSON), one
after the other: the server sat idle during the imports, the imports could not begin
before the process did. Here the list is asked for before the imports, from a thread that
only reads the pages as they come (its socket reads release the interpreter), and the
pods informer takes the pages from it rather than asking again.

Only what is sure is used: the connection is made from the same configuration the client
will use (the in-cluster service account, or a kubeconfig's current context with a
certificate or a token); anything else (an exec plugin, a proxy, several kubeconfig
files) and nothing is asked early. The informer takes the pages only from the server its
own client names, follows the continue tokens itself and stops taking them at the first
that differs; pages nobody takes within CLAIM_SECONDS (a standby waiting for its lease)
are dropped.

Nothing here imports the Kubernetes client or aiohttp: it runs before they are imported.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import http.client
import os
import re
import ssl
import tempfile
import threading
import time
import urllib.parse
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PODS_PATH = "/api/v1/pods"
# Every informer's page (berth.kube.watch), here so that it is known before the client is
# imported. Large: each page of a list costs the API server a round of its own (with
# 50,000 pods, the raw list took 6.1-6.7 s in pages of 500, 3.7-4.1 s in pages of 5000,
# 4.4-5.4 s in pages of 2000), and a page's body is a few tens of MB at most.
LIST_PAGE = 5000
CLAIM_SECONDS = 30.0
READ_TIMEOUT_SECONDS = 60.0
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
# The list's metadata comes before its items; a page's continue token is read from there
# without parsing the page (the informer parses it, and checks the token).
_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


@dataclass(frozen=True)
class Endpoint:
    """Where and how the client will connect, when that is sure."""

    server: str  # https://host:port, no trailing slash
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    cert_data: bytes | None = None  # PEM: certificate then key
    token: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=self.ca_file, cadata=None if self.ca_data is None else self.ca_data.decode()
        )
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_data is not None:
            with tempfile.NamedTemporaryFile(suffix=".pem") as pem:
                pem.write(self.cert_data)
                pem.flush()
                context.load_cert_chain(pem.name)
        return context


def endpoint(kubeconfig: str | None, environ: dict[str, str]) -> Endpoint | None:
    """The endpoint ``berth.kube.client.load_configuration(kubeconfig)`` will use, or None
    when reading it here could differ from what the client reads."""
    if any(environ.get(name) for name in PROXY_VARIABLES):
        return None
    if kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster(environ)
    path = kubeconfig or environ.get("KUBECONFIG") or "~/.kube/config"
    if os.pathsep in path:
        return None  # several files merged: the client's merge decides
    try:
        return _from_kubeconfig(Path(os.path.expanduser(path)))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError):
        return None


def _in_cluster(environ: dict[str, str]) -> Endpoint | None:
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ.get("KUBERNETES_SERVICE_PORT")
    token, ca = SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt"
    if not port or not token.is_file() or not ca.is_file():
        return None
    host = f"[{host}]" if ":" in host else host
    return Endpoint(f"https://{host}:{port}", ca_file=str(ca), token=token.read_text().strip())


def _named(entries: Any, name: str, key: str) -> dict[str, Any]:
    for entry in entries or ():
        if entry.get("name") == name:
            value: dict[str, Any] = entry.get(key) or {}
            return value
    raise KeyError(name)


def _from_kubeconfig(path: Path) -> Endpoint | None:
    config = yaml.safe_load(path.read_text())
    context = _named(config.get("contexts"), config["current-context"], "context")
    cluster = _named(config.get("clusters"), context["cluster"], "cluster")
    user = _named(config.get("users"), context["user"], "user")
    unsure = {"exec", "auth-provider", "username", "password", "as", "as-groups", "tokenFile"}
    if unsure & user.keys() or "proxy-url" in cluster or "tls-server-name" in cluster:
        return None
    server = str(cluster["server"]).rstrip("/")
    if not server.startswith("https://"):
        return None

    def read(field: str) -> bytes | None:
        """A file's bytes given inline (``<field>-data``) or by path, relative to the
        kubeconfig's folder as kubectl reads it."""
        source = cluster if field == "certificate-authority" else user
        if f"{field}-data" in source:
            return base64.b64decode(str(source[f"{field}-data"]))
        if field in source:
            return (path.parent / os.path.expanduser(str(source[field]))).read_bytes()
        return None

    cert, key = read("client-certificate"), read("client-key")
    token = user.get("token")
    if (cert is None) != (key is None) or (cert is None and not token):
        return None
    return Endpoint(
        server,
        ca_data=read("certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_data=None if cert is None or key is None else cert + b"\n" + key,
        token=token,
    )


class EarlyList:
    """The pages of one list of every pod, read in a thread, each handed out once to the
    informer that asks for it by its continue token.

    The reader keeps at most AHEAD pages not yet taken (up to about 18 MB each): more than
    the imports' time lets the server make, and a large cluster's list is not held whole
    beside its parse. It asks for them compressed, as the client does: inflating costs
    less than reading four to seven times the bytes through TLS."""

    AHEAD = 4

    def __init__(self, where: Endpoint) -> None:
        self.server = where.server
        self._where = where
        self._lock = threading.Lock()
        # continue token -> (page, the token the reader went on with), or None: not read.
        self._pages: dict[str, concurrent.futures.Future[tuple[bytes, str] | None]] = {}
        self._done = False
        self._room = threading.Semaphore(self.AHEAD)
        self._deadline = time.monotonic() + CLAIM_SECONDS
        self._claimed = threading.Event()
        self._thread = threading.Thread(target=self._read_all, name="early-list", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _read_all(self) -> None:
        token = ""
        try:
            connection = self._connect()
            try:
                while self._wait_for_room():
                    page = self._read(connection, token)
                    if page is None or self._done:
                        break
                    following = _continue_of(page)
                    with self._lock:
                        future = self._pages.setdefault(token, concurrent.futures.Future())
                    # Answered None meanwhile only if the informer let the reader go.
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        future.set_result((page, following))
                    if not following:
                        break
                    token = following
            finally:
                connection.close()
        except (OSError, http.client.HTTPException, ssl.SSLError, ValueError, zlib.error):
            pass
        finally:
            self._stop()
        if not self._claimed.wait(max(0.0, self._deadline - time.monotonic())):
            self.close()

    def _wait_for_room(self) -> bool:
        """Until a page is taken when AHEAD wait; False once unclaimed past the deadline."""
        while not self._room.acquire(timeout=0.5):
            if self._done or (not self._claimed.is_set() and time.monotonic() > self._deadline):
                return False
        return not self._done

    def _connect(self) -> http.client.HTTPSConnection:
        url = urllib.parse.urlsplit(self._where.server)
        if url.hostname is None:
            raise ValueError("no host")
        return http.client.HTTPSConnection(
            url.hostname,
            url.port or 443,
            timeout=READ_TIMEOUT_SECONDS,
            context=self._where.context(),
        )

    def _read(self, connection: http.client.HTTPSConnection, token: str) -> bytes | None:
        query = {"limit": str(LIST_PAGE)}
        if token:
            query["continue"] = token
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        if self._where.token:
            headers["Authorization"] = f"Bearer {self._where.token}"
        connection.request("GET", f"{PODS_PATH}?{urllib.parse.urlencode(query)}", headers=headers)
        response = connection.getresponse()
        body: bytes = response.read()
        if response.status != 200:
            return None
        if response.getheader("Content-Encoding") == "gzip":
            body = zlib.decompress(body, wbits=zlib.MAX_WBITS | 16)
        return body

    def _stop(self) -> None:
        """No more pages: every page asked for and not read answers None (the informer
        then asks the server itself)."""
        with self._lock:
            self._done = True
            waiting = list(self._pages.values())
        for future in waiting:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_result(None)

    def page(self, token: str) -> concurrent.futures.Future[tuple[bytes, str] | None]:
        """The page for ``token`` with the token the reader went on with, once read; None
        when the reader stopped before it."""
        self._claimed.set()
        with self._lock:
            future = self._pages.setdefault(token, concurrent.futures.Future())
            if self._done and not future.done():
                future.set_result(None)
        future.add_done_callback(lambda _: self._taken(token))
        return future

    def _taken(self, token: str) -> None:
        with self._lock:
            self._pages.pop(token, None)
        self._room.release()

    def close(self) -> None:
        """Read no more; drop what was read and not taken."""
        self._claimed.set()
        with self._lock:
            self._done = True
            self._pages.clear()


def _continue_of(page: bytes) -> str:
    items = page.find(b'"items"')
    match = _CONTINUE.search(page, 0, items if items >= 0 else len(page))
    return match.group(1).decode() if match else ""


_early: EarlyList | None = None


def start(argv: Sequence[str], environ: dict[str, str] | None = None) -> None:
    """For ``berth run`` with its scheduler: ask for every pod now, in a thread."""
    global _early
    if argv[:1] != ["run"] or "--no-scheduler" in argv:
        return
    where = endpoint(_flag(argv, "--kubeconfig"), dict(os.environ if environ is None else environ))
    if where is None:
        return
    _early = EarlyList(where)
    _early.start()


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def claim(server: str) -> EarlyList | None:
    """The early list, once, to the pods informer of a client of ``server``; None when
    there is none or it was read from another server."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    if early.server != server.rstrip("/"):
        early.close()
        return None
    return early
