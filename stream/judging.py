"""The worker's judge: the client behind the verdict cache, and the verdicts table, their
memory sized from the worker's budget (``SCORER_MEMORY_MB``, design record 37)."""

from __future__ import annotations

import faust

from .agents.verdict_table import VerdictTable
from .engine.verdicts import Judge
from .judge.cache import CachingJudge, VerdictCache, VerdictStore
from .judge.decision_client import judge_client
from .observer import Observer
from .settings import Settings

CACHE_SHARE, TABLE_SHARE = 1 / 16, 1 / 8  # of the memory budget: the verdicts in memory


def caches_verdicts(settings: Settings) -> bool:
    """Whether the worker's judge sits behind the verdict cache (``judge_of``)."""
    return bool(
        settings.judge_configured
        and settings.judge_cache_ttl_s
        and settings.judge_cache_max_entries
    )


def judge_of(
    settings: Settings, observer: Observer, store: VerdictStore | None = None
) -> Judge | None:
    """The worker's judge (None: none configured), behind the verdict cache unless
    ``SCORER_JUDGE_CACHE_TTL_S`` or ``SCORER_JUDGE_CACHE_MAX_ENTRIES`` is 0; ``store``: where
    the cache keeps verdicts beyond its front (the ``verdicts`` table)."""
    if not settings.judge_configured:
        return None
    client = judge_client(settings.judge_config(), observer)
    if not caches_verdicts(settings):
        return client
    cache = VerdictCache(
        settings.judge_cache_ttl_s,
        settings.judge_cache_max_entries,
        max_bytes=settings.memory_share(CACHE_SHARE),
    )
    return CachingJudge(
        client,
        cache,
        default_model=settings.judge_model,
        observer=observer,
        price=settings.judge_cost,
        store=store,
    )


def verdict_table(app: faust.App, settings: Settings, observer: Observer) -> VerdictTable:
    """The ``verdicts`` table, what it holds in Python within its share of the budget, split
    over the partitions: the index of its entries, and on the memory store their values
    (RocksDB keeps those on disk)."""
    share = settings.memory_share(TABLE_SHARE) // settings.topic_partitions
    table = VerdictTable(
        app,
        partitions=settings.topic_partitions,
        ttl_s=settings.judge_cache_ttl_s,
        max_entries=settings.judge_cache_max_entries,
        max_bytes=share,
        values_in_memory=settings.store == "memory",
    )
    observer.watch_held("verdicts", lambda: len(table), lambda: sum(table.bytes.values()))
    return table
