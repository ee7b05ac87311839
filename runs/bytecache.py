"""A least-recently-used cache bounded by the bytes its values hold, not by their count: a few
entries made from files an agent wrote (a 10 MB log of empty lines) must not hold the server's
memory, however many or however large they are. Thread-safe (the dashboard's views run in threads).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteBoundedCache(Generic[V]):
    """Values up to `max_bytes` in all, as `size_of` measures each; the least recently used go
    first, and a value larger than `max_bytes / 4` is never kept (it would push out everything)."""

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]):
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V) -> None:
        size = self._size_of(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes // 4:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                _key, (_value, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
