"""The pods fingerprint topology updaters write as ``nodeTopologyPodsFingerprint``.

The podfingerprint format ``pfp0v001``: each pod's name hashed with xxhash64 seeded by
the xxhash64 of its namespace, the hashes sorted, their little-endian bytes hashed again
with xxhash64, in hex. Equal fingerprints mean the report accounts for the same pods as
the scheduler knows on the node, whatever the order.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

PREFIX = "pfp0v001"


def sign(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of (namespace, name) pairs."""
    hashes = sorted(
        xxhash.xxh64_intdigest(name.encode(), seed=xxhash.xxh64_intdigest(namespace.encode()))
        for namespace, name in pods
    )
    packed = b"".join(struct.pack("<Q", value) for value in hashes)
    return PREFIX + xxhash.xxh64_hexdigest(packed)
