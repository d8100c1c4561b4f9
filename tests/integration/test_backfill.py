"""`scorer backfill` on the embedded broker (issue 44's target): one rule over a range of the
traces topic scores exactly that rule's eligible traces once; a second run makes no judge
call and publishes no new score; a budget stops it; batch mode goes through the Batch API
(``tests/batch_double.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from batch_double import BatchDouble
from fixtures import hub_trace, studio_trace
from scripted_judge import MockJudge, Reply, demo_answers

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics

from .harness import Names, read_scores

RULE = "hub_response_clarity"  # a FretCoach judge rule on hub-coach-chat traces
DAY_MS = 86_400_000


@pytest.fixture
def batch_api() -> Iterator[BatchDouble]:
    with BatchDouble(default='{"score": 0.75, "reason": "answered in the batch"}') as api:
        yield api


async def seed(bootstrap: str, names: Names) -> list[str]:
    """Six hub traces now, two studio traces now (another rule's), and two hub traces three
    days ago (out of a day's range); the recent hub traces' ids."""
    now = int(time.time() * 1000)
    recent, records = [], []
    for n in range(6):
        document = hub_trace(n % 3)
        document["id"] = f"t-hub-{n}"
        document["thread_id"] = None
        document["output"]["messages"][-1]["content"] += f" (take {n})"
        recent.append(document["id"])
        records.append((document, now - 60_000 + n))
    for n in range(2):
        studio = studio_trace()
        studio["id"] = f"t-studio-{n}"
        records.append((studio, now - 50_000 + n))
        old = hub_trace()
        old["id"], old["thread_id"] = f"t-old-{n}", None
        records.append((old, now - 3 * DAY_MS + n))
    await ensure_topics(bootstrap, [names.traces, names.scores], 2)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for document, when in records:
            await producer.send_and_wait(
                names.traces, orjson.dumps(document), key=document["id"].encode(), timestamp_ms=when
            )
    finally:
        await producer.stop()
    return recent


def backfill(
    broker: EmbeddedBroker, names: Names, judge: MockJudge | None, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``scorer backfill`` with ``args`` (``judge`` None: no judge configured)."""
    judged = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": "sk-test"} if judge else {}
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
        **judged,
        "SCORER_JUDGE_BACKOFF_BASE_S": "0.05",
        **names.env(),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "stream.cli", "backfill", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


async def scores_of(broker: EmbeddedBroker, names: Names, rule: str) -> list[dict[str, Any]]:
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: False, timeout=3)
    return [s for s in scores if s["rule_id"] == rule]


async def test_a_backfill_scores_a_rule_s_eligible_traces_once(
    broker: EmbeddedBroker, names: Names, judge: MockJudge
) -> None:
    recent = await seed(broker.bootstrap, names)
    dry = backfill(broker, names, judge, "--rules", RULE, "--since", "1d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "6 traces" in dry.stdout and judge.requests == []
    assert await scores_of(broker, names, RULE) == []

    first = backfill(broker, names, judge, "--rules", RULE, "--since", "1d", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    scores = await scores_of(broker, names, RULE)
    assert sorted(s["target_id"] for s in scores) == recent  # the old and studio ones: not
    assert len({s["score_id"] for s in scores}) == 6 and all(s["status"] == "ok" for s in scores)
    calls = len(judge.requests)
    assert calls == 6

    again = backfill(broker, names, judge, "--rules", RULE, "--since", "1d", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "6 already scored" in again.stdout
    assert len(judge.requests) == calls  # no call
    assert len(await scores_of(broker, names, RULE)) == 6  # nothing published

    unknown = backfill(broker, names, judge, "--rules", "no_such_rule", "--since", "1d", "--yes")
    assert unknown.returncode == 2 and "no rule 'no_such_rule'" in unknown.stderr
    asking = backfill(broker, names, judge, "--rules", "hub_actionability", "--since", "1d")
    assert asking.returncode == 2 and "--yes" in asking.stderr  # no terminal to ask on


async def test_a_budget_stops_a_backfill_before_the_target_that_would_pass_it(
    broker: EmbeddedBroker, names: Names, judge: MockJudge
) -> None:
    await seed(broker.bootstrap, names)
    # a call's estimate at gpt-4o-mini's price is a few hundredths of a cent: room for two
    plan = backfill(
        broker, names, judge, "--rules", "hub_actionability", "--since", "1d", "--dry-run"
    )
    per_call = float(plan.stdout.split("$")[-3].split()[0].replace(",", "")) / 6
    stopped = backfill(
        broker, names, judge, "--rules", "hub_actionability", "--since", "1d", "--yes",
        "--max-usd", f"{per_call * 2.5:.8f}",
    )  # fmt: skip
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "would pass the budget" in stopped.stdout
    published = await scores_of(broker, names, "hub_actionability")
    assert 1 <= len(published) < 6 and len(judge.requests) == len(published)


async def test_batch_mode_sends_the_calls_through_the_batch_api(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, batch_api: BatchDouble
) -> None:
    recent = await seed(broker.bootstrap, names)
    done = backfill(
        broker, names, judge, "--rules", RULE, "--since", "1d", "--yes", "--mode", "batch",
        SCORER_BATCH_BASE_URL=batch_api.base_url, SCORER_BATCH_POLL_S="0.3",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert judge.requests == []  # no online call
    assert "POST /v1/batches" in batch_api.calls
    scores = await scores_of(broker, names, RULE)
    assert sorted(s["target_id"] for s in scores) == recent
    assert {s["reason"] for s in scores} == {"answered in the batch"}


async def test_a_rubric_backfilled_twice_is_judged_once(
    broker: EmbeddedBroker, names: Names, judge: MockJudge
) -> None:
    """A rubric's decision is its aggregate score (criterion-named id): found on the second
    run, no call."""
    await seed(broker.bootstrap, names)
    demo_answers(judge)  # the critique rubric answered in its shape
    first = backfill(broker, names, judge, "--rules", "response_critique", "--since", "1d", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    calls = len(judge.requests)
    published = await scores_of(broker, names, "response_critique")
    assert calls >= 6 and {s["target_id"] for s in published} >= {f"t-hub-{n}" for n in range(6)}
    again = backfill(broker, names, judge, "--rules", "response_critique", "--since", "1d", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(judge.requests) == calls
    assert len(await scores_of(broker, names, "response_critique")) == len(published)


async def test_error_scores_are_asked_again_and_a_missing_judge_stops_the_run(
    broker: EmbeddedBroker, names: Names, judge: MockJudge
) -> None:
    await seed(broker.bootstrap, names)
    rule = "hub_context_usage_quality"
    refused = judge.script("evaluating context usage quality", Reply(status=400, content="no"))
    failing = backfill(broker, names, judge, "--rules", rule, "--since", "1d", "--yes")
    assert failing.returncode == 1 and "6 error scores" in failing.stdout
    judge.scripts.remove(refused)
    mended = backfill(broker, names, judge, "--rules", rule, "--since", "1d", "--yes")
    assert mended.returncode == 0, mended.stdout + mended.stderr
    scores = await scores_of(broker, names, rule)
    assert {s["status"] for s in scores if s["status"] == "ok"} == {"ok"}
    assert len({s["score_id"] for s in scores}) == 6  # the same ids, answered now

    judgeless = backfill(broker, names, None, "--rules", "hub_actionability", "--since", "1d")
    assert judgeless.returncode == 2 and "need a judge" in judgeless.stderr
