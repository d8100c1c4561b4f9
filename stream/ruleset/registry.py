"""One small registry of named things (a pack's checks, a pack's rubric aggregators).

A decorator marks a function with what it registers; nothing global changes at import time.
The loader collects the marked functions of a pack's modules into that pack's registry, so a
pack can be loaded twice (a test's copy of it) without "registered twice" errors, and two
packs cannot see, or clash with, each other's names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)

MARK = "__scorer_registers__"


def mark(func: Callable[..., object], entry: Named) -> None:
    """Mark ``func`` as registering ``entry`` (read back by ``marked``)."""
    setattr(func, MARK, entry)


def marked(namespace: Iterable[object], kind: type[T]) -> Iterator[T]:
    """The entries of type ``kind`` marked on the objects of ``namespace``."""
    for obj in namespace:
        entry = getattr(obj, MARK, None)
        if isinstance(entry, kind):
            yield entry


class Registry(Generic[T]):
    """Entries by name; a name is registered once."""

    def __init__(self, what: str, entries: Iterable[T] = ()) -> None:
        self.what = what
        self._entries: dict[str, T] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: T) -> None:
        if entry.name in self._entries:
            raise ValueError(f"{self.what} {entry.name!r} registered twice")
        self._entries[entry.name] = entry

    def get(self, name: str) -> T | None:
        return self._entries.get(name)

    def require(self, name: str) -> T:
        """The entry ``name``; ``ValueError`` naming the registered ones when there is none."""
        entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"unknown {self.what} {name!r}; registered: {sorted(self._entries)}")
        return entry

    def names(self) -> list[str]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
