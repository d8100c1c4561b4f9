"""Batch judging end to end (design record 25): a ``judge.mode: batch`` rule's jobs are kept
pending in the worker's table while their source records are committed, submitted through the
Batch API (``tests/batch_double.py``, the Batch API reference's endpoints), and scored when
the batch completes, as a live call would score them; a worker killed between submit and
completion is followed by one that polls the same batch and never submits a job twice; items
that fail or expire are asked again online, refused ones are error scores saying why."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from batch_double import BatchDouble, ItemError
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics

from .batch_workers import batch_worker, decisions_of, wait_for
from .harness import Names, Worker, committed, produce, read_scores

RULE = """\
id: reply_quality
pack: batchy
version: 1
scope: trace
kind: llm_judge
description: "Support replies judged in batches"
filter:
  projects: [support-bot]
variables:
  question: input.messages[-1].content
  reply: output.messages[-1].content
judge:
  mode: batch
  batch:
    max_jobs: {max_jobs}
    max_wait_s: 600
output:
  type: numeric
  min: 0
  max: 1
prompt: |-
  Rate how well the reply answers the question, from 0 to 1.
  <question>{{{{question}}}}</question>
  <reply>{{{{reply}}}}</reply>
  Answer with a JSON object: {{"score": <0 to 1>, "reason": "<one sentence>"}}.
"""


def trace(trace_id: str, question: str = "where is my parcel?") -> tuple[bytes, bytes]:
    document = {
        "id": trace_id,
        "project_name": "support-bot",
        "name": "reply",
        "input": {"messages": [{"role": "user", "content": question}]},
        "output": {"messages": [{"role": "assistant", "content": f"About {question}: soon."}]},
    }
    return trace_id.encode(), orjson.dumps(document)


@pytest.fixture
def batch_api() -> Iterator[BatchDouble]:
    with BatchDouble(default='{"score": 0.75, "reason": "answered in the batch"}') as api:
        yield api


def trace_worker(
    broker: EmbeddedBroker, names: Names, tmp: Path, judge: MockJudge, api: BatchDouble, **env: str
) -> Worker:
    return batch_worker(broker, names, tmp, judge, api, RULE.format(max_jobs=3), **env)


PARTITIONS = 4  # SCORER_TOPIC_PARTITIONS' default


async def total_committed(bootstrap: str, names: Names) -> int:
    offsets = [await committed(bootstrap, names.group, names.traces, p) for p in range(PARTITIONS)]
    return sum(offset or 0 for offset in offsets)


async def test_a_batch_rule_is_scored_when_its_batch_completes(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    batch_api: BatchDouble,
) -> None:
    batch_api.steps = ["validating"] + ["in_progress"] * 400  # held until finish_soon()
    await ensure_topics(broker.bootstrap, [names.traces], PARTITIONS)
    worker = trace_worker(broker, names, tmp_path, judge, batch_api).start()
    workers.append(worker)
    await produce(broker.bootstrap, names.traces, [trace(f"t-batch-{i}") for i in range(3)])

    # each trace's decision says deferred; the batch is submitted once it holds 3 jobs
    decided = await decisions_of(broker.bootstrap, names.decisions, 3)
    outcomes = {d["trace_id"]: [x["outcome"] for x in d["decisions"]] for d in decided}
    assert outcomes == {f"t-batch-{i}": ["deferred"] for i in range(3)}
    assert "judged in a batch" in decided[0]["decisions"][0]["detail"]
    await wait_for(lambda: len(batch_api.batches) == 1, "the batch to be submitted")
    # pending durably: the source records are committed before any score exists
    await wait_for_async(lambda: total_committed(broker.bootstrap, names), 3, "the commit")
    assert await read_scores(broker.bootstrap, names.scores, until=lambda s: False, timeout=1) == []

    batch_api.finish_soon()
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
    assert sorted(s["target_id"] for s in scores) == [f"t-batch-{i}" for i in range(3)]
    batch = next(iter(batch_api.batches.values()))
    for score in scores:
        assert score["status"] == "ok" and score["value"] == 0.75
        assert score["reason"] == "answered in the batch"
        assert score["usage"]["batch"] is True
        assert score["details"]["batch"]["id"] == batch.id
        assert score["judge_model"] == "gpt-4o-mini"
    assert judge.requests == []  # no online call
    assert len(batch.lines) == 3
    assert batch_api.calls.count("POST /v1/batches") == 1
    later = await decisions_of(broker.bootstrap, names.decisions, 6)
    said = sorted((d["trace_id"], x["outcome"]) for d in later for x in d["decisions"])
    assert said == sorted((f"t-batch-{i}", o) for i in range(3) for o in ("deferred", "scored"))
    metrics = worker.metrics()
    assert 'scorer_batches_total{status="completed"} 1.0' in metrics
    assert 'scorer_batch_jobs_total{event="finished",pack="batchy",rule="reply_quality"} 3.0' in (
        metrics
    )

    # replayed: the verdicts kept from the batch answer it, no call and no batch
    await produce(broker.bootstrap, names.traces, [trace("t-batch-0")])
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 4)
    again = scores[-1]
    assert again["target_id"] == "t-batch-0" and again["details"]["cached"] is True
    assert again["score_id"] == next(s for s in scores if s["target_id"] == "t-batch-0")["score_id"]
    assert len(batch_api.batches) == 1 and judge.requests == []


async def wait_for_async(read_value: Any, expected: int, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = await read_value()
        if value == expected:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {value} != {expected}")


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
async def test_a_worker_killed_between_submit_and_completion_never_submits_twice(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    batch_api: BatchDouble,
    store: str,
) -> None:
    batch_api.steps = ["validating"] + ["in_progress"] * 400
    await ensure_topics(broker.bootstrap, [names.traces], PARTITIONS)
    # the jobs and their batch's id are written by the worker's timer, outside any record:
    # RocksDB's store needs them put in their partition's database (faust_state)
    first = trace_worker(broker, names, tmp_path, judge, batch_api, SCORER_STORE=store).start()
    workers.append(first)
    await produce(broker.bootstrap, names.traces, [trace(f"t-kill-{i}") for i in range(3)])
    await wait_for(lambda: len(batch_api.batches) == 1, "the batch to be submitted")
    await wait_for_async(lambda: total_committed(broker.bootstrap, names), 3, "the commit")
    await asyncio.sleep(1.0)  # the batch's id written to the table's changelog
    first.kill()

    # the next worker finds the jobs pending in the table and polls the same batch
    batch_api.finish_soon()
    second = trace_worker(broker, names, tmp_path, judge, batch_api, SCORER_STORE=store).start()
    workers.append(second)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
    assert sorted(s["target_id"] for s in scores) == [f"t-kill-{i}" for i in range(3)]
    assert len({s["score_id"] for s in scores}) == 3
    assert all(s["status"] == "ok" and s["usage"]["batch"] for s in scores)
    assert batch_api.calls.count("POST /v1/batches") == 1
    assert batch_api.calls.count("POST /v1/files") == 1
    assert judge.requests == []


async def test_a_batch_created_but_unrecorded_is_found_by_its_key(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    batch_api: BatchDouble,
) -> None:
    batch_api.steps = ["validating", "in_progress"]
    batch_api.lose_create_reply = True  # created, but the worker hears a 500
    worker = trace_worker(broker, names, tmp_path, judge, batch_api).start()
    workers.append(worker)
    await produce(broker.bootstrap, names.traces, [trace(f"t-lost-{i}") for i in range(3)])
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
    assert sorted(s["target_id"] for s in scores) == [f"t-lost-{i}" for i in range(3)]
    assert batch_api.calls.count("POST /v1/batches") == 1  # found by its key, not sent again
    assert "found by its key" in worker.log()
    assert judge.requests == []


async def test_failed_and_expired_items_are_asked_online_refused_ones_are_errors(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    batch_api: BatchDouble,
) -> None:
    batch_api.steps = ["validating", "in_progress"]
    batch_api.by_prompt = {
        "flaky question": ItemError(status=500),  # the provider's trouble: asked online
        "unreadable question": "not json at all",  # an unusable answer: asked online
        "refused question": ItemError("bad request body", status=400, code="invalid_request"),
    }
    judge.script("flaky question", '{"score": 0.5, "reason": "answered online"}')
    judge.script("unreadable question", '{"score": 0.25, "reason": "answered online"}')
    worker = trace_worker(broker, names, tmp_path, judge, batch_api).start()
    workers.append(worker)
    questions = ["flaky question", "unreadable question", "refused question"]
    await produce(
        broker.bootstrap,
        names.traces,
        [trace(f"t-item-{i}", q) for i, q in enumerate(questions)],
    )
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
    by_trace = {s["target_id"]: s for s in scores}
    flaky, unreadable, refused = (by_trace[f"t-item-{i}"] for i in range(3))
    assert flaky["status"] == "ok" and flaky["value"] == 0.5
    assert "judge error (500)" in flaky["details"]["batch"]["fallback"]
    assert flaky["usage"]["batch"] is False  # priced online: it was an online call
    assert unreadable["status"] == "ok" and unreadable["value"] == 0.25
    assert "unusable" in unreadable["details"]["batch"]["fallback"]
    assert refused["status"] == "error"
    assert "judge refused the request (400)" in refused["status_reason"]
    assert "bad request body" in refused["status_reason"]
    assert len(judge.requests) == 2

    # an expired batch: the jobs it did not reach are asked online
    batch_api.ending = "expired"
    batch_api.by_prompt = {}
    batch_api.unfinished = set()  # filled below: every job of the next batch
    original_finish = batch_api._finish

    def expire_all(batch: Any) -> None:
        batch_api.unfinished = {line["custom_id"] for line in batch.lines}
        original_finish(batch)

    batch_api._finish = expire_all  # type: ignore[method-assign]
    judge.script("late question", '{"score": 1.0, "reason": "answered online"}')
    await produce(
        broker.bootstrap, names.traces, [trace(f"t-late-{i}", "late question") for i in range(3)]
    )
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 6)
    late = [s for s in scores if s["target_id"].startswith("t-late-")]
    assert len(late) == 3 and all(s["status"] == "ok" and s["value"] == 1.0 for s in late)
    assert all("expired" in s["details"]["batch"]["fallback"] for s in late)


async def test_jobs_that_cannot_be_submitted_are_judged_online_after_the_give_up_time(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    batch_api: BatchDouble,
) -> None:
    """An endpoint (or model) without the Batch API refuses every create: the jobs are tried
    again each round, then judged by ordinary calls after SCORER_BATCH_GIVE_UP_S, saying
    why; nothing is created, nothing is lost."""
    batch_api.refuse_create = 400
    judge.script("where is my parcel", '{"score": 0.5, "reason": "answered online"}')
    worker = trace_worker(
        broker, names, tmp_path, judge, batch_api, SCORER_BATCH_GIVE_UP_S="2"
    ).start()
    workers.append(worker)
    refused = [trace(f"t-refused-{i}", f"where is my parcel {i}?") for i in range(3)]
    await produce(broker.bootstrap, names.traces, refused)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
    assert sorted(s["target_id"] for s in scores) == [f"t-refused-{i}" for i in range(3)]
    for score in scores:
        assert score["status"] == "ok" and score["value"] == 0.5
        assert score["usage"]["batch"] is False  # an ordinary call's price
        fallback = score["details"]["batch"]["fallback"]
        assert "submitting a batch of 3 requests for reply_quality failed" in fallback
        assert "SCORER_BATCH_GIVE_UP_S" in fallback
    assert batch_api.batches == {}
    assert batch_api.calls.count("POST /v1/batches") >= 2  # tried again before giving up
    assert "again next round" in worker.log()
