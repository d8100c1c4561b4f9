"""The reference topic through a real worker and broker (design record 50): references
published before the worker starts are read to the end before it scores; a trace naming one
gets it joined and the tools pack's trajectory rule scores it; a tombstoned one is gone; a
record that is no reference is logged and counted; a trace carrying its expected calls in its
metadata needs no reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.metrics import sample_value

from .batch_workers import decisions_of
from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_worker import start


def agent_trace(trace_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """An agent that looked order 7 up, then refunded it."""
    calls = [
        {"id": f"{trace_id}-1", "function": {"name": "lookup_order", "arguments": '{"order": 7}'}},
        {"id": f"{trace_id}-2", "function": {"name": "refund", "arguments": '{"order": 7}'}},
    ]
    return {
        "id": trace_id,
        "project_name": "support",
        "metadata": metadata,
        "output": {"messages": [{"role": "assistant", "content": None, "tool_calls": calls}]},
    }


async def test_a_reference_published_before_the_worker_is_joined_and_scored(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    references = f"references-{names.suffix}"
    await ensure_topics(broker.bootstrap, [references], 1)
    exact = {"tool_calls": {"calls": ["lookup_order", "refund"], "match": "exact"}}
    await produce(
        broker.bootstrap,
        references,
        [
            (b"case-1", orjson.dumps(exact)),
            (b"case-2", orjson.dumps(exact)),
            (b"case-3", b'{"tool_calls": '),  # no reference: logged and counted
            (b"case-2", None),  # a tombstone: case-2 is gone
        ],
    )
    worker = start(
        workers,
        broker,
        names,
        tmp_path,
        None,
        SCORER_PACKS='["tools"]',
        SCORER_REFERENCES_TOPIC=references,
    )
    traces = [
        agent_trace("t-ref", {"reference_id": "case-1"}),
        agent_trace("t-meta", {"expected_tool_calls": ["refund", "lookup_order"]}),
        agent_trace("t-gone", {"reference_id": "case-2"}),
    ]
    await produce(broker.bootstrap, names.traces, [trace_bytes(t) for t in traces])

    decided = await decisions_of(broker.bootstrap, names.decisions, 3)
    outcomes = {
        message["trace_id"]: d["outcome"]
        for message in decided
        for d in message["decisions"]
        if d["rule_id"] == "tool_trajectory"
    }
    assert outcomes == {"t-ref": "scored", "t-meta": "scored", "t-gone": "filtered"}
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: len([s for s in rs if s["rule_id"] == "tool_trajectory"]) >= 2,
        timeout=30,
    )
    trajectory = {s["target_id"]: s for s in scores if s["rule_id"] == "tool_trajectory"}
    assert trajectory["t-ref"]["value"] == 1.0
    assert trajectory["t-ref"]["reason"].startswith("exact: ")  # the reference's own mode
    assert trajectory["t-meta"]["value"] == 0.0  # in order, the default: refund came last
    assert "step 1 (lookup_order)" in trajectory["t-meta"]["reason"]

    body = worker.metrics()
    assert sample_value(body, "scorer_references_loaded") == 1.0
    assert sample_value(body, "scorer_references_entries") == 1.0
    assert sample_value(body, "scorer_references_dropped_total", reason="invalid") == 1.0
    assert sample_value(body, "scorer_references_lookups_total", outcome="found") == 1.0
    assert sample_value(body, "scorer_references_lookups_total", outcome="missing") == 2.0
    log = worker.log()
    assert f"{references} partition 0 offset 2 is not taken as a reference" in log
    assert "references: 1 read from" in log


@pytest.mark.parametrize("topic", ["", "absent"], ids=["no reference topic", "a topic not created"])
async def test_a_trace_carrying_its_expected_calls_needs_no_reference(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    topic: str,
) -> None:
    """With no reference topic (the default), or one nobody has created yet (the worker
    creates it, finds it empty and scores at once), the expected calls in a trace's metadata
    are all the trajectory rule needs."""
    references = f"references-{names.suffix}" if topic else ""
    worker = start(
        workers,
        broker,
        names,
        tmp_path,
        None,
        SCORER_PACKS='["tools"]',
        SCORER_REFERENCES_TOPIC=references,
    )
    expected = {"calls": ["refund", "lookup_order"], "match": "any_order"}
    trace = agent_trace("t-meta", {"expected_tool_calls": expected})
    await produce(broker.bootstrap, names.traces, [trace_bytes(trace)])
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: any(s["rule_id"] == "tool_trajectory" for s in rs),
        timeout=30,
    )
    [score] = [s for s in scores if s["rule_id"] == "tool_trajectory"]
    assert score["value"] == 1.0 and score["reason"].startswith("any_order: ")
    loaded = sample_value(worker.metrics(), "scorer_references_loaded")
    assert loaded == (1.0 if topic else 0.0)  # no series at all without a topic
    if topic:
        assert "references: 0 read from" in worker.log()
        assert f"references: created {references}" in worker.log()
