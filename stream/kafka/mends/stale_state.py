"""Tables under the data directory that another broker's changelogs wrote (design record 38).

Faust keeps, for each table partition, the offset of the last changelog record its local
state holds: the RocksDB store in each partition's database (``__faust\\0offset__``), our
memory store in its snapshot's header (``snapshot_store.py``). Its recovery seeks each
changelog partition there and reads on. A data directory kept across a change of cluster (a
reset cluster, another one, changelog topics deleted and re-created, another
``SCORER_APP_ID``: the tables' files do not name the app) holds offsets the new changelogs
never reached. Faust's recovery refuses one past the last offset of its partition
(``ConsistencyError``, faust/tables/recovery.py ``_restart_recovery``, when both numbers are
non-zero) in a logged traceback, the consumer thread's stop adds another, and the worker
exits 1.

Before the worker starts (no table has opened its local state yet), this module reads those
offsets and asks the broker for each changelog partition's end offset (a partition or topic
the broker does not have ends at 0). A partition held up to an offset at or past its end
holds records this broker never had, so the whole directory is from another broker: the
worker stops with one line naming it (``SCORER_STALE_STATE=fail``, the default), or, with
``rebuild``, discards the local state of every table of the app and lets Faust's recovery
rebuild each from its changelog. The embedded broker under-reports end offsets (design
record 03): a partition that looks stale is asked again by a fetch at its end, whose high
watermark is right, before it counts.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from faust.types import TP, AppT

from ...errors import ConfigError
from ..io import options
from ..security import KafkaSecurity
from . import rocksdb_store, snapshot_store
from .tansu import fetched_highwaters

log = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 15.0  # for the end offsets; past it the check is skipped (Faust still checks)


@dataclass(frozen=True)
class Held:
    """A table partition's local state, held up to ``offset`` of its changelog partition."""

    table: str
    tp: TP
    offset: int


@dataclass
class LocalTables:
    """The app's tables as kept under the data directory: every file or database of theirs,
    and how far each partition that says so goes."""

    held: list[Held] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)  # the tables with a file there

    def add(self, table: str, path: Path) -> None:
        self.paths.append(path)
        self.tables.add(table)


def local_tables(app: AppT) -> LocalTables:
    """What the app's store keeps of its tables in its table directory (Faust's names: the
    RocksDB store's ``<table>-<partition>.db``, the memory store's ``<table>.memory-snapshot``);
    the other store's files are not read, as Faust does not read them."""
    found = LocalTables()
    tabledir = Path(app.conf.tabledir)
    scheme = app.conf.store.scheme
    if not tabledir.is_dir():
        return found
    for table in app.tables.values():
        topic = table.changelog_topic.get_topic_name()
        if scheme == snapshot_store.SCHEME:
            path = tabledir / f"{table.name}{snapshot_store.SUFFIX}"
            offsets = snapshot_store.snapshot_offsets(path, table.name)
            if path.exists():
                found.add(table.name, path)
            for partition, held in sorted((offsets or {}).items()):
                found.held.append(Held(table.name, TP(topic, partition), held))
        elif scheme == rocksdb_store.SCHEME:
            name = re.compile(rf"{re.escape(table.name)}-(\d+)\.db")
            for path in sorted(tabledir.iterdir()):
                if (match := name.fullmatch(path.name)) is None:
                    continue
                found.add(table.name, path)
                if (persisted := persisted_offset(path)) is not None:
                    found.held.append(Held(table.name, TP(topic, int(match[1])), persisted))
    return found


def persisted_offset(path: Path) -> int | None:
    """The changelog offset a partition's RocksDB database holds up to (None: none recorded,
    or the database does not open read-only: Faust's recovery then meets it as it is)."""
    import rocksdict

    try:
        db = rocksdict.Rdict(
            str(path),
            options=rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:  # rocksdict raises Exception itself
        log.warning("%s not read (%s): its persisted offset is not checked", path, exc)
        return None
    try:
        value = db.get(rocksdb_store.RawRocksStore.offset_key)
    finally:
        db.close()
    return int(value) if isinstance(value, bytes) else None


async def changelog_ends(
    bootstrap: str, security: KafkaSecurity | None, tps: Iterable[TP]
) -> dict[TP, int]:
    """Each changelog partition's end offset (the next record's); 0 for one the broker does
    not have. A partition whose reported end is at or below what the data directory holds is
    asked again by a fetch (the embedded broker reports a batch's base offset + 1)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **options(security)
    )
    await consumer.start()
    try:
        existing = await consumer.topics()  # every topic's metadata: none is created
        ends: dict[TP, int] = {}
        asked = []
        for tp in set(tps):
            partitions = consumer.partitions_for_topic(tp.topic) if tp.topic in existing else None
            if tp.partition in (partitions or ()):
                asked.append(TopicPartition(tp.topic, tp.partition))
            else:
                ends[tp] = 0
        if asked:  # only partitions that exist: aiokafka waits for ever for one that does not
            answered = await consumer.end_offsets(asked)
            ends.update({TP(tp.topic, tp.partition): end for tp, end in answered.items()})
    finally:
        await consumer.stop()
    return ends


def stale(held: list[Held], ends: dict[TP, int]) -> list[tuple[Held, int]]:
    """The partitions held up to an offset the broker's changelog never reached, with its end."""
    return [(h, ends[h.tp]) for h in held if h.tp in ends and h.offset >= ends[h.tp]]


async def find_stale(
    held: list[Held], bootstrap: str, security: KafkaSecurity | None
) -> list[tuple[Held, int]]:
    """``stale`` against the broker, each suspect confirmed by a fetch at its end (one the
    fetch did not answer leaves the check inconclusive: ``TimeoutError``, the start goes on
    with Faust's own check, rather than a stale verdict from a short end offset)."""
    ends = await changelog_ends(bootstrap, security, (h.tp for h in held))
    suspects = {h.tp: end for h, end in stale(held, ends)}
    if suspects:
        unanswered: set[TP] = set()
        fetched = await fetched_highwaters(
            bootstrap, suspects, auth=options(security), unanswered=unanswered
        )
        if unanswered:
            raise TimeoutError(f"no fetch answered for {len(unanswered)} changelog partitions")
        ends.update(fetched)
    return stale(held, ends)


def settle_stale_state(
    app: AppT,
    bootstrap: str,
    security: KafkaSecurity | None,
    policy: Literal["fail", "rebuild"],
    data_dir_setting: str = "SCORER_DATA_DIR",
    setting: str = "SCORER_STALE_STATE",
) -> None:
    """Before the worker starts: tables of its data directory from another broker stop the
    start (``ConfigError``, one line) or, with ``policy`` rebuild, are discarded. Nothing to
    check (no offset held) asks nothing of the broker. Runs with no event loop running."""
    tables = local_tables(app)
    if not tables.held:
        return
    data_dir = Path(app.conf.datadir)
    try:
        found = asyncio.run(
            asyncio.wait_for(find_stale(tables.held, bootstrap, security), BROKER_TIMEOUT_S)
        )
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning(
            "the tables under %s were not checked against the changelogs on %s (%s: %s)",
            data_dir,
            bootstrap,
            type(exc).__name__,
            exc,
        )
        return
    if not found:
        return
    (first, end), more = min(found, key=lambda f: f[0].tp), len(found) - 1
    what = (
        f"table {first.table} holds {first.tp.topic} partition {first.tp.partition} up to "
        f"offset {first.offset}, but on {bootstrap} that partition ends at offset {end}"
        + (f" ({more} more partition{'s' if more > 1 else ''} alike)" if more else "")
    )
    if policy == "fail":
        raise ConfigError(
            [
                f"{data_dir_setting}: {data_dir} holds tables from "
                f"another Kafka cluster, or from before the changelog topics were re-created: "
                f"{what}; remove {data_dir} to start afresh, or set {setting}=rebuild to "
                "discard its tables and rebuild them from the changelogs"
            ]
        )
    for path in tables.paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    log.warning(
        "%s held tables from another Kafka cluster (%s): discarded the local state of tables "
        "%s (%d files; %s=rebuild); recovery rebuilds them from their changelogs",
        data_dir,
        what,
        ", ".join(sorted(tables.tables)),
        len(tables.paths),
        setting,
    )
