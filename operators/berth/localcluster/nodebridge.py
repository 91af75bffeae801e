"""The bridge between the real node's network namespace and the API server on loopback.

Two directions, one process running in the machine's own namespace:

- into the API server: a listener on the ``kubernetes`` Service's ClusterIP inside the
  node's namespace (where the kubelet and every pod look for the API server) relays each
  connection to the API server's loopback address, as kube-proxy would route it;
- out of the API server: an HTTP CONNECT proxy on a Unix socket that the API server's
  egress selector (``cluster``) dials for webhooks, the service proxy and the kubelet, whose
  connections are opened inside the node's namespace, where the pods' addresses live.

Only bytes are relayed: TLS stays end to end. Run as
``python -m berth.localcluster.nodebridge --netns NAME --apiserver 127.0.0.1:PORT
--listen IP:PORT --egress-socket PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from berth.localcluster import netns

CHUNK = 64 * 1024
CONNECT_TIMEOUT = 10.0
HEADER_LIMIT = 8 * 1024


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class Bridge:
    """The two relays; sockets for the node's side are made in a thread that stays in the
    node's namespace for the process's life."""

    def __init__(self, name: str, apiserver: tuple[str, int]) -> None:
        self.name = name
        self.apiserver = apiserver
        self._inside = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="netns", initializer=netns.enter, initargs=(name,)
        )

    async def listen_inside(self, address: tuple[str, int]) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        sock = await loop.run_in_executor(self._inside, _listening_socket, address)
        return await asyncio.start_server(self._to_apiserver, sock=sock)

    async def _to_apiserver(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            upstream = await asyncio.wait_for(
                asyncio.open_connection(*self.apiserver), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        await _splice((reader, writer), upstream)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One HTTP CONNECT from the API server: the target dialled inside the namespace."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        request = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(request) < 2 or request[0] != "CONNECT":
            await _answer(writer, b"405 Method Not Allowed")
            return
        loop = asyncio.get_running_loop()
        try:
            target = _address(request[1])
            sock = await loop.run_in_executor(self._inside, _client_socket)
            await asyncio.wait_for(loop.sock_connect(sock, target), CONNECT_TIMEOUT)
            upstream = await asyncio.open_connection(sock=sock)
        except (OSError, TimeoutError, ValueError) as err:
            await _answer(writer, f"502 Bad Gateway ({err})".encode())
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _splice((reader, writer), upstream)

    async def serve_egress(self, path: Path) -> asyncio.Server:
        return await asyncio.start_unix_server(self._connect, path=str(path), limit=HEADER_LIMIT)


def _listening_socket(address: tuple[str, int]) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(256)
    sock.setblocking(False)
    return sock


def _client_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


async def _answer(writer: asyncio.StreamWriter, status: bytes) -> None:
    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copies both ways until either side closes, then closes both."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(CHUNK):
                writer.write(chunk)
                await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    try:
        await asyncio.gather(pump(a[0], b[1]), pump(b[0], a[1]))
    finally:
        for writer in (a[1], b[1]):
            writer.close()


async def _main(args: argparse.Namespace) -> None:
    bridge = Bridge(args.netns, _address(args.apiserver))
    egress = Path(args.egress_socket)
    servers = [
        await bridge.listen_inside(_address(args.listen)),
        await bridge.serve_egress(egress),
    ]
    sys.stdout.write(
        f"node bridge: {args.listen} in {args.netns} -> {args.apiserver}; CONNECT on {egress}\n"
    )
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m berth.localcluster.nodebridge")
    parser.add_argument("--netns", required=True)
    parser.add_argument("--apiserver", required=True, help="HOST:PORT on loopback")
    parser.add_argument("--listen", required=True, help="IP:PORT inside the namespace")
    parser.add_argument("--egress-socket", required=True)
    args = parser.parse_args(argv)
    Path(args.egress_socket).unlink(missing_ok=True)  # left by a bridge that was killed
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
