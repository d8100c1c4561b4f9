"""The verdict table: its entries, read back only as verdicts; its TTL and per-partition bound;
and the verdict cache asking it when memory misses."""

from __future__ import annotations

import os
import pickle
import sys
from collections import OrderedDict, defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from fixtures import fretcoach_rules

from stream.agents import verdict_table
from stream.agents.verdict_table import (
    INDEX_ENTRY,
    TABLE_SLOT,
    VerdictTable,
    decode_entry,
    encode_entry,
)
from stream.engine.verdicts import ComparisonAnswers, ParsedAnswer, RubricAnswers, Verdict
from stream.judge.cache import FRONT_ENTRIES, CachingJudge, VerdictCache
from stream.models import TokenUsage
from stream.ruleset.aggregators import CriterionAnswer
from stream.ruleset.schema import PromptedRule

USAGE = TokenUsage(prompt_tokens=9, completion_tokens=1, total_tokens=10)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingJudge:
    def __init__(self, answer: Verdict) -> None:
        self.answer = answer
        self.calls = 0

    async def judge(self, rule: PromptedRule, prompt: str, *args: Any, **kw: Any) -> Verdict:
        self.calls += 1
        return self.answer


def rule() -> PromptedRule:
    found = next(r for r in fretcoach_rules().rules if r.id == "studio_live_coach_feedback_quality")
    assert isinstance(found, PromptedRule)
    return found


def verdict(value: float = 4.0) -> Verdict:
    return Verdict(ParsedAnswer(value, None, "fine"), "judge-m", 120.0, USAGE, 1)


def caching(inner: CountingJudge, cache: VerdictCache | None = None) -> CachingJudge:
    return CachingJudge(
        inner, cache if cache is not None else VerdictCache(), default_model="judge-m"
    )


@pytest.mark.parametrize(
    "answer",
    [
        ParsedAnswer(0.5, "partly", "why"),
        RubricAnswers({"a": CriterionAnswer(1.0, "yes", "r"), "b": None}, {"notes": ["n"]}, "Good"),
        ComparisonAnswers(
            {"a": RubricAnswers({"x": CriterionAnswer(2.0, None, None)}), "b": RubricAnswers()},
            ParsedAnswer(1.0, "A", None),
            notes={"prompt_summary": "s"},
        ),
    ],
)
def test_an_entry_is_read_back_as_it_was_written(answer: Any) -> None:
    stored = Verdict(answer, "m", 12.5, USAGE, 2)
    stored_at, partition, back = decode_entry(encode_entry(stored, 1234.5, 3))
    assert (stored_at, partition, back) == (1234.5, 3, stored)
    if isinstance(answer, RubricAnswers):
        assert isinstance(back.answer, RubricAnswers)
        assert (back.answer.notes, back.answer.stated) == (answer.notes, answer.stated)


class Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getcwd, ())


def test_an_entry_that_is_not_a_verdict_is_refused() -> None:
    header = encode_entry(verdict(), 1.0, 0)[: verdict_table.HEADER.size]
    with pytest.raises(ValueError, match=r"posix\.getcwd is not part of a verdict"):
        decode_entry(header + pickle.dumps(Payload()))
    with pytest.raises(ValueError, match="holding a dict"):
        decode_entry(header + pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="shorter than its header"):
        decode_entry(b"\x00")


class FakeTable(dict[bytes, bytes]):
    """A Faust table's surface the verdict table uses: items, data and changelog sends."""

    def __init__(self) -> None:
        super().__init__()
        self.data = self
        self.sent: list[tuple[int, bytes, bytes | None]] = []

    def send_changelog(self, partition: int, key: bytes, value: None, **_: Any) -> None:
        self.sent.append((partition, key, value))


class OnDisk(FakeTable):
    """Entries kept elsewhere (RocksDB's files): what Python holds is the index alone."""

    def __setitem__(self, key: bytes, value: bytes) -> None:
        pass


def table(
    clock: Clock,
    owned: set[int],
    max_entries: int = 10,
    max_bytes: int | None = None,
    values_in_memory: bool = True,
) -> VerdictTable:
    found = VerdictTable.__new__(VerdictTable)
    found.table = FakeTable() if values_in_memory else OnDisk()  # type: ignore[assignment]
    found.ttl_s, found.max_entries, found.clock = 100.0, max_entries, clock
    found.max_bytes, found.values_in_memory = max_bytes, values_in_memory
    found._index = defaultdict(OrderedDict)
    found._sizes, found.bytes = defaultdict(dict), defaultdict(int)
    found._not_copartitioned = set()
    found.owned = lambda: owned  # type: ignore[method-assign]
    return found


def in_partition(monkeypatch: pytest.MonkeyPatch, partition: int) -> None:
    message = SimpleNamespace(topic="traces", partition=partition)
    monkeypatch.setattr(verdict_table, "current_event", lambda: SimpleNamespace(message=message))


def test_expired_entries_are_tombstoned_in_their_partition_and_a_partition_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    verdicts = table(clock, owned={0, 1}, max_entries=2)
    in_partition(monkeypatch, 0)
    verdicts.put("k0", verdict(1.0))
    clock.now += 50
    in_partition(monkeypatch, 1)
    verdicts.put("k1", verdict(2.0))
    got = verdicts.get("k0")
    assert got is not None and got[0] == verdict(1.0) and got[1] == 50.0
    clock.now += 50  # k0 is 100 s old: expired, read as a miss and swept
    assert verdicts.get("k0") is None
    assert verdicts.sweep() == 1
    assert verdicts.table.sent == [(0, b"k0", None)]  # type: ignore[attr-defined]
    assert set(verdicts.table) == {b"k1"} and len(verdicts) == 1
    for n in range(3):  # partition 1 holds two: its oldest go at once
        verdicts.put(f"n{n}", verdict())
    assert set(verdicts.table) == {b"n1", b"n2"}
    assert verdicts.table.sent[1:] == [(1, b"k1", None), (1, b"n0", None)]  # type: ignore[attr-defined]
    assert verdicts.rebuild({1}) == 2  # after a recovery: the owned partitions' entries


@pytest.mark.parametrize("values_in_memory", [True, False], ids=["memory", "rocksdb"])
def test_a_partition_is_bounded_in_bytes_too(
    monkeypatch: pytest.MonkeyPatch, values_in_memory: bool
) -> None:
    """A partition holds at most ``max_bytes`` of what it keeps in Python (its oldest go
    first), whatever its count allows: the index, and on the memory store the values."""
    clock = Clock()
    value = encode_entry(verdict(1.0), 0.0, 0)
    one = INDEX_ENTRY + (sys.getsizeof(value) + TABLE_SLOT if values_in_memory else 0)
    verdicts = table(clock, owned={0}, max_bytes=3 * one, values_in_memory=values_in_memory)
    in_partition(monkeypatch, 0)
    for n in range(5):
        verdicts.put(f"k{n}", verdict(1.0))
    assert list(verdicts._index[0]) == [b"k2", b"k3", b"k4"]
    assert verdicts.bytes[0] == 3 * one
    assert verdicts.sweep() == 0 and verdicts.bytes[0] == 3 * one
    if values_in_memory:  # (a rebuild reads the values: the disk-store double has none)
        assert verdicts.rebuild({0}) == 3 and verdicts.bytes[0] == 3 * one


@pytest.mark.parametrize("values_in_memory", [True, False], ids=["memory", "rocksdb"])
def test_the_bytes_bound_counts_what_python_holds(
    monkeypatch: pytest.MonkeyPatch, values_in_memory: bool
) -> None:
    """What a partition counts is what its entries cost in Python, within 20 %: the
    worker's budget share bounds the index on RocksDB, and index and values on memory."""
    import hashlib
    import tracemalloc

    verdicts = table(Clock(), owned={0}, max_entries=10**6, values_in_memory=values_in_memory)
    in_partition(monkeypatch, 0)
    answers = [verdict(float(n % 5)) for n in range(3000)]
    for answer in answers:  # pickled once before: pickling leaves a state on pydantic models
        encode_entry(answer, 0.0, 0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, answer in enumerate(answers):
            verdicts.put(hashlib.sha256(str(n).encode()).hexdigest(), answer)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert abs(verdicts.bytes[0] - held) <= 0.2 * held, (verdicts.bytes[0], held)


def test_no_write_outside_a_record() -> None:
    verdicts = table(Clock(), owned={0})
    verdicts.put("k", verdict())
    assert not verdicts.table and len(verdicts) == 0


class DictStore:
    def __init__(self, kept: dict[str, tuple[Verdict, float]] | None = None) -> None:
        self.kept = kept or {}

    def get(self, key: str) -> tuple[Verdict, float] | None:
        return self.kept.get(key)

    def put(self, key: str, verdict: Verdict) -> None:
        self.kept[key] = (verdict, 0.0)


async def test_the_cache_asks_its_store_when_memory_misses_and_keeps_the_first_ttl() -> None:
    clock = Clock()
    first = caching(CountingJudge(verdict(3.0)))
    first.store = DictStore()
    await first.judge(rule(), "prompt")
    assert len(first.store.kept) == 1  # type: ignore[attr-defined]

    # a restarted worker: memory empty, the store holds the verdict, stored 90 s ago
    inner = CountingJudge(verdict(1.0))
    restarted = caching(inner, VerdictCache(ttl_s=100, clock=clock))
    restarted.store = DictStore({k: (v, 90.0) for k, (v, _) in first.store.kept.items()})  # type: ignore[attr-defined]
    hit = await restarted.judge(rule(), "prompt")
    assert inner.calls == 0 and hit.cached and hit.answer == verdict(3.0).answer
    clock.now += 5
    assert (await restarted.judge(rule(), "prompt")).cached  # from memory now
    clock.now += 5  # 100 s since it was first stored: memory drops it (the store would too)
    restarted.store = DictStore()
    assert not (await restarted.judge(rule(), "prompt")).cached and inner.calls == 1


async def test_with_a_store_behind_it_memory_keeps_only_a_front_and_the_store_the_rest() -> None:
    """The worker's verdicts live in its table (on disk with RocksDB): the in-memory cache
    keeps the last ``FRONT_ENTRIES`` asked, and an older one is a hit from the store."""
    inner = CountingJudge(verdict(2.0))
    judge = caching(inner)
    judge.store = DictStore()
    judged = rule()
    for n in range(FRONT_ENTRIES + 10):
        await judge.judge(judged, f"prompt {n}")
    assert len(judge.cache) == FRONT_ENTRIES
    assert len(judge.store.kept) == FRONT_ENTRIES + 10  # type: ignore[attr-defined]
    assert judge.cache.get(next(iter(judge.store.kept))) is None  # type: ignore[attr-defined]
    again = await judge.judge(judged, "prompt 0")
    assert again.cached and inner.calls == FRONT_ENTRIES + 10
