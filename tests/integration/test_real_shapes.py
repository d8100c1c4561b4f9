"""Traces in the shapes real exports have, through a real worker: nulls, tool calls, content
as parts, names the packs do not know. Nothing valid is dead-lettered, the seed's
missing-context cases are judged, a rule that matches nothing says so, and ``scorer
explain`` on the same file agrees with the worker's decisions."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import orjson
from fixtures import RULES_DIR, hub_trace
from scripted_judge import MockJudge

from stream.explain import WOULD_JUDGE, explain_trace
from stream.kafka.broker import EmbeddedBroker
from stream.ruleset.loader import load_rules

from .harness import Names, Worker, produce, read

SHAPES = Path(__file__).parent.parent / "data" / "shapes"
HUB_RULES = {
    "hub_actionability",
    "hub_answer_correctness",
    "hub_context_usage_quality",
    "hub_data_groundedness",
    "hub_response_clarity",
}


def mixed_traces() -> list[dict]:
    tool_call = orjson.loads((SHAPES / "openai_tool_calls.json").read_bytes())
    opik = orjson.loads((SHAPES / "opik_trace_export.json").read_bytes())
    documents = [opik]
    for i in range(4):
        call = copy.deepcopy(tool_call)
        call["id"], call["thread_id"] = f"tool-call-{i}", None
        documents.append(call)
    for i in range(4):
        nulls = hub_trace(i)
        nulls["id"] = f"nulls-{i}"
        nulls["metadata"] = nulls["tags"] = nulls["thread_id"] = None
        documents.append(nulls)
    for i in range(3):
        parts = hub_trace(i)
        parts["id"] = f"parts-{i}"
        final = parts["output"]["messages"][-1]
        final["content"] = [{"type": "text", "text": final["content"]}]
        documents.append(parts)
    for i in range(25):  # a name the seed does not define, last, on one partition
        other = hub_trace(i % 3)
        other["id"], other["name"] = f"other-name-{i}", "hub-chat-v2"
        documents.append(other)
    return documents


async def test_real_shapes_through_a_worker(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    documents = mixed_traces()
    with MockJudge() as judge:
        worker = Worker(
            broker.bootstrap,
            names,
            tmp_path,
            OPENAI_BASE_URL=judge.base_url,
            OPENAI_API_KEY="sk-test",
            SCORER_SILENT_AFTER_TRACES="20",
        ).start()
        workers.append(worker)
        # one key: one partition, in this order (the other names come last)
        await produce(
            broker.bootstrap, names.traces, [(b"mixed", orjson.dumps(d)) for d in documents]
        )
        records = await read(
            broker.bootstrap,
            names.decisions,
            until=lambda rs: len(rs) >= len(documents),
            timeout=120,
        )
        scores = [
            orjson.loads(r.value)
            for r in await read(broker.bootstrap, names.scores, until=lambda rs: False, timeout=3)
        ]
        dead = await read(broker.bootstrap, names.dlq, until=lambda rs: False, timeout=2)

    assert dead == []  # every trace is valid, nulls and all
    decided = {d["trace_id"]: d for d in (orjson.loads(r.value) for r in records)}
    assert set(decided) == {d["id"] for d in documents}

    # the tool-call shape: every hub rule judged, none skipped (the seed rules on it)
    for i in range(4):
        hub = [
            s for s in scores if s["target_id"] == f"tool-call-{i}" and s["rule_id"] in HUB_RULES
        ]
        assert {s["rule_id"] for s in hub} == HUB_RULES
        assert {s["status"] for s in hub} == {"ok"}, [s["status_reason"] for s in hub]
    for prefix in ("nulls-", "parts-"):
        judged = [
            s for s in scores if s["target_id"].startswith(prefix) and s["rule_id"] in HUB_RULES
        ]
        assert judged and {s["status"] for s in judged} == {"ok"}

    # the unknown name: filtered, saying why, and reported once as silent
    other = {d["rule_id"]: d for d in decided["other-name-0"]["decisions"]}
    assert other["hub_answer_correctness"]["outcome"] == "filtered"
    assert other["hub_answer_correctness"]["detail"] == (
        "filter.trace_names ['hub-coach-chat']: name is 'hub-chat-v2'"
    )
    for _ in range(40):
        log = worker.log()
        if "fretcoach/hub_answer_correctness matched none of the last 20 traces" in log:
            break
        await asyncio.sleep(0.25)
    warning = next(
        line for line in log.splitlines() if "hub_answer_correctness matched none" in line
    )
    assert "name 'hub-chat-v2' in project 'fretcoach' (20)" in warning
    assert log.count("hub_answer_correctness matched none") == 1
    assert (
        'scorer_rule_silent{pack="fretcoach",rule="hub_answer_correctness"} 1.0' in worker.metrics()
    )

    # scorer explain, on the same traces, decides as the worker did
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    for document in documents:
        _, explained = explain_trace(ruleset, orjson.dumps(document), names.traces, "gpt-4o-mini")
        worker_said = {d["rule_id"]: d["outcome"] for d in decided[document["id"]]["decisions"]}
        assert {e.rule_id for e in explained} == set(worker_said)
        for e in explained:
            if e.outcome == WOULD_JUDGE:
                assert worker_said[e.rule_id] in ("scored", "error"), (document["id"], e)
            else:
                assert worker_said[e.rule_id] == e.outcome, (document["id"], e)
