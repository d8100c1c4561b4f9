"""Where the tables are kept: the default store, one worker per data directory, and the
memory store's snapshot (written at a clean stop, read once at the next start)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import faust
import pytest
from faust.types import TP
from prometheus_client import CollectorRegistry

from stream.app import create_app
from stream.errors import ConfigError
from stream.kafka.data_dir import lock_data_dir
from stream.kafka.mends.faust_state import put_in_partition
from stream.kafka.mends.snapshot_store import SnapshotStore, encode_snapshot, write_snapshots
from stream.metrics import ScorerMetrics
from stream.settings import Settings
from stream.worker import store_line


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SCORER_"):
            monkeypatch.delenv(name)


def test_the_default_store_is_rocksdb_where_rocksdict_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rocksdict  # noqa: F401 - a dependency: it imports here

    assert Settings().store == "rocksdb"
    assert store_line(Settings(data_dir=Path("d"))) == (
        "tables kept in RocksDB under d (the default: rocksdict imports)"
    )
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # import rocksdict raises ImportError
    assert Settings().store == "memory"
    assert "(the default: rocksdict does not import)" in store_line(Settings())
    monkeypatch.setenv("SCORER_STORE", "rocksdb")  # an explicit choice wins
    assert Settings().store == "rocksdb"
    assert store_line(Settings()).endswith("(SCORER_STORE)")


def test_a_second_worker_on_one_data_directory_fails_saying_so(tmp_path: Path) -> None:
    lock_data_dir(tmp_path / "data")
    with pytest.raises(ConfigError) as refused:
        lock_data_dir(tmp_path / "data")
    assert refused.value.problems == [
        f"SCORER_DATA_DIR: {tmp_path / 'data'} is in use by another worker "
        f"(pid {os.getpid()}): give each worker process its own SCORER_DATA_DIR"
    ]
    lock_data_dir(tmp_path / "other")


def memory_app(tmp_path: Path) -> faust.App:
    settings = Settings(data_dir=tmp_path / "data", store="memory")
    app, _ = create_app(settings, "127.0.0.1:1", ScorerMetrics(CollectorRegistry()))
    Path(app.conf.tabledir).mkdir(parents=True, exist_ok=True)
    return app


def changelog(app: faust.App, partition: int) -> TP:
    return TP(f"{app.conf.id}-threads-changelog", partition)


def test_a_snapshot_is_read_once_and_recovery_replays_only_what_follows(tmp_path: Path) -> None:
    app = memory_app(tmp_path)
    table = app.Table("threads", partitions=4, key_type=bytes, value_type=bytes)
    store = table.data
    assert isinstance(store, SnapshotStore)
    for n in range(6):  # written with no event in scope, as the timers write
        put_in_partition(table, n % 2, f"k{n}".encode(), f"v{n}".encode())
        store.set_persisted_offset(changelog(app, n % 2), 10 + n)  # each write answered
    del store[b"k5"]
    store.set_persisted_offset(changelog(app, 1), 16)
    write_snapshots(app)
    path = store.snapshot_path
    assert path.exists()

    restarted = memory_app(tmp_path).Table("threads", partitions=4)
    loaded = restarted.data
    assert dict(loaded.items()) == {f"k{n}".encode(): f"v{n}".encode() for n in range(5)}
    assert not path.exists()  # read once: a crash from here on replays the changelog
    # Faust's recovery seeks each partition to its persisted offset: the snapshot's
    assert loaded.persisted_offset(changelog(app, 0)) == 14
    assert loaded.persisted_offset(changelog(app, 1)) == 16
    assert loaded.persisted_offset(changelog(app, 2)) is None  # not in it: replayed whole
    # what follows the snapshot is replayed over it: a key set again, one deleted
    tail = [
        SimpleNamespace(
            key=b"k0", value=b"v0'", message=SimpleNamespace(partition=0, offset=15, value=b"v0'")
        ),
        SimpleNamespace(
            key=b"k1", value=None, message=SimpleNamespace(partition=1, offset=17, value=None)
        ),
    ]
    loaded.apply_changelog_batch(tail, to_key=lambda k: k, to_value=lambda v: v)
    assert loaded[b"k0"] == b"v0'" and b"k1" not in loaded
    assert (
        memory_app(tmp_path).Table("threads", partitions=4).data.persisted_offset(changelog(app, 0))
        is None
    )  # a second start finds no snapshot


async def test_recovery_drops_partitions_not_owned_and_forgets_the_snapshot(
    tmp_path: Path,
) -> None:
    app = memory_app(tmp_path)
    path = Path(app.conf.tabledir) / "threads.memory-snapshot"
    path.write_bytes(encode_snapshot("threads", {0: 4, 1: 7}, [(0, b"a", b"1"), (1, b"b", b"2")]))
    store = app.Table("threads", partitions=4).data
    await store.on_recovery_completed({changelog(app, 0)}, set())
    assert dict(store.items()) == {b"a": b"1"}
    assert store.persisted_offset(changelog(app, 0)) is None  # later rebalances: as Faust's


def test_no_snapshot_of_a_table_whose_changelog_writes_were_not_all_answered(
    tmp_path: Path,
) -> None:
    app = memory_app(tmp_path)
    table = app.Table("threads", partitions=4)
    put_in_partition(table, 0, b"a", b"1")
    put_in_partition(table, 0, b"b", b"2")
    table.data.set_persisted_offset(changelog(app, 0), 3)  # one of the two answered
    write_snapshots(app)
    assert not table.data.snapshot_path.exists()


@pytest.mark.parametrize("cut", [1, 20, -5])
def test_a_damaged_snapshot_is_not_used(tmp_path: Path, cut: int) -> None:
    app = memory_app(tmp_path)
    path = Path(app.conf.tabledir) / "threads.memory-snapshot"
    whole = encode_snapshot("threads", {0: 4}, [(0, b"a", b"1"), (0, b"b", b"22")])
    path.write_bytes(whole[:cut])
    store = app.Table("threads", partitions=4).data
    assert dict(store.items()) == {}
    assert store.persisted_offset(changelog(app, 0)) is None


def test_rocksdb_reads_a_raw_table_without_decoding_each_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path / "data", store="rocksdb")
    app, _ = create_app(settings, "127.0.0.1:1", ScorerMetrics(CollectorRegistry()))
    Path(app.conf.tabledir).mkdir(parents=True, exist_ok=True)
    table = app.Table("threads", partitions=4, key_type=bytes, value_type=bytes)
    for n in range(4):
        put_in_partition(table, n, f"k{n}".encode(), f"v{n}".encode())

    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded")

    topic = table.changelog_topic_name
    owned = {TP(topic, n) for n in range(4)}  # the worker's assignment
    monkeypatch.setattr(app.assignor, "assigned_actives", lambda: owned)
    monkeypatch.setattr(app.serializers, "loads_key", no_decoding)
    monkeypatch.setattr(app.serializers, "loads_value", no_decoding)
    expected = {f"k{n}".encode(): f"v{n}".encode() for n in range(4)}
    assert dict(table.items()) == expected
    assert set(table.keys()) == set(expected) and set(table.values()) == set(expected.values())


def test_rocksdb_collects_garbage_only_when_a_database_is_let_go_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path / "data", store="rocksdb")
    app, _ = create_app(settings, "127.0.0.1:1", ScorerMetrics(CollectorRegistry()))
    table = app.Table("threads", partitions=4, key_type=bytes, value_type=bytes)
    collections = []
    monkeypatch.setattr("faust.stores.rocksdb.gc.collect", lambda: collections.append(1))
    table.data.revoke_partitions(table, {TP("another-topic", 0)})  # a first assignment's
    assert collections == []
    table.data.revoke_partitions(table, {TP(table.changelog_topic_name, 0)})
    assert collections == [1]
