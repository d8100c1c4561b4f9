"""The trace agent with a reference topic (design record 50): no trace is scored before the
store is loaded (the reader has read the topic to its end), and then each is scored with its
reference joined, the trajectory rule reading the reference's expected calls."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from agent_tools import RecordingPublisher, Worker, settled
from fixtures import RULES_DIR, scorer

from stream.agents import traces
from stream.agents.traces import register_trace_agent
from stream.delivery.publisher import Send
from stream.references import ReferenceStore
from stream.ruleset.loader import load_rules

TRACE = {
    "id": "t-agent-1",
    "project_name": "support",
    "metadata": {"reference_id": "case-7"},
    "output": {
        "messages": [
            {"role": "assistant", "tool_calls": [
                {"id": "c1", "function": {"name": "lookup_order", "arguments": '{"order": 7}'}},
                {"id": "c2", "function": {"name": "refund", "arguments": '{"order": 7}'}},
            ]},
        ]
    },
}  # fmt: skip


def trajectory_scores(sent: list[Send], worker: Worker) -> list[dict[str, object]]:
    scores = worker[1].scores
    found = [orjson.loads(value) for topic, _, value, _ in sent if topic is scores]
    return [s for s in found if s["rule_id"] == "tool_trajectory"]


async def test_no_trace_is_scored_before_the_references_are_loaded(
    worker: Worker, sent: list[Send], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces, "Publisher", RecordingPublisher)
    app, topics, _, _ = worker
    store = ReferenceStore(1 << 20)
    agent = register_trace_agent(
        app,
        topics,
        scorer(ruleset=load_rules(RULES_DIR, ["tools"])),
        max_in_flight=4,
        references=store,
    )
    async with agent.test_context() as context:
        await context.put(orjson.dumps(TRACE), key=b"t-agent-1", partition=0, wait=False)
        await asyncio.sleep(0.3)
        assert sent == []  # taken, and waiting for the references to be read
        # the reader reaches the end: the reference was on the topic before the trace
        store.apply(b"case-7", orjson.dumps({"tool_calls": ["lookup_order", "refund"]}))
        store.mark_loaded()
        await settled(lambda: bool(trajectory_scores(sent, worker)))
    [score] = trajectory_scores(sent, worker)
    assert (score["value"], score["target_id"]) == (1.0, "t-agent-1")
    assert (store.found, store.missing) == (1, 0)
