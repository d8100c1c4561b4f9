"""The verdict cache: its key, its bounds, what a hit publishes, and what is never cached."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from fixtures import as_trace, fretcoach_rules, live_trace, scorer
from scripted_judge import MockJudge

from stream.engine.scorer import Scorer
from stream.engine.spend import Budget, SpendLedger
from stream.engine.verdicts import ParsedAnswer, ToolBox, Verdict
from stream.errors import JudgeError
from stream.judge.cache import CachingJudge, VerdictCache, verdict_key
from stream.metrics import ScorerMetrics
from stream.models import TokenUsage
from stream.ruleset.schema import PromptedRule

RULE_ID = "studio_live_coach_feedback_quality"
USAGE = TokenUsage(prompt_tokens=900, completion_tokens=100, total_tokens=1000)


def rule(**changes: Any) -> PromptedRule:
    found = next(r for r in fretcoach_rules().rules if r.id == RULE_ID)
    assert isinstance(found, PromptedRule)
    return found.model_copy(update=changes)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingJudge:
    """A judge that answers from a queue (a ``JudgeError`` in it is raised) and counts calls."""

    def __init__(self, *answers: Verdict | JudgeError, delay_s: float = 0.0) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.delay_s = delay_s

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, JudgeError):
            raise answer
        return answer


def verdict(value: float = 4.0) -> Verdict:
    return Verdict(ParsedAnswer(value, None, "fine"), "judge-m", 120.0, USAGE, 1)


def caching(inner: CountingJudge, cache: VerdictCache | None = None, **kw: Any) -> CachingJudge:
    return CachingJudge(inner, cache or VerdictCache(), default_model="judge-m", **kw)


def test_the_key_changes_with_what_decides_the_verdict_and_only_that() -> None:
    base = verdict_key(rule(), "m", "prompt", "system", {"type": "object"})
    assert base == verdict_key(rule(), "m", "prompt", "system", {"type": "object"})
    changed = [
        verdict_key(rule(), "m", "prompt!", "system", {"type": "object"}),
        verdict_key(rule(), "m", "prompt", "system!", {"type": "object"}),
        verdict_key(rule(), "m", "prompt", None, {"type": "object"}),
        verdict_key(rule(), "m", "prompt", "system", {"type": "string"}),
        verdict_key(rule(), "m2", "prompt", "system", {"type": "object"}),
        verdict_key(rule(version=2), "m", "prompt", "system", {"type": "object"}),
        verdict_key(rule(id="other"), "m", "prompt", "system", {"type": "object"}),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = VerdictCache(ttl_s=60, max_entries=10, clock=clock)
    cache.put("k", verdict())
    clock.now += 59.9
    assert cache.get("k") == verdict()
    clock.now += 0.1
    assert cache.get("k") is None
    assert len(cache) == 0 and cache.bytes == 0


def test_the_least_recently_used_entry_goes_past_the_bound() -> None:
    cache = VerdictCache(ttl_s=60, max_entries=2, clock=Clock())
    cache.put("a", verdict(1))
    cache.put("b", verdict(2))
    assert cache.get("a") is not None  # a used: b is now the least recent
    cache.put("c", verdict(3))
    assert cache.get("b") is None
    assert cache.get("a") == verdict(1) and cache.get("c") == verdict(3)
    assert len(cache) == 2 and cache.bytes > 0
    one = cache.bytes
    cache.put("c", verdict(3))  # replaced, not counted twice
    assert cache.bytes == one


def test_the_least_recently_used_go_past_the_bytes_bound_too() -> None:
    """The worker bounds its cache by a share of its memory budget as well as by count."""
    sized = VerdictCache(ttl_s=60, max_entries=100, clock=Clock())
    sized.put("a", verdict(1))
    one = sized.bytes
    cache = VerdictCache(ttl_s=60, max_entries=100, clock=Clock(), max_bytes=3 * one)
    for key in "abcde":
        cache.put(key, verdict(1))
    assert len(cache) == 3 and cache.bytes <= 3 * one
    assert cache.get("a") is None and cache.get("e") == verdict(1)


def test_a_cache_with_no_room_or_no_time_is_refused() -> None:
    with pytest.raises(ValueError):
        VerdictCache(ttl_s=0)
    with pytest.raises(ValueError):
        VerdictCache(max_entries=0)


async def test_a_hit_makes_no_call_and_carries_no_usage() -> None:
    inner = CountingJudge(verdict())
    judge = caching(inner)
    live = await judge.judge(rule(), "prompt", "system")
    hit = await judge.judge(rule(), "prompt", "system")
    assert inner.calls == 1
    assert live.usage == USAGE and not live.cached
    assert hit.cached and hit.usage is None
    assert hit.answer == live.answer and hit.model == live.model
    await judge.judge(rule(), "another prompt", "system")
    await judge.judge(rule(version=2), "prompt", "system")
    assert inner.calls == 3


async def test_an_error_is_not_cached() -> None:
    inner = CountingJudge(JudgeError("down", kind="server_error"), verdict())
    judge = caching(inner)
    with pytest.raises(JudgeError):
        await judge.judge(rule(), "prompt")
    answered = await judge.judge(rule(), "prompt")
    assert inner.calls == 2 and not answered.cached


async def test_a_rule_with_cache_false_and_a_call_with_tools_always_ask() -> None:
    inner = CountingJudge(verdict())
    judge = caching(inner)
    off = rule(judge=rule().judge.model_copy(update={"cache": False}))
    for _ in range(2):
        assert not (await judge.judge(off, "prompt")).cached

    class Tools:
        def __init__(self) -> None:
            self.definitions: list[dict[str, Any]] = []

        def call(self, name: str, arguments: str | None) -> str:
            return ""

    for _ in range(2):
        assert not (await judge.judge(rule(), "prompt", tools=Tools())).cached
    assert inner.calls == 4
    assert len(judge.cache) == 0


async def test_identical_calls_in_flight_make_one_call_and_a_failed_one_is_asked_again() -> None:
    inner = CountingJudge(verdict(), delay_s=0.05)
    judge = caching(inner)
    first, second = await asyncio.gather(
        judge.judge(rule(), "prompt"), judge.judge(rule(), "prompt")
    )
    assert inner.calls == 1 and not first.cached and second.cached
    failing = CountingJudge(JudgeError("down", kind="timeout"), verdict(), delay_s=0.05)
    judge = caching(failing)
    results = await asyncio.gather(
        judge.judge(rule(), "p"), judge.judge(rule(), "p"), return_exceptions=True
    )
    assert isinstance(results[0], JudgeError)
    assert isinstance(results[1], Verdict) and not results[1].cached
    assert failing.calls == 2


def cached_scorer(url: str, metrics: ScorerMetrics, clock: Clock) -> Scorer:
    s = scorer(url)
    assert s.context.judge is not None
    s.context.judge = CachingJudge(
        s.context.judge,
        VerdictCache(ttl_s=3600, clock=clock),
        default_model="gpt-4o-mini",
        observer=metrics,
        price=lambda model, usage: 0.25,
    )
    return s


async def test_a_hit_publishes_the_live_score_but_for_details_cached_and_usage() -> None:
    metrics, clock = ScorerMetrics.default(), Clock()
    with MockJudge() as server:
        server.script("evaluating live guitar coach", '{"score": 4, "reason": "clear"}')
        s = cached_scorer(server.base_url, metrics, clock)
        s.ledger = SpendLedger([Budget(rule=RULE_ID, tokens=10**9)])
        document = live_trace()
        first = await s.score_trace(as_trace(document), document)
        spent = s.ledger.used()[0][1]
        second = await s.score_trace(as_trace(document), document)
        assert sum("evaluating live guitar coach" in p for p in server.prompts()) == 1
        live = next(x for x in first.scores if x.rule_id == RULE_ID)
        hit = next(x for x in second.scores if x.rule_id == RULE_ID)
        assert live.status == "ok" and live.usage is not None
        assert spent > 0 and s.ledger.used()[0][1] == spent  # a hit charges nothing
        assert hit.usage is None and hit.details == {**(live.details or {}), "cached": True}
        assert hit.judge_model == live.judge_model
        same = {"usage", "details", "created_at"}
        assert hit.model_dump(exclude=same) == live.model_dump(exclude=same)
        read = metrics.registry.get_sample_value
        labels = {"rule": RULE_ID, "pack": "fretcoach", "model": "gpt-4o-mini"}
        assert read("scorer_judge_cache_lookups_total", {**labels, "outcome": "hit"}) == 1
        assert read("scorer_judge_cache_lookups_total", {**labels, "outcome": "miss"}) == 1
        saved = read("scorer_judge_cache_saved_tokens_total", {**labels, "kind": "prompt"})
        assert saved == live.usage.prompt_tokens
        assert read("scorer_judge_cache_saved_cost_usd_total", labels) == 0.25
        assert (read("scorer_judge_cache_entries") or 0) >= 1
        assert (read("scorer_judge_cache_bytes") or 0) > 0
        clock.now += 3600  # past the TTL: asked again
        third = await s.score_trace(as_trace(document), document)
        assert sum("evaluating live guitar coach" in p for p in server.prompts()) == 2
        again = next(x for x in third.scores if x.rule_id == RULE_ID)
        assert again.usage is not None and "cached" not in (again.details or {})
        assert s.judge is not None
        await s.judge.close()  # type: ignore[attr-defined]


def test_the_bytes_bound_counts_what_python_holds() -> None:
    """The worker bounds the cache by a share of its budget: the count it keeps is what the
    entries cost in memory (keys made per call, as a judge call makes them), within 15 %."""
    import hashlib
    import pickle
    import tracemalloc

    verdicts = [verdict(float(n % 5)) for n in range(3000)]
    for one in verdicts:  # pickled once before: pickling leaves a state on pydantic models
        pickle.dumps(one)
    cache = VerdictCache(ttl_s=60, max_entries=10_000, clock=Clock())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, one in enumerate(verdicts):
            cache.put(hashlib.sha256(str(n).encode()).hexdigest(), one)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert abs(cache.bytes - held) <= 0.15 * held, (cache.bytes / 3000, held / 3000)
