"""Consume score events into your own store: here SQLite, one row per score_id.

    python examples/consume_scores.py --db scores.sqlite

The broker is --bootstrap, else KAFKA_BOOTSTRAP_SERVERS, else the embedded broker that your
`scorer worker` or `scorer demo --keep-running` runs (its address is recorded while it runs;
with several running, it asks which on a terminal, and stops naming them otherwise).

Delivery is at-least-once, and a redelivered score carries the same deterministic score_id,
so an upsert on score_id makes duplicates harmless. Offsets are committed only after the rows
are committed: a crash re-reads, never skips. Needs aiokafka and the scorer's package (for
the cluster's TLS / SASL settings, read from the same KAFKA_* environment as the worker:
KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD,
KAFKA_SSL_CAFILE...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys

from aiokafka import AIOKafkaConsumer

from stream.errors import ConfigError
from stream.kafka.broker import EMBEDDED_PORT, broker_in_use
from stream.kafka.security import KafkaSecurity

FIELDS = (
    "score_id", "rule_id", "pack", "criterion", "target_id", "project_name", "status", "value",
    "label", "reason", "created_at",
)  # fmt: skip
SCHEMA = """
create table if not exists scores (
    score_id text primary key, rule_id text, pack text, criterion text, target_id text,
    project_name text, status text, value real, label text, reason text, created_at text,
    event text
)"""
UPSERT = """
insert into scores values (
    :score_id, :rule_id, :pack, :criterion, :target_id, :project_name, :status, :value,
    :label, :reason, :created_at, :event
) on conflict (score_id) do update set status = excluded.status, value = excluded.value,
    label = excluded.label, reason = excluded.reason, event = excluded.event"""


async def consume(bootstrap: str, topic: str, group: str, db: str, idle_s: float | None) -> int:
    store = sqlite3.connect(db)
    store.execute(SCHEMA)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **KafkaSecurity().client_options(),
    )
    await consumer.start()
    stored = 0
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=1000 if idle_s else 10_000)
            if not batch and idle_s is not None:
                idle_s -= 1
                if idle_s <= 0:  # --idle: stop after that long without a message
                    return stored
                continue
            for records in batch.values():
                for record in records:
                    event = json.loads(record.value)  # optional fields may be absent
                    row = {name: event.get(name) for name in FIELDS}
                    store.execute(UPSERT, {**row, "event": record.value.decode()})
                    stored += 1
            store.commit()  # rows first, then offsets: at-least-once into the store
            await consumer.commit()
    finally:
        await consumer.stop()
        store.close()


def ask_which(candidates: list[str]) -> str:
    """On a terminal: the running embedded broker the user picks."""
    for number, bootstrap in enumerate(candidates, 1):
        print(f"  {number}. {bootstrap}")
    while True:
        answer = input(f"which embedded broker (1-{len(candidates)})? ").strip()
        if answer.isdigit() and 1 <= int(answer) <= len(candidates):
            return candidates[int(answer) - 1]


def default_bootstrap() -> str:
    """KAFKA_BOOTSTRAP_SERVERS, else the one running embedded broker (asked which of several
    on a terminal), else Kafka's own port here."""
    ask = ask_which if sys.stdin.isatty() else None
    try:
        found = broker_in_use(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), KafkaSecurity(), ask)
    except ConfigError as exc:  # several brokers and no one to ask: do not guess
        sys.exit(f"error: {exc}")
    return found[0] if found else f"127.0.0.1:{EMBEDDED_PORT}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bootstrap",
        help="host:port (default: KAFKA_BOOTSTRAP_SERVERS, else the running embedded broker)",
    )
    parser.add_argument("--topic", default="scores")
    parser.add_argument("--group", default="scores-to-sqlite")
    parser.add_argument("--db", default="scores.sqlite")
    parser.add_argument("--idle", type=float, default=None, help="stop after N idle seconds")
    args = parser.parse_args()
    bootstrap = args.bootstrap or default_bootstrap()
    stored = asyncio.run(consume(bootstrap, args.topic, args.group, args.db, args.idle))
    print(f"stored {stored} score events in {args.db}")


if __name__ == "__main__":
    main()
