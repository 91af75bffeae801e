"""An index over one kind's watch events, read as a Kopf index is read (pure).

Each object contributes values under keys, as its index function says; a key's values
are those of every object contributing under it. An update replaces the object's previous
contributions, a deletion removes them. Kopf keeps such indices too, but until it has seen
every object once it holds one readiness flag per object and wakes every waiting object on
each new one: quadratic in the objects at startup, minutes for 5000 nodes. The operators
index pods and nodes here instead, from informers that say once when they have listed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["Index", "IndexFunction"]

K = TypeVar("K")
V = TypeVar("V")

IndexFunction = Callable[[Mapping[str, Any]], Mapping[K, V]]
"""What one object contributes: its values by key; pure, and empty for an object that
contributes nothing."""

_NOTHING: Any = object()


def _object_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class Index(Mapping[K, Collection[V]]):
    """Key -> the values the objects contribute under it, kept from watch events.

    A key's collection is a live view, as a Kopf index's store is: read it before the
    next await.
    """

    def __init__(self, function: IndexFunction[K, V]) -> None:
        self.function = function
        self._by_key: dict[K, dict[str, V]] = {}
        self._by_object: dict[str, Mapping[K, V]] = {}

    def observe(self, kind: str, body: Mapping[str, Any]) -> set[K]:
        """Take one watch event (ADDED, MODIFIED or DELETED); the keys whose values it
        changed, so that a consumer decides again only what an event made different."""
        new = {} if kind == "DELETED" else self.function(body)
        obj = _object_key(body)
        old = self._by_object.pop(obj, {})
        if new:
            self._by_object[obj] = new
        changed: set[K] = set()
        for key in old:
            if key not in new:
                values = self._by_key[key]
                del values[obj]
                if not values:
                    del self._by_key[key]
                changed.add(key)
        for key, value in new.items():
            if old.get(key, _NOTHING) != value:
                self._by_key.setdefault(key, {})[obj] = value
                changed.add(key)
        return changed

    def get(self, key: K, default: Any = ()) -> Collection[V]:
        values = self._by_key.get(key)
        return default if values is None else values.values()

    def __getitem__(self, key: K) -> Collection[V]:
        return self._by_key[key].values()

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[K]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)
