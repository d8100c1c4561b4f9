"""The verdict cache: a judge's answer to the same question paid for once.

A verdict is keyed by what decides it: the model asked, the rendered system and user prompt,
the answer schema the judge is held to, the request's sampling knobs (temperature, max
tokens) and the rule's id, pack and version. ``CachingJudge`` wraps any ``Judge`` and keeps
the protocol, so every judged rule kind (llm_judge, fan-out, rubric, comparison) is cached
without a special case. A hit is the stored verdict marked ``cached``, with no usage: it
cost nothing, and the spend ledger is charged nothing. Only answered verdicts are stored; a
``JudgeError`` propagates and is asked again next time. Calls with tools (the judge reads
the trace through them, not only the prompt) are not cached. Design record 22.

The in-memory ``VerdictCache`` is the fast path; a ``VerdictStore`` behind it (the worker's
changelog-backed table, ``agents/verdict_table.py``) keeps the entries where they survive a
restart and move with their partition at a rebalance. With a store behind it the in-memory
cache is only a front for the verdicts asked again within minutes (``FRONT_ENTRIES``): the
store is where verdicts are kept for their TTL, on disk with RocksDB (design record 37).
The cache holds each verdict pickled, and counts its bytes as Python holds them (the key,
the pickle, the entry), so its byte bound is what it costs in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import pickle
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..engine.verdicts import Judge, ToolBox, Verdict
from ..models import TokenUsage
from ..observer import Observer
from ..ruleset.schema import PromptedRule
from .contract import answer_contract

DEFAULT_TTL_S = 86_400.0  # one day
DEFAULT_MAX_ENTRIES = 100_000
# the in-memory cache in front of a store: verdicts asked again within minutes (a duplicate
# trace, a redelivery, a rubric's repeated turn), the store keeping the rest
FRONT_ENTRIES = 1024


def verdict_key(
    rule: PromptedRule, model: str, prompt: str, system: str | None, schema: Any
) -> str:
    """The cache key of one judge call: a digest of everything its answer depends on."""
    asked = {
        "rule": rule.id,
        "pack": rule.pack,
        "version": rule.version,
        "model": model,
        "system": system,
        "prompt": prompt,
        "schema": schema,
        "temperature": rule.judge.temperature,
        "max_tokens": rule.judge.max_tokens,
    }
    if rule.judge.logprobs:  # a verdict with probabilities is not one without
        asked["logprobs"] = True
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Entry:
    pickled: bytes  # the verdict
    stored_at: float
    size: int  # bytes Python holds for it: the key, the pickle, this entry, its slot


# an entry's own object and its slot in the ordered dict (a linked node and a table entry:
# measured with tracemalloc in tests/judge/test_cache.py)
ENTRY_OVERHEAD = 200


def held_bytes(key: str, pickled: bytes) -> int:
    """What one cache entry holds in memory."""
    return sys.getsizeof(key) + sys.getsizeof(pickled) + ENTRY_OVERHEAD


class VerdictCache:
    """Verdicts by key, each kept ``ttl_s`` seconds from when it was stored, at most
    ``max_entries`` of them and, when given, ``max_bytes`` of what they hold in memory (the
    least recently used go first)."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int | None = None,
    ) -> None:
        if ttl_s <= 0 or max_entries <= 0:
            raise ValueError("a verdict cache keeps entries for a positive time and count")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Verdict | None:
        """The verdict stored under ``key``, unless it is absent or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() - entry.stored_at >= self.ttl_s:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        verdict: Verdict = pickle.loads(entry.pickled)
        return verdict

    def put(self, key: str, verdict: Verdict, age: float = 0.0) -> None:
        """Store ``verdict`` under ``key`` (replacing what was there), stored ``age`` seconds
        ago (a verdict read back from a store keeps its first TTL), then evict the least
        recently used entries past the bound."""
        if key in self._entries:
            self._drop(key)
        pickled = pickle.dumps(verdict, pickle.HIGHEST_PROTOCOL)
        size = held_bytes(key, pickled)
        self._entries[key] = _Entry(pickled, self.clock() - age, size)
        self.bytes += size
        self._bound()

    def front(self, entries: int) -> None:
        """Keep at most ``entries`` from now on (a store behind keeps the rest)."""
        self.max_entries = min(self.max_entries, max(1, entries))
        self._bound()

    def _bound(self) -> None:
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1
        ):
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        self.bytes -= self._entries.pop(key).size


class VerdictStore(Protocol):
    """Where verdicts outlive the in-memory cache (``agents.verdict_table.VerdictTable``)."""

    def get(self, key: str) -> tuple[Verdict, float] | None:
        """The verdict stored under ``key`` and its age in seconds, unless absent or
        expired."""
        ...

    def put(self, key: str, verdict: Verdict, partition: int | None = None) -> None:
        """Keep ``verdict`` under ``key`` (where the record being scored asks, or in
        ``partition``)."""
        ...


class CachingJudge:
    """A ``Judge`` that asks ``judge`` only for verdicts ``cache`` does not hold.

    Identical calls in flight at once (a duplicate trace arriving while the first is judged)
    make one call: the later ones wait for it, and make their own if it fails.
    ``price(model, usage)``: the US dollars a call's usage costs (None: no price), so the
    metrics say what a hit saved. ``store``: where verdicts are kept beyond ``cache`` (asked
    when ``cache`` misses, written with it; ``cache`` then keeps only ``FRONT_ENTRIES``)."""

    def __init__(
        self,
        judge: Judge,
        cache: VerdictCache,
        *,
        default_model: str,
        observer: Observer | None = None,
        price: Callable[[str, TokenUsage], float | None] = lambda model, usage: None,
        store: VerdictStore | None = None,
    ) -> None:
        self.inner = judge
        self.cache = cache
        self.default_model = default_model
        self.observer = observer or Observer()
        self.price = price
        self._in_flight: dict[str, asyncio.Future[Verdict]] = {}
        self._store: VerdictStore | None = None
        self.store = store
        self.observer.watch_judge_cache(lambda: len(cache), lambda: cache.bytes)

    @property
    def store(self) -> VerdictStore | None:
        return self._store

    @store.setter
    def store(self, store: VerdictStore | None) -> None:
        """Keep verdicts in ``store`` too: the in-memory cache becomes its front."""
        self._store = store
        if store is not None:
            self.cache.front(FRONT_ENTRIES)

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        if tools is not None or not rule.judge.cache:
            return await self.inner.judge(rule, prompt, system, quoted, tools)
        model = rule.judge.model or self.default_model
        key = verdict_key(rule, model, prompt, system, answer_contract(rule)[0])
        if (stored := self.cache.get(key)) is not None:
            return self._hit(rule, model, stored)
        if self.store is not None and (kept := self.store.get(key)) is not None:
            verdict, age = kept
            self.cache.put(key, verdict, age)
            return self._hit(rule, model, verdict)
        if (running := self._in_flight.get(key)) is not None:
            await asyncio.wait({running})  # never raises for the call it waits on
            if not running.cancelled() and running.exception() is None:
                return self._hit(rule, model, running.result())
            # that call failed or was cancelled: this one asks for itself
        self.observer.on_judge_cache(rule.id, rule.pack, model, "miss")
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            verdict = await self.inner.judge(rule, prompt, system, quoted, tools)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failure no one waited for is not logged
            raise
        else:
            self.cache.put(key, verdict)
            if self.store is not None:
                self.store.put(key, verdict)
            future.set_result(verdict)
            return verdict
        finally:
            if self._in_flight.get(key) is future:
                del self._in_flight[key]

    def _key(self, rule: PromptedRule, prompt: str, system: str | None) -> str:
        model = rule.judge.model or self.default_model
        return verdict_key(rule, model, prompt, system, answer_contract(rule)[0])

    def holds(self, rule: PromptedRule, prompt: str, system: str | None) -> bool:
        """Whether a verdict for this call is kept (in memory, or in the store), unexpired,
        and would be used (the rule caches, and reads no tools)."""
        if not rule.judge.cache or rule.judge.tools is not None:
            return False
        key = self._key(rule, prompt, system)
        if self.cache.get(key) is not None:
            return True
        return self.store is not None and self.store.get(key) is not None

    def keep(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None,
        verdict: Verdict,
        partition: int | None = None,
    ) -> None:
        """Keep a verdict given outside a call through this judge (a batch's answer), as a
        call's is kept: in memory, and in the store (in ``partition``: no record is being
        scored when a batch completes)."""
        if not rule.judge.cache:
            return
        key = self._key(rule, prompt, system)
        self.cache.put(key, verdict)
        if self.store is not None:
            self.store.put(key, verdict, partition)

    def _hit(self, rule: PromptedRule, model: str, stored: Verdict) -> Verdict:
        """The stored verdict as a hit publishes it (no usage: it cost nothing), counted with
        the tokens and cost it saved."""
        saved = stored.usage
        cost = self.price(stored.model, saved) if saved is not None else None
        self.observer.on_judge_cache(rule.id, rule.pack, model, "hit", saved, cost)
        return replace(stored, usage=None, cached=True)

    async def close(self) -> None:
        """Close the judge it wraps (``JudgeClient.close``), if it has anything to close."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            await close()
