"""Faust's RocksDB store, sized for a worker's memory budget and reading a raw table as it is.

**Memory** (design record 37). Faust's store opens one RocksDB database per table partition,
each with its own 2 GiB block cache and three 64 MiB write buffers (faust-streaming 0.15.3,
``faust/stores/rocksdb.py``: ``RocksDBOptions`` and its ``DEFAULT_*`` sizes): a worker's
six tables of four partitions could hold gigabytes, and nothing bounds them. This store gives
every database options sized from the worker's budget (``SCORER_MEMORY_MB``), as Kafka
Streams' bounded-memory ``RocksDBConfigSetter`` does: a quarter of the budget goes to RocksDB
(the rest is the Python process's), as ONE block cache (an LRU cache) shared by all the
worker's databases, every table and partition, with the write buffers (memtables) charged to
that same cache through one write buffer manager capped at the whole share; index and filter
blocks are kept in the cache too (those of level 0 pinned there), not beside it. Each
database gets two write buffers (the one written, one being flushed) of seven eighths of the
share divided by the number of databases the worker's tables can have (at least 32), less an
arena block, so that even every database holding a full one, no longer written, stays under
the point where the write buffer manager starts making each write flush: it makes only the
database being written flush, never an idle one. The cache and the
write buffer manager are made once per process (``shared_memory``) from the budget
``configure`` is given (or, if it never was, ``SCORER_MEMORY_MB`` read from the environment);
a later budget resizes the same two objects.

Faust-internal things this module overrides or relies on (faust-streaming 0.15.3, rocksdict
0.3.29 with RocksDB 9.8):

- ``faust.stores.rocksdb.RocksDBOptions.as_options`` (subclassed: ``BudgetOptions``) builds
  the ``rocksdict.Options`` each database is opened with; its ``open`` (kept) calls it. Faust's
  sizes (``write_buffer_size``, ``max_write_buffer_number``, ``block_cache_size``, also when
  a table passes them as options) are not used: the budget decides; its
  ``max_open_files``, ``target_file_size_base`` and ``bloom_filter_size`` are kept.
- ``Store.rocksdb_options``, the options object Faust's ``Store.__init__`` makes from the
  table's options: replaced with a ``BudgetOptions`` made from the same (``Store.options``,
  which ``__init__`` leaves without ``read_only`` and ``driver``, and ``Store.use_rocksdict``).
  With the python-rocksdb driver (not a dependency) Faust's options are used as they are.
- Faust's ``RocksDBOptions.open`` calls ``as_options`` twice and opens the database with the
  second (the first, given ``set_db_paths``, is dropped): both are built here, cheaply (the
  cache and the write buffer manager are shared, not made per call).
- ``RocksDBOptions.open`` (extended, not replaced) opens a database; each one it opens is then
  given ``uncache_aggressiveness`` through RocksDB's ``SetOptions`` (``Rdict.set_options``):
  rocksdict's ``Options`` has no setter for it. Without it the shared cache keeps the blocks of
  every file a compaction deleted until the cache is full, so a worker's memory rose for hours
  towards the cache's capacity at a steady load (issue 43; design record 37).
- The databases a worker can have are counted from ``app.tables`` (Faust's table manager)
  and each table's ``partitions`` (else ``app.conf.topic_partitions``).

**Raw tables.** Faust's stores decode every key and value they yield through the app's
serializers (``SerializedStore._items_decoded``, faust-streaming 0.15), about 4 µs an item
here even when both codecs are ``raw`` and decoding returns the bytes it was given. The
worker's tables are raw (``app.raw_table``), and a recovery reads every thread of the table to
rebuild its index: 100 000 threads cost 0.4 s of the restart in decoding alone. This store
yields what RocksDB holds when both codecs are raw, and decodes as Faust does otherwise.

Faust's store also runs a full garbage collection at every rebalance of every table, to let
go of the databases of revoked partitions (it drops them without closing them); with nothing
revoked, at a worker's first assignment, there is nothing to let go of, and six tables'
collections held a start's recovery back by up to a second or more. It runs only when a
partition of the table was revoked.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faust.stores import STORES
from faust.stores.rocksdb import RocksDBOptions, Store
from faust.types import TP, AppT, CollectionT

if TYPE_CHECKING:  # imported where used: the store module imports without rocksdict
    import rocksdict

SCHEME = "rocksdb-raw"

MIB = 1 << 20
# RocksDB's part of the budget: a quarter (the block cache, write buffers charged to it)
ROCKSDB_SHARE = 4
# each database's write buffer: seven eighths of RocksDB's part (where the write buffer manager starts
# making writes flush) over the databases the worker's tables can have, at least this many,
# less an arena block (so that all of them, each holding a full buffer and no longer
# written, stay under it: else every write to a busy one flushes its buffer), within 1 MiB
# and Faust's default
DATABASES_AT_LEAST = 32
ARENA_BLOCK = 512 * 1024  # RocksDB's arena block at these sizes, charged on top of a buffer
WRITE_BUFFER_MIN = 1 * MIB
WRITE_BUFFER_MAX = 64 * MIB  # Faust's default
# write buffers per database: the one written, and one being flushed
WRITE_BUFFERS = 2
# how hard RocksDB tries to erase a deleted file's blocks from the shared cache when the file
# goes (RocksDB >= 9.6, a mutable column family option; 0, its default, leaves them to age
# out): a few hundred erases nearly all of them (RocksDB's advanced_options.h)
UNCACHE_AGGRESSIVENESS = 300


@dataclass(frozen=True)
class MemoryBudget:
    """What a worker's memory budget (``SCORER_MEMORY_MB``) gives RocksDB, in bytes."""

    memory_mb: int

    @property
    def rocksdb_bytes(self) -> int:
        """The shared block cache's capacity: the write buffers are charged to it."""
        return self.memory_mb * MIB // ROCKSDB_SHARE

    @property
    def memtable_bytes(self) -> int:
        """The write buffer manager's cap on all the databases' write buffers together: the
        whole of RocksDB's part (charged to the cache: blocks give way to them)."""
        return self.rocksdb_bytes

    def write_buffer_bytes(self, databases: int = 0) -> int:
        """One database's write buffer (it has ``WRITE_BUFFERS``), ``databases`` the number
        of databases the worker's tables can have: every database's full buffer together
        stays under the point where the write buffer manager starts flushing (seven eighths
        of its cap), less an arena block each, so idle databases' buffers never make each
        write to a busy one flush (a flush storm, and RocksDB's level-0 stalls)."""
        flushing_at = self.memtable_bytes * 7 // 8
        each = flushing_at // max(databases, DATABASES_AT_LEAST) - ARENA_BLOCK
        return min(max(each, WRITE_BUFFER_MIN), WRITE_BUFFER_MAX)


def table_databases(app: AppT) -> int:
    """How many databases ``app``'s tables can have on one worker: one per partition (every
    table is declared before the worker starts, so before a database opens)."""
    default = app.conf.topic_partitions
    return sum(getattr(table, "partitions", None) or default for table in app.tables.values())


@dataclass
class SharedMemory:
    """The process's one block cache and write buffer manager, and the budget they are of."""

    budget: MemoryBudget
    cache: rocksdict.Cache
    write_buffers: rocksdict.WriteBufferManager  # charged to ``cache``


_configured_mb: int | None = None
_shared: SharedMemory | None = None


def configure(memory_mb: int) -> None:
    """Size the store from the worker's budget (``Settings.memory_mb``); databases opened
    from now on use it, and the shared cache and write buffer cap are resized to it."""
    global _configured_mb
    _configured_mb = memory_mb
    if _shared is not None:
        shared_memory()


def _budget_mb() -> int:
    global _configured_mb
    if _configured_mb is None:  # never configured: SCORER_MEMORY_MB (or its default), once
        from ...settings import Settings

        _configured_mb = Settings().memory_mb
    return _configured_mb


def shared_memory() -> SharedMemory:
    """The process's block cache and write buffer manager (made at the first call), sized
    for the current budget."""
    global _shared
    import rocksdict

    budget = MemoryBudget(_budget_mb())
    if _shared is None:
        cache = rocksdict.Cache(budget.rocksdb_bytes)
        # no stall: a write over the cap makes its own database flush; a stall would hold the
        # event loop until other databases' flushes free room
        manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            budget.memtable_bytes, False, cache
        )
        _shared = SharedMemory(budget, cache, manager)
    elif _shared.budget != budget:
        _shared.cache.set_capacity(budget.rocksdb_bytes)
        _shared.write_buffers.set_buffer_size(budget.memtable_bytes)
        _shared.budget = budget
    return _shared


def memory_usage() -> dict[str, int]:
    """RocksDB's memory by the shared cache's account, in bytes: ``capacity``, ``usage``
    (blocks and write buffers charged), ``pinned``, ``write_buffers`` (all the databases'
    write buffers), ``data_blocks`` and ``index_filter_blocks`` (what the cache holds of the
    files, by RocksDB's last scan of it); zeros before a database is opened."""
    if _shared is None:
        return dict.fromkeys(USAGE_KINDS, 0)
    return {
        "capacity": _shared.budget.rocksdb_bytes,
        "usage": _shared.cache.get_usage(),
        "pinned": _shared.cache.get_pinned_usage(),
        "write_buffers": _shared.write_buffers.get_usage(),
        **cache_entries(),
    }


USAGE_KINDS = ("capacity", "usage", "pinned", "write_buffers", "data_blocks", "index_filter_blocks")
_stores: weakref.WeakSet[RawRocksStore] = weakref.WeakSet()  # their ``_dbs`` (Faust's)
# one entry of RocksDB's block-cache-entry-stats: Role(count,size unit,portion%)
_ENTRY = re.compile(r"(\w+)\((\d+),([\d.]+) (\w+),")
_UNITS = {"B": 1, "KB": 1 << 10, "MB": MIB, "GB": 1 << 30}


def cache_entries() -> dict[str, int]:
    """The shared cache's data blocks and index and filter blocks, in bytes, from RocksDB's
    ``rocksdb.fast-block-cache-entry-stats`` of any open database (the cache is shared: one
    answers for all; RocksDB rescans at most once a minute, a few milliseconds)."""
    sizes = {"data_blocks": 0, "index_filter_blocks": 0}
    for db in (db for store in list(_stores) for db in list(store._dbs.values())):
        try:
            text = db.property_value("rocksdb.fast-block-cache-entry-stats") or ""
        except Exception:  # closed meanwhile: ask another
            continue
        for role, _count, size, unit in _ENTRY.findall(text):
            kind = "data_blocks" if role == "DataBlock" else "index_filter_blocks"
            if role in ("DataBlock", "FilterBlock", "FilterMetaBlock", "IndexBlock"):
                sizes[kind] += int(float(size) * _UNITS.get(unit, 1))
        break
    return sizes


class BudgetOptions(RocksDBOptions):
    """Faust's options for a database of ``app``'s, its memory from the worker's budget
    (rocksdict)."""

    def __init__(self, app: AppT | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.app = app

    def open(self, path: Path, *, read_only: bool = False) -> Any:
        """Faust's, and the database told to erase a deleted file's blocks from the cache."""
        db = super().open(path, read_only=read_only)
        if self.use_rocksdict and not read_only:
            db.set_options({"uncache_aggressiveness": str(UNCACHE_AGGRESSIVENESS)})
        return db

    def as_options(self) -> rocksdict.Options:
        if not self.use_rocksdict:  # python-rocksdb: Faust's (not a dependency of ours)
            faust_options: rocksdict.Options = super().as_options()
            return faust_options
        import rocksdict

        shared = shared_memory()
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        if self.max_open_files is not None:  # Faust's: 90 % of the process's file limit
            options.set_max_open_files(self.max_open_files)
        options.set_target_file_size_base(self.target_file_size_base)
        databases = table_databases(self.app) if self.app is not None else 0
        options.set_write_buffer_size(shared.budget.write_buffer_bytes(databases))
        options.set_max_write_buffer_number(WRITE_BUFFERS)
        options.set_write_buffer_manager(shared.write_buffers)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, True)  # Faust's filter
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        table.set_block_cache(shared.cache)
        # index and filter blocks in the shared cache (charged, evictable), not beside it
        # per open file; level 0's pinned there, and the top level of partitioned ones
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_pin_top_level_index_and_filter(True)
        options.set_block_based_table_factory(table)
        return options


class RawRocksStore(Store):
    """Faust's RocksDB store, its memory from the worker's budget, its raw tables read
    without a decode per item."""

    def __init__(self, url: Any, app: AppT, table: CollectionT, **kwargs: Any) -> None:
        super().__init__(url, app, table, **kwargs)
        # Faust's made from the table's options (``read_only`` and ``driver`` taken out)
        self.rocksdb_options = BudgetOptions(
            app, **(self.options or {}), use_rocksdict=self.use_rocksdict
        )
        _stores.add(self)

    def _raw(self) -> bool:
        return self.key_serializer == "raw" and self.value_serializer == "raw"

    def _items_decoded(self) -> Iterator[tuple[Any, Any]]:
        return self._iteritems() if self._raw() else super()._items_decoded()

    def _keys_decoded(self) -> Iterator[Any]:
        return self._iterkeys() if self._raw() else super()._keys_decoded()

    def _values_decoded(self) -> Iterator[Any]:
        return self._itervalues() if self._raw() else super()._values_decoded()

    def revoke_partitions(self, table: CollectionT, tps: set[TP]) -> None:
        """Faust's, with its garbage collection only when a database was let go of."""
        if any(tp.topic in table.changelog_topic.topics for tp in tps):
            super().revoke_partitions(table, tps)


STORES.aliases[SCHEME] = f"{__name__}:RawRocksStore"
