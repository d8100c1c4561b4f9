"""The Faust app the competent baselines run on (``faust_competent.py``, (a''), and
``faust_same_job.py``, (a''')): as ``stream/app.py`` builds the scorer's, run with
``SCORER_BROKER_KIND=tansu``: the mended transport for the embedded broker (``tansu://``, the
transport's mends and the broker's fixes), Faust's monitor without its per-record
bookkeeping, the cached partitioner, acks from every replica, a commit every second. The
session and heartbeat are the naive baseline's (``faust_forward.py``); batches and linger the
scorer's defaults (``BENCH_BATCH_MAX``, ``BENCH_BATCH_WITHIN_MS``, ``BENCH_LINGER_MS``)."""

from __future__ import annotations

import os

import faust

from stream.kafka.mends import tansu  # registers tansu://: the mended transport
from stream.kafka.mends.monitor import QuietMonitor
from stream.kafka.mends.partitioning import cached_murmur2_partitioner

BATCH_MAX = int(os.environ.get("BENCH_BATCH_MAX", "64"))
BATCH_WITHIN_S = float(os.environ.get("BENCH_BATCH_WITHIN_MS", "5")) / 1000
LINGER_S = float(os.environ.get("BENCH_LINGER_MS", "5")) / 1000


def collector_as_asked() -> None:
    """With ``BENCH_SCORER_GC`` set, the garbage collector as the scorer's worker sets it
    (``settle_collector``: what was imported frozen, the youngest generation collected every
    20,000 new objects); else Python's defaults, as a user's worker has them."""
    if os.environ.get("BENCH_SCORER_GC"):
        from stream.cli.commands import settle_collector

        settle_collector()


def competent_app(default_datadir: str) -> faust.App:
    """The app of ``BENCH_APP_ID`` on ``KAFKA_BOOTSTRAP_SERVERS``, its data in
    ``BENCH_DATA_DIR`` (else ``default_datadir``)."""
    return faust.App(
        os.environ["BENCH_APP_ID"],
        broker=f"{tansu.SCHEME}://{os.environ['KAFKA_BOOTSTRAP_SERVERS']}",
        store="memory://",
        Monitor=QuietMonitor,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=LINGER_S,
        producer_partitioner=cached_murmur2_partitioner,
        broker_session_timeout=6,
        broker_heartbeat_interval=2,
        broker_commit_interval=1.0,
        datadir=os.environ.get("BENCH_DATA_DIR", default_datadir),
    )
