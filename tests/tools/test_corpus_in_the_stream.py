"""The labelled set of 200 calls (``call_corpus``) as agents' traces in the trace model, scored
by the shipped ``tools`` pack through the engine as a worker scores them: every call's five
scores give the labels the set says, with the reasons' fragments; none quotes a value."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
from call_corpus import CHECKS, MARK, Labelled, labelled_calls
from fixtures import RULES_DIR
from prometheus_client import CollectorRegistry

from stream.engine.scorer import Scorer
from stream.metrics import ScorerMetrics
from stream.models import Trace
from stream.ruleset.loader import load_rules
from stream.tools.model import ToolCall

RULE_OF = {check: f"tool_{check}" for check in CHECKS} | {"tool_declared": "tool_declared"}


def trace_document(calls: list[ToolCall]) -> dict[str, Any]:
    """The calls of one trace as OpenAI's chat API carries them: the request's ``tools``; an
    assistant message per turn with its ``tool_calls``, each answered by a ``tool`` message
    (``status: error`` with the error as its content where the call failed, as LangChain's
    ToolMessage says it)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "help me"}]
    by_turn: dict[int, list[ToolCall]] = defaultdict(list)
    for call in calls:
        by_turn[call.turn].append(call)
    for turn in sorted(by_turn):
        made = by_turn[turn]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": c.call_id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in made
                ],
            }
        )  # fmt: skip
        for c in made:
            answer = {"role": "tool", "tool_call_id": c.call_id, "content": f"done {c.position}"}
            if c.error is not None:
                answer |= {"content": c.error, "status": "error"}
            messages.append(answer)
    declared = [
        {"type": "function", "function": {"name": d.name, "description": d.description,
                                          "parameters": d.parameters}}
        for d in calls[0].declared
    ]  # fmt: skip
    return {
        "id": calls[0].trace_id,
        "project_name": "agents",
        "input": {"messages": messages[:1], **({"tools": declared} if declared else {})},
        "output": {"messages": messages[1:]},
    }


async def test_the_labelled_set_scored_in_the_stream_gives_every_label() -> None:
    corpus = labelled_calls()
    traces: dict[str, list[Labelled]] = defaultdict(list)
    for labelled in corpus:
        traces[labelled.call.trace_id].append(labelled)
    scorer = Scorer(
        load_rules(RULES_DIR, ["tools"]),
        None,
        default_model="gpt-4o-mini",
        observer=ScorerMetrics(CollectorRegistry()),
    )
    wrong, scored = [], 0
    for trace_id, labelled in traces.items():
        document = orjson.loads(orjson.dumps(trace_document([item.call for item in labelled])))
        result = await scorer.score_trace(Trace.model_validate(document), document)
        scores = {(s.target_id, s.rule_id): s for s in result.scores}
        for item in labelled:
            for check in CHECKS:
                score = scores[(item.call.call_id, RULE_OF[check])]
                scored += 1
                label = score.label if score.status == "ok" else score.status
                said = score.reason or score.status_reason or ""
                assert MARK not in said
                if label != item.labels[check] or item.reasons.get(check, "") not in said:
                    wrong.append((trace_id, item.kind, check, label, said))
        assert len(scores) == 5 * len(labelled)  # nothing else: one score per call and rule
    assert scored == 1000
    assert not wrong, wrong[:5]
