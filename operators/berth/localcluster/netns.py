"""The real node's network namespace: where its kubelet, its containers and their network
live, so that every address the node and its pods use exists only inside it.

The namespace's loopback holds the node's address and the ClusterIP of the ``kubernetes``
Service, and the CNI bridge its pods hang off lives in it too; nothing of it is visible in
the machine's own network. The node bridge (``berth.localcluster.nodebridge``) carries
traffic between the namespace and the API server on loopback.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from berth.localcluster.errors import ClusterError

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")


class NetnsError(ClusterError):
    """The namespace could not be made or entered; the message says why."""


def ip(*args: str) -> None:
    """One ``ip`` command, its error as one line."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def create(name: str, addresses: tuple[str, ...]) -> None:
    """The namespace with its loopback up and holding ``addresses`` (each ``A.B.C.D/32``,
    local to the namespace alone); made afresh, so one left by a crash is replaced."""
    delete(name)
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "lo", "up")
    for address in addresses:
        ip("-n", name, "addr", "add", address, "dev", "lo")


def delete(name: str) -> None:
    """Removes the namespace (its interfaces go with it) if it exists."""
    if (NETNS_DIR / name).exists():
        ip("netns", "delete", name)


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def command(name: str, argv: list[str]) -> list[str]:
    """``argv`` run inside the namespace. Not ``ip netns exec``: that mounts a sysfs of
    its own over /sys, hiding the cgroup mounts a kubelet and runc need."""
    return ["nsenter", f"--net={NETNS_DIR / name}", "--", *argv]


def enter(name: str) -> None:
    """The calling thread into the namespace, for good: sockets made by the thread belong
    to the namespace whichever thread uses them later."""
    libc = ctypes.CDLL(None, use_errno=True)
    target = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise NetnsError(f"cannot enter network namespace {name}: {_errno()}")
    finally:
        os.close(target)


def _errno() -> str:
    return os.strerror(ctypes.get_errno())
