"""What a worker's /metrics page says while it works: consumer lag, rule directions, judge
cost and latency by outcome, low scores."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from fixtures import live_trace
from scripted_judge import MockJudge, Reply

from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

from .harness import NO_VERDICT_CACHE, Names, Worker, produce

LIVE_PROMPT = "evaluating live guitar coach feedback quality"


async def wait_for_metric(
    worker: Worker, check: Callable[[str], bool], timeout: float = 60.0
) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = worker.scrape()
        if text and check(text):
            return text
        await asyncio.sleep(0.5)
    wanted = ("scorer_consumer_lag", "scorer_traces_consumed", "scorer_scores_total")
    shown = "\n".join(line for line in text.splitlines() if line.startswith(wanted))
    raise AssertionError(f"metrics never matched; last page (in part):\n{shown}")


async def test_lag_grows_behind_a_stuck_trace_and_drains_when_it_is_scored(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "fine"}')
    judge.script("STUCK-MARKER", Reply(content='{"score": 1, "reason": "late"}', delay_s=12))
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        SCORER_LAG_INTERVAL_S="1",
        SCORER_JUDGE_TIMEOUT_S="60",
        **NO_VERDICT_CACHE,
    ).start()
    workers.append(worker)
    stuck = live_trace()
    stuck["id"] = "t-stuck"
    stuck["output"]["generations"][0][0]["text"] = "STUCK-MARKER feedback"
    rest = []
    for i in range(20):
        document = live_trace()
        document["id"] = f"t-after-{i}"
        rest.append((b"one-key", orjson.dumps(document)))
    await produce(broker.bootstrap, names.traces, [(b"one-key", orjson.dumps(stuck)), *rest])

    # the stuck trace holds the commit at its offset: all 21 messages count as lag
    await wait_for_metric(
        worker, lambda t: sample_value(t, "scorer_consumer_lag", topic=names.traces) == 21
    )
    # when its judge call returns, everything is committed and the lag drains to 0
    text = await wait_for_metric(
        worker,
        lambda t: (
            sample_value(t, "scorer_consumer_lag", topic=names.traces) == 0
            and sample_value(
                t, "scorer_scores_total", rule="studio_live_coach_feedback_quality", status="ok"
            )
            == 21
        ),
    )
    # one call took ~12 s, twenty were quick: both ends of the latency histogram are there
    ok = {"model": "gpt-4o-mini", "outcome": "ok"}
    assert sample_value(text, "scorer_judge_latency_seconds_count", **ok) >= 21
    assert sample_value(text, "scorer_judge_latency_seconds_bucket", le="8.0", **ok) < sample_value(
        text, "scorer_judge_latency_seconds_count", **ok
    )


async def test_directions_low_scores_and_estimated_cost(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    # 1..4 scale: 1 is low (normalised 0), 4 is not
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "fine"}')
    judge.script("LOW-MARKER", '{"score": 1, "reason": "poor"}')
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        SCORER_JUDGE_PRICES='{"gpt-4o-mini": {"input": 1000000, "output": 2000000}}',
    ).start()
    workers.append(worker)
    documents = []
    for i, feedback in enumerate(["LOW-MARKER a", "LOW-MARKER b", "good", "good", "good"]):
        document = live_trace()
        document["id"] = f"t-{i}"
        document["output"]["generations"][0][0]["text"] = feedback
        documents.append((document["id"].encode(), orjson.dumps(document)))
    await produce(broker.bootstrap, names.traces, documents)

    rule = {"rule": "studio_live_coach_feedback_quality", "pack": "fretcoach"}
    text = await wait_for_metric(
        worker, lambda t: sample_value(t, "scorer_score_value_count", **rule) == 5
    )
    assert sample_value(text, "scorer_low_scores_total", **rule) == 2
    assert sample_value(text, "scorer_rule_direction", **rule, scope="trace") == 1
    assert (
        sample_value(
            text, "scorer_rule_direction", rule="hub_user_frustration_score", scope="thread"
        )
        == -1
    )
    # the mock judge reports usage; the price is a dollar a token in, two a token out
    prompt = sample_value(text, "scorer_judge_tokens_total", kind="prompt", outcome="ok")
    completion = sample_value(text, "scorer_judge_tokens_total", kind="completion", outcome="ok")
    assert prompt > 0 and completion > 0
    cost = sample_value(text, "scorer_judge_cost_usd_total", model="gpt-4o-mini", outcome="ok")
    assert cost == prompt + 2 * completion
