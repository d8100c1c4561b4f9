"""Turns of 0.7, 1.2 and 2 MB through a worker: each is cut on the way in (a marker, the bytes
counted), its thread closes and is scored, and the worker stays up with its partitions moving."""

from __future__ import annotations

from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from scripted_judge import MockJudge, script_frustration

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, read, read_scores
from .test_threads import (
    COHERENCE,
    EFFECTIVENESS,
    FAST,
    chat,
    session_end,
    session_turn,
)
from .test_worker import start

SIZES = {"s07": 700_000, "s12": 1_200_000, "s20": 2_000_000}


async def produce_large(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=4_000_000)
    await producer.start()
    try:
        for key, value in messages:
            await (await producer.send(topic, key=key, value=value))
    finally:
        await producer.stop()


async def test_large_turns_are_cut_and_scored_and_the_worker_lives_on(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    with MockJudge() as judge:
        judge.script(COHERENCE, '{"score": 0.9, "reason": "coherent"}')
        judge.script(EFFECTIVENESS, '{"score": 1.0, "reason": "improved"}')
        script_frustration(judge, 0.2, "calm")
        worker = start(
            workers, broker, names, tmp_path, judge, SCORER_THREAD_INACTIVITY_GAP_S="3", **FAST
        )
        sessions, traces = [], []
        for name, size in SIZES.items():
            turn = session_turn(f"session-{name}", 1, 0.6, feedback="slow down " * (size // 10))
            sessions += [turn, session_end(f"session-{name}")]
            trace = chat(f"conv-{name}", 0, finished=True)
            trace["output"]["messages"][-1]["content"] = "x" * size
            traces.append(trace)
        await produce_large(
            broker.bootstrap,
            names.sessions,
            [(e["session_id"].encode(), orjson.dumps(e)) for e in sessions],
        )
        await produce_large(
            broker.bootstrap, names.traces, [(t["id"].encode(), orjson.dumps(t)) for t in traces]
        )
        # and the partitions move on: small traces after the large ones are scored too
        after = [chat(f"after-{i}", 0, finished=True) for i in range(3)]
        await produce_large(
            broker.bootstrap, names.traces, [(t["id"].encode(), orjson.dumps(t)) for t in after]
        )
        targets = {f"session-{n}" for n in SIZES} | {f"conv-{n}" for n in SIZES}
        targets |= {f"after-{i}" for i in range(3)}
        scores = await read_scores(
            broker.bootstrap,
            names.scores,
            until=lambda rs: {s["target_id"] for s in rs if s["scope"] == "thread"} >= targets,
            timeout=120,
        )
    threads = [s for s in scores if s["scope"] == "thread"]
    for name, size in SIZES.items():
        for target in (f"session-{name}", f"conv-{name}"):
            found = [s for s in threads if s["target_id"] == target]
            assert found and {s["status"] for s in found} == {"ok"}, found
            cut = {s["thread"]["truncated_bytes"] for s in found}
            assert len(cut) == 1 and cut.pop() > size - 70_000, (target, found[0]["thread"])
    # the judge saw the marker, not megabytes
    assert all(len(p) < 200_000 for p in judge.prompts())
    assert any("bytes cut by the scorer" in p for p in judge.prompts())
    assert worker.process is not None and worker.process.poll() is None  # alive
    assert "Traceback" not in worker.log()


async def test_a_large_invalid_message_is_dead_lettered_and_the_partition_moves(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    start(workers, broker, names, tmp_path, None)
    broken = b'{"id": "broken", "output": "' + b"x" * 2_000_000  # not JSON, 2 MB
    after = chat("after-broken", 0)
    await produce_large(
        broker.bootstrap,
        names.traces,
        [(b"same", broken), (b"same", orjson.dumps(after))],
    )
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: any(s["target_id"] == after["id"] for s in rs),
        timeout=60,
    )
    assert any(s["target_id"] == after["id"] for s in scores)
    dlq = await read(broker.bootstrap, names.dlq, until=lambda rs: len(rs) >= 1, timeout=30)
    assert len(dlq) == 1
    headers = dict(dlq[0].headers)
    assert headers["scorer.error.reason"] == b"invalid_json"
    # as much of it as a dead letter may carry, and headers that say so
    assert dlq[0].value == broken[:900_000]
    assert headers["scorer.value.bytes"] == str(len(broken)).encode()
    assert headers["scorer.value.cut"] == b"true"
    assert b"its first 900000 are kept" in headers["scorer.error"]
