"""The verdict cache end to end: the same traces produced twice, the second pass paid for by
no judge call, publishing the same scores (the same ids) marked ``details.cached``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_worker import LIVE_PROMPT, live_with_id, start

RULE = "studio_live_coach_feedback_quality"
TRACES = 6


def judged(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in scores if s["rule_id"] == RULE]


async def test_traces_produced_twice_are_judged_once_and_score_the_same(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "Specific and kind."}')
    worker = start(workers, broker, names, tmp_path, judge)
    # each trace a question of its own: distinct feedback, so distinct prompts
    traces = [live_with_id(f"t-cache-{n}", f"Relax your wrist on bar {n}.") for n in range(TRACES)]
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    first = judged(
        await read_scores(
            broker.bootstrap,
            names.scores,
            until=lambda s: len(judged(s)) >= TRACES,
            timeout=120,
        )
    )
    assert len(first) == TRACES and all(s["status"] == "ok" for s in first)
    asked = sum(LIVE_PROMPT in p for p in judge.prompts())
    assert asked == TRACES

    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    both = judged(
        await read_scores(
            broker.bootstrap,
            names.scores,
            until=lambda s: len(judged(s)) >= 2 * TRACES,
            timeout=120,
        )
    )
    second = both[TRACES:]
    assert len(second) == TRACES
    assert sum(LIVE_PROMPT in p for p in judge.prompts()) == asked  # no call the second time
    assert {s["score_id"] for s in second} == {s["score_id"] for s in first}
    live = {s["score_id"]: s for s in first}
    for hit in second:
        assert hit["details"]["cached"] is True and hit.get("usage") is None
        was = live[hit["score_id"]]
        assert "cached" not in (was["details"] or {}) and was["usage"] is not None
        assert (hit["value"], hit["label"], hit["reason"], hit["judge_model"]) == (
            was["value"],
            was["label"],
            was["reason"],
            was["judge_model"],
        )

    labels = {"rule": RULE, "pack": "fretcoach"}
    for _ in range(50):  # the page is read as the scores are published: let it catch up
        page = worker.scrape()
        if sample_value(page, "scorer_judge_cache_lookups_total", **labels, outcome="hit"):
            break
        await asyncio.sleep(0.2)
    assert sample_value(page, "scorer_judge_cache_lookups_total", **labels, outcome="hit") == TRACES
    assert (
        sample_value(page, "scorer_judge_cache_lookups_total", **labels, outcome="miss") == TRACES
    )
    saved = sample_value(page, "scorer_judge_cache_saved_tokens_total", **labels, kind="prompt")
    assert saved > 0
    assert sample_value(page, "scorer_judge_cache_entries") == TRACES
