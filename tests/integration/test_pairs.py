"""Response comparison end to end: two traces of one comparison key, joined in the stream by
a real worker on the embedded broker, judged once by a scripted judge; a pair waiting for its
partner survives kill -9; a pair whose partner never comes is skipped when its window ends."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml
from fixtures import RULES_DIR
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read, read_scores, trace_bytes
from .test_packs import DIMENSIONS
from .test_worker import start

COMPARISON = "comparing two AI-generated responses"
CRITIQUE = "rating one AI-generated response"


def ratings(value: int) -> dict[str, Any]:
    return {d: {"reason": f"{d} fine", "rating": value} for d in DIMENSIONS}


def trace(trace_id: str, key: str, variant: str, answer: str) -> dict[str, Any]:
    return {
        "id": trace_id,
        "project_name": "code-assistant",
        "name": "chat",
        "start_time": datetime.now(UTC).isoformat(),
        "input": {"messages": [{"role": "user", "content": f"Reverse a string ({key})."}]},
        "output": {"messages": [{"role": "assistant", "content": answer}]},
        "metadata": {"comparison_id": key, "variant": variant},
    }


def rules_with_window(tmp: Path, window_s: float) -> Path:
    """The critique pack with a short pair window (the shipped one is 10 minutes)."""
    target = tmp / "rules"
    shutil.copytree(RULES_DIR / "critique", target / "critique")
    path = target / "critique" / "response_comparison.yaml"
    data = yaml.safe_load(path.read_text())
    data["pair"]["window_s"] = window_s
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000))
    return target


async def wait_for(worker: Worker, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in worker.scrape():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        await asyncio.sleep(0.3)


async def test_a_pair_is_joined_across_a_kill_and_judged_once_and_a_lone_trace_times_out(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    answer = {
        "prompt_summary": "Reverse a string.",
        "response_a": {**ratings(3), "overall_quality": "Excellent"},
        "response_b": {**ratings(2), "overall_quality": "Inadequate"},
        "preference": 2,
        "justification": "Response A is significantly better: it is correct and direct.",
        "key_differentiators": ["B wanders"],
    }
    judge.script(COMPARISON, orjson.dumps(answer).decode())
    judge.script(CRITIQUE, orjson.dumps(ratings(3)).decode())
    env = {
        "SCORER_PACKS": '["critique"]',
        # the copy in place of the shipped critique pack (a pack name is found once)
        "SCORER_RULES_DIR": f"{rules_with_window(tmp_path, 12.0)}{os.pathsep}no-shipped-packs",
        "SCORER_THREAD_TICK_S": "0.3",
    }
    first = start(workers, broker, names, tmp_path, judge, **env)
    waiting = [
        trace("t-b", "cmp-1", "B", "Great question! Here it is: s[::-1]. Hope this helps!"),
        trace("t-lone", "cmp-2", "A", "s[::-1]"),
    ]
    await produce(broker.bootstrap, names.traces, [trace_bytes(t) for t in waiting])
    await wait_for(first, 'scorer_pair_traces_total{outcome="paired"} 2.0')
    second_b = trace("t-b2", "cmp-1", "B", "a second B: the pair has one, it is ignored")
    await produce(broker.bootstrap, names.traces, [trace_bytes(second_b)])
    await wait_for(first, 'scorer_pair_traces_total{outcome="ignored"} 1.0')
    await asyncio.sleep(2)  # the table's changelog writes reach the broker (Faust: each second)
    first.kill()  # kill -9: the waiting pairs are only in the table's changelog

    start(workers, broker, names, tmp_path, judge, **env)
    partner = trace("t-a", "cmp-1", "A", "def reverse(text):\n    return text[::-1]")
    await produce(broker.bootstrap, names.traces, [trace_bytes(partner)])

    def pair_scores(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in records if s["rule_id"] == "response_comparison"]

    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: {s["target_id"] for s in pair_scores(rs)} >= {"cmp-1", "cmp-2"},
        timeout=120,
    )
    await asyncio.sleep(2)  # nothing more comes (the pair is judged once)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=2)
    compared = pair_scores(scores)
    by_id = {s["score_id"]: s for s in compared}
    assert len(by_id) == 1 + 7 + 7 + 1, [
        (s["target_id"], s["criterion"], s["status"], s.get("status_reason")) for s in compared
    ]
    preference = next(
        s for s in by_id.values() if s["target_id"] == "cmp-1" and s["criterion"] == "preference"
    )
    assert (preference["scope"], preference["raw_value"], preference["value"]) == ("pair", 2.0, 1.0)
    assert preference["label"] == "Response A is significantly better (multiple major advantages)"
    assert preference["details"]["variants"] == {"A": "t-a", "B": "t-b"}
    assert preference["details"]["prompt_summary"] == "Reverse a string."
    # the Excellent A preferred over the Inadequate B: nothing contradicts
    assert preference["details"]["ranking_contradicts_ratings"] is False
    overall = {s["target_id"]: s["label"] for s in by_id.values() if s["criterion"] == "overall"}
    assert overall == {"t-a": "Excellent", "t-b": "Inadequate"}  # six minor issues
    lone = next(s for s in by_id.values() if s["target_id"] == "cmp-2")
    assert lone["status"] == "skipped"
    assert lone["status_reason"].startswith("partner missing: comparison 'cmp-2' has variant A")
    # one judge call for the pair, whose prompt shows A's answer before B's
    (prompt,) = [p for p in judge.prompts() if COMPARISON in p]
    assert prompt.index("def reverse(text)") < prompt.index("Here it is: s[::-1]")
    assert "## Prompt of Response B\n\nUser: Reverse a string (cmp-1).\n\n" in prompt

    records = await read(
        broker.bootstrap,
        names.decisions,
        until=lambda rs: (
            {"t-a", "t-b", "t-b2"}
            <= {
                r.key.decode()
                for r in rs
                if any(
                    d["rule_id"] == "response_comparison"
                    for d in orjson.loads(r.value)["decisions"]
                )
            }
        ),
    )
    about: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        for decision in orjson.loads(record.value).get("decisions", []):
            if decision["rule_id"] == "response_comparison":
                about.setdefault(record.key.decode(), []).append(decision)
    assert {d["outcome"] for d in about["t-a"]} == {"scored"}
    assert {d["score_id"] for d in about["t-b"]} == {preference["score_id"]}
    assert {d["outcome"] for d in about["t-b2"]} == {"filtered"}
    assert {d["outcome"] for d in about["t-lone"]} == {"skipped"}
