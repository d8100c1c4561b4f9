"""The RocksDB store's memory, from the worker's budget (``SCORER_MEMORY_MB``, design record
37): one block cache for every database of every table, the write buffers charged to it and
sized for a worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import faust
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from stream.app import create_app
from stream.config_errors import config_error
from stream.kafka.mends import rocksdb_store
from stream.kafka.mends.faust_state import put_in_partition
from stream.kafka.mends.rocksdb_store import (
    MIB,
    MemoryBudget,
    memory_usage,
    shared_memory,
    table_databases,
)
from stream.metrics import ScorerMetrics
from stream.settings import Settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the machine, and no budget from an earlier test (the shared
    cache itself is the process's: a test's budget resizes it)."""
    for name in list(os.environ):
        if name.upper().startswith("SCORER_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(rocksdb_store, "_configured_mb", None)


def rocksdb_app(tmp_path: Path) -> faust.App:
    settings = Settings(data_dir=tmp_path / "data", store="rocksdb")
    app, _ = create_app(settings, "127.0.0.1:1", ScorerMetrics(CollectorRegistry()))
    Path(app.conf.tabledir).mkdir(parents=True, exist_ok=True)
    return app


def database(app: faust.App, name: str, partition: int) -> Any:
    """The database of ``name``'s ``partition``, opened as the worker's table opens it."""
    table = app.tables.get(name)
    if table is None:
        table = app.Table(name, partitions=4, key_type=bytes, value_type=bytes)
    put_in_partition(table, partition, b"key", b"value")
    return table.data._db_for_partition(partition)


def options_file(db: Any) -> dict[str, str]:
    """The options RocksDB wrote in the database's directory (its latest OPTIONS file)."""
    path = Path(db.path())
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    pairs = (line.strip().split("=", 1) for line in latest.read_text().splitlines())
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def test_the_budget_gives_rocksdb_a_quarter_and_the_write_buffers_fit_under_its_flushing() -> None:
    default = MemoryBudget(Settings().memory_mb)
    assert default.memory_mb == 512
    assert (default.rocksdb_bytes, default.memtable_bytes) == (128 * MIB, 128 * MIB)
    # a database's write buffer: all the databases' full ones (an arena block more each) stay
    # under seven eighths of the manager's cap, where it starts making each write flush
    assert default.write_buffer_bytes(24) == 3 * MIB  # (32 at least): 112 / 32 - 0.5
    assert default.write_buffer_bytes(64) == int(1.25 * MIB)  # 112 / 64 - 0.5
    assert default.write_buffer_bytes(1000) == 1 * MIB  # at least
    for databases in (8, 21, 32, 49, 64, 74):  # past 74 the 1 MiB floor: raise the budget
        each = default.write_buffer_bytes(databases) + 512 * 1024
        assert databases * each <= default.memtable_bytes * 7 // 8
    assert MemoryBudget(256).write_buffer_bytes(24) == int(1.25 * MIB)
    assert MemoryBudget(2048).write_buffer_bytes(24) == int(13.5 * MIB)
    assert MemoryBudget(16384).write_buffer_bytes(24) == 64 * MIB  # Faust's default at most


def test_a_tables_database_uses_the_shared_cache_and_sized_write_buffers(
    tmp_path: Path,
) -> None:
    rocksdb_store.configure(512)
    db = database(rocksdb_app(tmp_path), "threads", 0)

    # Faust's default: a cache of 2 GiB for this database alone
    assert db.property_int_value("rocksdb.block-cache-capacity") == 128 * MIB
    written = options_file(db)
    assert written["write_buffer_size"] == str(3 * MIB)
    assert written["max_write_buffer_number"] == "2"
    assert written["cache_index_and_filter_blocks"] == "true"
    assert written["pin_l0_filter_and_index_blocks_in_cache"] == "true"
    assert written["filter_policy"] == "bloomfilter"  # Faust's, kept

    for n in range(2000):  # the write buffers are charged to the shared cache
        db.put(b"k%d" % n, os.urandom(1000))
    usage = memory_usage()
    assert usage["capacity"] == 128 * MIB
    assert usage["write_buffers"] >= 2 * MIB
    assert usage["usage"] >= usage["write_buffers"]
    assert db.property_int_value("rocksdb.block-cache-usage") == shared_memory().cache.get_usage()


def test_every_database_of_every_table_shares_one_cache(tmp_path: Path) -> None:
    rocksdb_store.configure(512)
    app = rocksdb_app(tmp_path)
    dbs = [database(app, name, n) for name in ("threads", "verdicts") for n in (0, 3)]
    cache = shared_memory().cache

    rocksdb_store.configure(1024)  # resizes the one cache: every database sees it
    assert shared_memory().cache is cache
    assert {db.property_int_value("rocksdb.block-cache-capacity") for db in dbs} == {256 * MIB}
    assert shared_memory().write_buffers.get_buffer_size() == 256 * MIB
    before = cache.get_usage()
    for n in range(2000):  # a write to one database shows in the usage every database reports
        dbs[3].put(b"k%d" % n, os.urandom(1000))
    assert {db.property_int_value("rocksdb.block-cache-usage") for db in dbs} == {cache.get_usage()}
    assert cache.get_usage() > before


def test_the_write_buffers_shrink_with_the_databases_the_tables_can_have(tmp_path: Path) -> None:
    rocksdb_store.configure(512)
    app = rocksdb_app(tmp_path)
    app.Table("verdicts", partitions=60, key_type=bytes, value_type=bytes)
    app.Table("threads", partitions=4, key_type=bytes, value_type=bytes)
    assert table_databases(app) == 64
    assert options_file(database(app, "threads", 0))["write_buffer_size"] == str(int(1.25 * MIB))


def test_an_unconfigured_store_reads_the_budget_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_MEMORY_MB", "2048")
    db = database(rocksdb_app(tmp_path), "threads", 1)
    assert db.property_int_value("rocksdb.block-cache-capacity") == 512 * MIB
    assert options_file(db)["write_buffer_size"] == str(int(13.5 * MIB))


def test_the_budget_setting_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().memory_mb == 512
    monkeypatch.setenv("SCORER_MEMORY_MB", "1024")
    assert Settings().memory_mb == 1024
    for wrong in ("255", "0", "half a gig"):
        monkeypatch.setenv("SCORER_MEMORY_MB", wrong)
        with pytest.raises(ValidationError) as refused:
            Settings()
        error = config_error(refused.value)
        assert error is not None and len(error.problems) == 1
        assert error.problems[0].startswith("SCORER_MEMORY_MB: ")


def test_a_compaction_takes_its_deleted_files_blocks_out_of_the_shared_cache(
    tmp_path: Path,
) -> None:
    """RocksDB keeps a deleted file's blocks in the cache until they age out unless the
    database's ``uncache_aggressiveness`` says otherwise; rocksdict's ``Options`` cannot set it,
    so the store sets it when it opens a database: with it, what the cache holds of the files
    falls with the files a compaction deletes (without it, here, it stayed at ~25 MiB)."""
    rocksdb_store.configure(512)
    db = database(rocksdb_app(tmp_path), "threads", 2)
    assert options_file(db)["uncache_aggressiveness"] == "300"
    # no compaction but the one below (RocksDB would start its own among the writes, and
    # drop blocks while they are read)
    db.set_options({"disable_auto_compactions": "true"})
    for _ in range(3):  # three rounds of the same keys
        for n in range(20_000):
            db.put(b"k%d" % n, os.urandom(1000))
        db.flush()
    for n in range(20_000):  # their blocks read into the cache
        db.get(b"k%d" % n)

    def blocks() -> int:  # the cache's account less the write buffers charged to it
        usage = memory_usage()
        return usage["usage"] - usage["write_buffers"]

    read = blocks()
    assert read > 15 * MIB

    db.compact_range(None, None)  # one new file; the three deleted

    assert blocks() < read // 4
    entries = rocksdb_store.cache_entries()  # what memory_usage reports of the cache's blocks
    assert set(entries) == {"data_blocks", "index_filter_blocks"}
    assert entries["data_blocks"] < read // 4
