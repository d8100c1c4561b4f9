"""Batch judging end to end beyond a trace rule (design record 25): a conversation rule in
``judge.mode: batch`` defers the close of a thread (its decision says deferred) and publishes
the thread's score with the close's ``thread`` facts when the batch completes, its decision
record a thread record of that close; and a spent ``defer`` budget on an online rule sends the
later traces to a batch, their scores saying ``details.budget`` mode defer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from batch_double import BatchDouble
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics

from .batch_workers import batch_worker, decisions_of, wait_for
from .harness import Names, Worker, produce, read_scores, trace_bytes

PARTITIONS = 4

CONVERSATION_RULE = """\
id: thread_coherence
pack: batchy
version: 1
scope: thread
kind: llm_judge
description: "Support conversations judged in batches"
thread:
  kind: conversation
  user: input.messages[-1].content
  assistant: output.messages[-1].content
  end: metadata.conversation_finished
variables:
  conversation:
    path: messages
    format: transcript
judge:
  mode: batch
  batch:
    max_jobs: 1
    max_wait_s: 600
output:
  type: numeric
  min: 1
  max: 5
  integer: true
prompt: |-
  Rate the coherence of this support conversation from 1 to 5.
  <conversation>{{conversation}}</conversation>
  Answer with a JSON object: {"score": <1 to 5>, "reason": "<one sentence>"}.
"""

ONLINE_RULE = """\
id: reply_quality
pack: batchy
version: 1
scope: trace
kind: llm_judge
description: "Support replies, online until the budget is spent"
filter:
  projects: [support-bot]
variables:
  question: input.messages[-1].content
  reply: output.messages[-1].content
judge:
  batch:
    max_jobs: 2
    max_wait_s: 600
output:
  type: numeric
  min: 0
  max: 1
prompt: |-
  Rate how well the reply answers the question, from 0 to 1.
  <question>{{question}}</question>
  <reply>{{reply}}</reply>
  Answer with a JSON object: {"score": <0 to 1>, "reason": "<one sentence>"}.
"""


def turn(n: int, user: str, assistant: str, finished: bool = False) -> dict[str, Any]:
    return {
        "id": f"conv-trace-{n}",
        "name": "support-turn",
        "project_name": "support-bot",
        "thread_id": "ticket-77",
        "input": {"messages": [{"role": "user", "content": user}]},
        "output": {"messages": [{"role": "assistant", "content": assistant}]},
        "start_time": (datetime.now(UTC) + timedelta(milliseconds=n)).isoformat(),
        "metadata": {"conversation_finished": finished},
    }


def keyed(document: dict[str, Any]) -> tuple[bytes, bytes]:
    """A turn keyed by its thread id, as a thread's traces are best sent (one partition, in
    order: the thread waits for no other partition)."""
    return document["thread_id"].encode(), orjson.dumps(document)


async def test_a_batch_conversation_rule_scores_the_close_when_its_batch_completes(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
) -> None:
    with BatchDouble(default='{"score": 4, "reason": "coherent, in a batch"}') as api:
        api.steps = ["validating"] + ["in_progress"] * 400  # held until finish_soon()
        await ensure_topics(broker.bootstrap, [names.traces], PARTITIONS)
        worker = batch_worker(
            broker, names, tmp_path, judge, api, CONVERSATION_RULE, SCORER_THREAD_TICK_S="0.3"
        ).start()
        workers.append(worker)
        await produce(
            broker.bootstrap,
            names.traces,
            [
                keyed(turn(0, "My parcel never came.", "Sorry! Its number?")),
                keyed(turn(1, "It is 4411.", "Redelivering 4411.", finished=True)),
            ],
        )
        # the close (its end marker) is deferred: a thread decision record saying so
        decided = await decisions_of(broker.bootstrap, names.decisions, 3)
        closes = [d for d in decided if d.get("thread_id") == "ticket-77"]
        assert len(closes) == 1, worker.log()[-4000:]
        (close,) = closes
        assert (close["kind"], close["close_seq"]) == ("conversation", 1)
        ((deferred,),) = [close["decisions"]]
        assert deferred["outcome"] == "deferred" and deferred["score_id"] is None
        assert "judged in a batch" in deferred["detail"]
        await wait_for(lambda: len(api.batches) == 1, "the batch to be submitted")
        assert (
            await read_scores(broker.bootstrap, names.scores, until=lambda s: False, timeout=1)
            == []
        )

        api.finish_soon()
        (score,) = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 1)
        batch = next(iter(api.batches.values()))
        assert (score["target_id"], score["scope"], score["status"]) == (
            "ticket-77",
            "thread",
            "ok",
        )
        assert (score["raw_value"], score["reason"]) == (4, "coherent, in a batch")
        assert score["thread"]["close_seq"] == 1 and score["thread"]["kind"] == "conversation"
        assert (score["thread"]["close_reason"], score["thread"]["turn_count"]) == ("end", 2)
        assert score["usage"]["batch"] is True
        assert score["details"]["batch"]["id"] == batch.id
        (line,) = batch.lines
        prompt = line["body"]["messages"][-1]["content"]
        assert "User: My parcel never came." in prompt and "Redelivering 4411." in prompt
        assert judge.requests == []

        later = await decisions_of(broker.bootstrap, names.decisions, 4)
        thread_records = [d for d in later if d.get("thread_id") == "ticket-77"]
        assert [(d["kind"], d["close_seq"]) for d in thread_records] == [("conversation", 1)] * 2
        scored = thread_records[1]["decisions"]
        assert [(d["outcome"], d["score_id"]) for d in scored] == [("scored", score["score_id"])]


def support_trace(trace_id: str, question: str) -> tuple[bytes, bytes]:
    return trace_bytes(
        {
            "id": trace_id,
            "project_name": "support-bot",
            "name": "reply",
            "input": {"messages": [{"role": "user", "content": question}]},
            "output": {"messages": [{"role": "assistant", "content": f"About {question}: soon."}]},
        }
    )


async def test_a_spent_defer_budget_sends_an_online_rule_to_a_batch(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
) -> None:
    judge.script("first question", '{"score": 0.5, "reason": "answered online"}')
    budget = [{"rule": "reply_quality", "usd": 0.000001, "mode": "defer"}]
    with BatchDouble(default='{"score": 0.75, "reason": "answered in the batch"}') as api:
        api.steps = ["validating", "in_progress"]
        await ensure_topics(broker.bootstrap, [names.traces], PARTITIONS)
        worker = batch_worker(
            broker,
            names,
            tmp_path,
            judge,
            api,
            ONLINE_RULE,
            SCORER_JUDGE_BUDGETS=orjson.dumps(budget).decode(),
        ).start()
        workers.append(worker)
        # the first trace is judged online and spends the whole budget
        await produce(broker.bootstrap, names.traces, [support_trace("t-0", "first question")])
        (first,) = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 1)
        assert (first["target_id"], first["status"], first["value"]) == ("t-0", "ok", 0.5)
        assert first["usage"]["batch"] is False and "budget" not in (first["details"] or {})
        assert len(judge.requests) == 1

        # the next ones are deferred (the budget's why) and scored from the batch
        await produce(
            broker.bootstrap,
            names.traces,
            [support_trace("t-1", "second question"), support_trace("t-2", "third question")],
        )
        decided = await decisions_of(broker.bootstrap, names.decisions, 3)
        later = {d["trace_id"]: d["decisions"] for d in decided if d["trace_id"] != "t-0"}
        for trace_id in ("t-1", "t-2"):
            (decision,) = later[trace_id]
            assert decision["outcome"] == "deferred"
            assert decision["detail"].startswith("rule reply_quality: $1e-06 per day is spent")
        scores = await read_scores(broker.bootstrap, names.scores, until=lambda s: len(s) >= 3)
        batched = {s["target_id"]: s for s in scores if s["target_id"] != "t-0"}
        assert sorted(batched) == ["t-1", "t-2"]
        (batch,) = api.batches.values()
        assert len(batch.lines) == 2
        for score in batched.values():
            assert (score["status"], score["value"]) == ("ok", 0.75)
            assert score["usage"]["batch"] is True
            assert score["details"]["budget"] == {
                "mode": "defer",
                "budget": "rule reply_quality: $1e-06 per day",
            }
            assert score["details"]["batch"]["id"] == batch.id
        assert len(judge.requests) == 1  # nothing more asked online
