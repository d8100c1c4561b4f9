"""The memory store's snapshot across a worker's restart (design record 34): real workers, the
embedded broker, a scripted judge."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

from .harness import Names, Worker, produce, read_scores
from .test_threads import EFFECTIVENESS, FAST, as_messages, by_target, session_end, session_turn
from .test_worker import start


def start_offsets(log: str, topic_suffix: str) -> dict[int, int]:
    """The changelog offsets Faust's recovery started reading ``*topic_suffix`` at, from the
    last "Reading Starts At - Active" table in ``log``."""
    table = log.rsplit("Reading Starts At - Active", 1)[1].split("\n\n", 1)[0]
    offsets, topic = {}, ""
    for row in re.findall(r"^\| (\S+)\s+\| (\d+)\s+\| (-?\d+)\s+\|", table, re.MULTILINE):
        topic = topic if row[0] == "〃" else row[0]
        if topic.endswith(topic_suffix):
            offsets[int(row[1])] = int(row[2])
    return offsets


async def test_a_clean_stop_snapshots_the_memory_store_and_the_restart_replays_only_the_rest(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    """Stopped (SIGTERM), a worker on the memory store writes its thread table's snapshot; the
    next worker on that data directory reads it once, Faust's recovery starts each changelog
    partition where the snapshot ends instead of at its start, and every session closes once
    with its turns from before the stop and after it."""
    judge.script(EFFECTIVENESS, '{"score": 0.5, "reason": "partial"}')
    data = tmp_path / "worker-data"
    env = {
        "SCORER_STORE": "memory",
        "SCORER_DATA_DIR": str(data),
        "SCORER_THREAD_INACTIVITY_GAP_S": "300",
        **FAST,
    }
    first = start(workers, broker, names, tmp_path, judge, **env)
    sessions = [f"m{n:02d}" for n in range(20)]
    turns = [session_turn(s, seq, 0.5) for seq in range(2) for s in sessions]
    await produce(broker.bootstrap, names.sessions, as_messages(turns))
    for _ in range(150):
        if sample_value(first.scrape(), "scorer_thread_events_total", type="turn") >= 40:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the first worker did not fold every turn")
    first.stop()
    assert "table threads: snapshot of 20 keys written" in first.log()
    [snapshot] = data.rglob("threads.memory-snapshot")

    later = [session_turn(s, 2, 0.5) for s in sessions] + [session_end(s) for s in sessions]
    await produce(broker.bootstrap, names.sessions, as_messages(later))
    second = start(workers, broker, names, tmp_path, judge, **env)
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: set(by_target(rs)) >= set(sessions),
        timeout=90,
    )
    grouped = by_target(scores)
    for session in sessions:
        found = grouped[session]
        assert {s["thread"]["turn_count"] for s in found} == {3}, session
        assert {s["thread"]["close_seq"] for s in found} == {1}, session
    log = second.log()
    read = re.search(r"table threads: 20 keys read from its snapshot .* from offsets (\{.*\})", log)
    assert read, "the second worker did not read the snapshot"
    assert not snapshot.exists()  # read once
    held = {int(p): int(o) for p, o in re.findall(r"(\d+): (\d+)", read.group(1))}
    assert sum(held.values()) >= 40 - 4  # the first worker's 40 writes, offsets from 0
    assert start_offsets(log, "-threads-changelog") == {p: held.get(p, -1) for p in range(4)}
