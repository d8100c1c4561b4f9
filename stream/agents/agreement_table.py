"""The agreement join's table as its agent reads and writes it: the keys it holds indexed by
when each next has something to expire (``JoinIndex``), seen through some of its keys
(``_Keys``), and writes held back until an event's pairs are on the broker (``Staged``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, MutableMapping

import orjson

from ..agreement.join import deadline
from ..agreement.score_index import is_index_key
from ..kafka.mends.partitioning import key_hash


class _Keys(MutableMapping[bytes, bytes]):
    """A table seen through some of its keys (what ``AgreementJoin`` reads and writes):
    writes and deletes go to the table and are told to ``JoinIndex``."""

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        keys: Iterable[bytes] | None,
        wrote: Callable[[bytes, bytes], object],
        dropped: Callable[[bytes], object],
    ) -> None:
        self.table = table
        self.keys_ = None if keys is None else set(keys)
        self.wrote = wrote
        self.dropped = dropped

    def __getitem__(self, key: bytes) -> bytes:
        if self.keys_ is not None and key not in self.keys_:
            raise KeyError(key)
        return self.table[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.table[key] = value
        self.wrote(key, value)

    def __delitem__(self, key: bytes) -> None:
        del self.table[key]
        self.dropped(key)

    def __iter__(self) -> Iterator[bytes]:
        keys = self.table.keys() if self.keys_ is None else self.keys_
        return (key for key in list(keys) if key in self.table)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Staged(MutableMapping[bytes, bytes]):
    """A store whose writes wait for ``flush``: reads see them at once."""

    def __init__(self, store: MutableMapping[bytes, bytes]) -> None:
        self.store = store
        self.pending: dict[bytes, bytes | None] = {}

    def __getitem__(self, key: bytes) -> bytes:
        if key in self.pending:
            value = self.pending[key]
            if value is None:
                raise KeyError(key)
            return value
        return self.store[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.pending[key] = value

    def __delitem__(self, key: bytes) -> None:
        self[key]
        self.pending[key] = None

    def __iter__(self) -> Iterator[bytes]:
        stored = [k for k in self.store if k not in self.pending]
        return iter([*stored, *(k for k, v in self.pending.items() if v is not None)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def flush(self) -> None:
        for key, value in self.pending.items():
            if value is None:
                self.store.pop(key, None)
            else:
                self.store[key] = value
        self.pending.clear()


class JoinIndex:
    """When each key of the join table next has something to expire, per partition, so a
    clock tick reads only the keys of its partition that are due (not every key of the
    table each minute). A key's partition is where Kafka's partitioner put its target id
    (``join.state_key``: [target, rule, criterion]), the key of the internal topic; rebuilt
    from the table after each recovery."""

    def __init__(self, partitions: int, retention_s: float) -> None:
        self.partitions = partitions
        self.retention_s = retention_s
        self.due: defaultdict[int, dict[bytes, float]] = defaultdict(dict)

    def partition_of(self, key: bytes) -> int | None:
        if is_index_key(key):
            return None  # the score index's: kept by ``ScoreIndex``
        try:
            target = str(orjson.loads(key)[0])
        except (orjson.JSONDecodeError, IndexError, TypeError, KeyError):
            return None  # not the join's: left alone
        return key_hash(target.encode()) % self.partitions

    def _deadline(self, value: bytes) -> float | None:
        try:
            return deadline(orjson.loads(value), self.retention_s)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None

    def rebuild(self, items: Iterable[tuple[bytes, bytes]], owned: set[int]) -> int:
        """The index of the ``owned`` partitions from the table's ``items``; how many keys."""
        self.due.clear()
        count = 0
        for key, value in items:
            partition = self.partition_of(key)
            if partition not in owned or (due := self._deadline(value)) is None:
                continue
            self.due[partition][key] = due
            count += 1
        return count

    def writing(
        self, table: MutableMapping[bytes, bytes], partition: int
    ) -> MutableMapping[bytes, bytes]:
        """``table`` as a join writes it while an event of ``partition`` is applied."""
        keys = self.due[partition]
        return _Keys(table, None, self._noting(keys), lambda key: keys.pop(key, None))

    def stale(
        self, table: MutableMapping[bytes, bytes], partition: int, now: float
    ) -> MutableMapping[bytes, bytes]:
        """The keys of ``partition`` with something expired by ``now``: what expiry reads."""
        keys = self.due[partition]
        old = [key for key, due in keys.items() if due <= now]
        return _Keys(table, old, self._noting(keys), lambda key: keys.pop(key, None))

    def _noting(self, keys: dict[bytes, float]) -> Callable[[bytes, bytes], None]:
        """What a write tells the index: when the key next has something to expire."""

        def wrote(key: bytes, value: bytes) -> None:
            if (due := self._deadline(value)) is not None:
                keys[key] = due

        return wrote

    def size(self) -> int:
        return sum(len(keys) for keys in self.due.values())
