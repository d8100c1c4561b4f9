"""The seed packs through a real worker and broker: a critique rubric on a trace and the
coaching rubric on a closed transcript session, every score on the scores topic."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_worker import start

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
COACHING_IDS = [
    "CQ1",
    "CQ2",
    "CQ3",
    "CQ6",
    "CQ8",
    "CQ9",
    "CP2",
    "CP4",
    "CP5",
    "MT1",
    "MT2",
    "MT3",
    "MT6",
    "MT4",
    "MT5",
]
DIMENSIONS = [
    "requirements_compliance",
    "technical_accuracy",
    "code_quality",
    "completeness_focus",
    "presentation_clarity",
    "safety",
]


def transcript_turn(session: str, seq: int, user: str, assistant: str) -> tuple[bytes, bytes]:
    event = {
        "session_id": session,
        "type": "turn",
        "seq": seq,
        "timestamp": (T0 + timedelta(minutes=seq)).isoformat(),
        "project_name": "coaching",
        "user": user,
        "assistant": assistant,
    }
    return session.encode(), orjson.dumps(event)


async def test_rubric_packs_publish_every_score_through_the_worker(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    coaching = {c: {"reason": "fine", "answer": "YES"} for c in COACHING_IDS}
    coaching["CQ8"] = {"reason": "diagnoses the user", "answer": "NO"}
    critique = {d: {"reason": "fine", "rating": 3} for d in DIMENSIONS}
    critique["safety"] = {"reason": "hardcoded credentials", "rating": 1}
    judge.script("coaching conversation", orjson.dumps(coaching).decode())
    judge.script("rating one AI-generated response", orjson.dumps(critique).decode())
    worker = start(
        workers,
        broker,
        names,
        tmp_path,
        judge,
        SCORER_PACKS='["critique", "coaching"]',
        SCORER_THREAD_TICK_S="0.3",
    )
    trace = {
        "id": "t-critique-1",
        "project_name": "code-assistant",
        "input": {"messages": [{"role": "user", "content": "Connect to Postgres in Python."}]},
        "output": {"messages": [{"role": "assistant", "content": "Great question! Use psycopg."}]},
    }
    await produce(broker.bootstrap, names.traces, [trace_bytes(trace)])
    turns = [
        transcript_turn("coach-1", 1, "Work is crushing me.", "What part weighs most?"),
        transcript_turn("coach-1", 2, "Emails at midnight.", "You clearly have clinical anxiety."),
    ]
    end = (
        b"coach-1",
        orjson.dumps(
            {"session_id": "coach-1", "type": "end", "seq": 3, "timestamp": T0.isoformat()}
        ),
    )
    await produce(broker.bootstrap, names.sessions, [*turns, end])

    expected = 1 + 7 + 3 + 23  # pleasantries; 6 dimensions + overall; 3 helpers; 15 + 8
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda rs: len(rs) >= expected, timeout=60
    )
    await asyncio.sleep(2)  # nothing more arrives: read everything again
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=3)
    by = {(s["rule_id"], s["criterion"]): s for s in scores}
    assert len(by) == len(scores) == expected
    overall = by[("response_critique", "overall")]
    assert (overall["label"], overall["status"], overall["target_id"]) == (
        "Inadequate",
        "ok",
        "t-critique-1",
    )
    assert by[("pleasantries", None)]["label"] == "Minor Issues"
    final = by[("coaching_transcript", "score")]
    assert final["scope"] == "thread" and final["target_id"] == "coach-1"
    assert final["label"] == "fail" and final["details"]["failed_safety"] == ["CQ8"]
    assert final["value"] == 1.0  # a perfect score, rejected by the safety gate
    assert by[("coaching_transcript", "MT4")]["label"] == "NA"  # 2 exchanges
    assert by[("coaching_question_endings", None)]["raw_value"] == 0.5
    body = worker.metrics()
    assert (
        sample_value(
            body,
            "scorer_scores_total",
            rule="coaching_transcript",
            pack="coaching",
            criterion="gate",
            status="ok",
        )
        == 1.0
    )
