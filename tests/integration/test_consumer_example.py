"""The downstream-consumer contract: score events keyed by their target on the scores topic,
valid against the published JSON Schema, and the example consumer (docs/operations.md) stores each score
once however often it is delivered."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import jsonschema
import orjson
import pytest
from fixtures import live_trace
from scripted_judge import MockJudge

from stream.event_schema import SCHEMA_PATH
from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "consume_scores.py"
LIVE_PROMPT = "evaluating live guitar coach feedback quality"


def run_example(bootstrap: str, topic: str, db: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--bootstrap", bootstrap, "--topic", topic,
         "--db", str(db), "--idle", "3", "--group", f"sqlite-{topic}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow  # the example consumer end to end, ~35 s (make test-slow)
async def test_scores_are_keyed_by_target_valid_and_stored_once(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    judge.script(LIVE_PROMPT, '{"score": 3, "reason": "fine"}')
    workers.append(
        Worker(broker.bootstrap, names, tmp_path, OPENAI_BASE_URL=judge.base_url).start()
    )
    documents = []
    for i in range(6):
        document = live_trace()
        document["id"] = f"t-consumer-{i}"
        documents.append((document["id"].encode(), orjson.dumps(document)))
    await produce(broker.bootstrap, names.traces, documents)
    expected = 6 * 2  # two rules apply to a live-coach trace
    await read(broker.bootstrap, names.scores, until=lambda rs: len(rs) >= expected)
    # the same traces again (a producer retry, a replay): the same score ids come out again
    await produce(broker.bootstrap, names.traces, documents)
    records = await read(broker.bootstrap, names.scores, until=lambda rs: len(rs) >= 2 * expected)
    assert len(records) == 2 * expected

    schema = json.loads(SCHEMA_PATH.read_text())
    partitions = defaultdict(set)
    for record in records:
        event = orjson.loads(record.value)
        jsonschema.validate(event, schema)
        assert record.key == event["target_id"].encode()  # key = the trace or thread id
        partitions[event["target_id"]].add(record.partition)
    # every score of one target lands in one partition (in order, for a keyed store)
    assert all(len(p) == 1 for p in partitions.values())

    db = tmp_path / "scores.sqlite"
    assert "stored 24 score events" in await asyncio.to_thread(
        run_example, broker.bootstrap, names.scores, db
    )
    with sqlite3.connect(db) as store:
        rows = store.execute("select score_id, status, value, event from scores").fetchall()
    assert len(rows) == expected  # upserted on score_id: each score once
    assert {r[0] for r in rows} == {orjson.loads(r.value)["score_id"] for r in records}
    assert all(status == "ok" for _, status, _, _ in rows)
    # a second run of the same group reads nothing new: offsets were committed after the rows
    assert "stored 0 score events" in await asyncio.to_thread(
        run_example, broker.bootstrap, names.scores, db
    )
