"""The verdict cache's table: verdicts outlive a kill -9 (kept by RocksDB on local disk, or
rebuilt from the changelog by the memory store), and expired ones are tombstoned."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from scripted_judge import MockJudge

from stream.agents.verdict_table import decode_entry
from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

from .harness import Names, Worker, produce, read, read_scores, trace_bytes
from .test_worker import LIVE_PROMPT, live_with_id, start

RULE = "studio_live_coach_feedback_quality"
TRACES = 6


def judged(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in scores if s["rule_id"] == RULE]


def asked(judge: MockJudge) -> int:
    return sum(LIVE_PROMPT in p for p in judge.prompts())


def changelog(names: Names) -> str:
    return f"{names.group}-verdicts-changelog"


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
async def test_verdicts_outlive_a_kill_9(
    broker: EmbeddedBroker,
    names: Names,
    judge: MockJudge,
    workers: list[Worker],
    tmp_path: Path,
    store: str,
) -> None:
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "Specific and kind."}')
    env = {"SCORER_STORE": store, "SCORER_DATA_DIR": str(tmp_path / "worker-data")}
    worker = start(workers, broker, names, tmp_path, judge, **env)
    traces = [live_with_id(f"t-kept-{n}", f"Mute the low E on beat {n}.") for n in range(TRACES)]
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    first = judged(
        await read_scores(
            broker.bootstrap, names.scores, until=lambda s: len(judged(s)) >= TRACES, timeout=120
        )
    )
    assert len(first) == TRACES and asked(judge) == TRACES
    # every verdict on the changelog before the kill (a verdict not yet there is paid again)
    entries = await read(
        broker.bootstrap, changelog(names), until=lambda rs: len(rs) >= TRACES, timeout=30
    )
    assert len({r.key for r in entries}) == TRACES
    await asyncio.sleep(2)  # the offsets committed (1 s interval): the traces are not re-read
    worker.kill()

    start(workers, broker, names, tmp_path, judge, **env)
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    both = judged(
        await read_scores(
            broker.bootstrap,
            names.scores,
            until=lambda s: len(judged(s)) >= 2 * TRACES,
            timeout=120,
        )
    )
    second = both[TRACES:]
    assert len(second) == TRACES
    assert asked(judge) == TRACES  # the restarted worker made no call
    assert {s["score_id"] for s in second} == {s["score_id"] for s in first}
    live = {s["score_id"]: s for s in first}
    for hit in second:
        assert hit["details"]["cached"] is True and hit.get("usage") is None
        assert (hit["value"], hit["reason"]) == (
            live[hit["score_id"]]["value"],
            live[hit["score_id"]]["reason"],
        )


async def test_expired_verdicts_are_tombstoned_and_asked_again(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "Specific and kind."}')
    start(workers, broker, names, tmp_path, judge, SCORER_JUDGE_CACHE_TTL_S="3")
    traces = [live_with_id(f"t-ttl-{n}", f"Count in before bar {n}.") for n in range(2)]
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    await read_scores(
        broker.bootstrap, names.scores, until=lambda s: len(judged(s)) >= 2, timeout=120
    )
    assert asked(judge) == 2

    def tombstoned(records: list[Any]) -> set[bytes]:
        return {r.key for r in records if r.value is None}

    records = await read(
        broker.bootstrap, changelog(names), until=lambda rs: len(tombstoned(rs)) >= 2, timeout=30
    )
    written = {r.key: r for r in records if r.value is not None}
    assert len(written) == 2 and tombstoned(records) == set(written)
    for record in written.values():
        _, partition, verdict = decode_entry(record.value)
        assert partition == record.partition and verdict.answer.raw_value == 4  # type: ignore[union-attr]

    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    scores = judged(
        await read_scores(
            broker.bootstrap, names.scores, until=lambda s: len(judged(s)) >= 4, timeout=120
        )
    )
    assert asked(judge) == 4  # expired: asked again
    assert not any((s["details"] or {}).get("cached") for s in scores)


async def test_a_partition_moved_at_a_rebalance_brings_its_verdicts(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    """Two workers share the traces; one stops, the other takes its partitions (and their
    verdicts, recovered from the changelog): the same traces again make no call."""
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "Specific and kind."}')
    first = start(workers, broker, names, tmp_path, judge)
    second = start(workers, broker, names, tmp_path, judge)
    await asyncio.sleep(8)  # the group rebalances onto both workers
    traces = [live_with_id(f"t-moved-{n}", f"Palm-mute bar {n}.") for n in range(8)]
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    scored = judged(
        await read_scores(
            broker.bootstrap, names.scores, until=lambda s: len(judged(s)) >= 8, timeout=120
        )
    )
    assert asked(judge) == 8
    labels = {"rule": RULE, "pack": "fretcoach"}
    paid = [
        sample_value(w.scrape(), "scorer_judge_cache_lookups_total", **labels, outcome="miss")
        for w in (first, second)
    ]
    assert paid[0] and sum(paid) == 8, paid  # the worker that stops judged some: they move
    await read(broker.bootstrap, changelog(names), until=lambda rs: len(rs) >= 8, timeout=30)
    await asyncio.sleep(2)  # offsets committed
    first.stop()

    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    both = judged(
        await read_scores(
            broker.bootstrap, names.scores, until=lambda s: len(judged(s)) >= 16, timeout=120
        )
    )
    assert asked(judge) == 8, paid  # the worker left holds every partition's verdicts
    assert {s["score_id"] for s in both[8:]} == {s["score_id"] for s in scored}
    assert all(s["details"]["cached"] is True for s in both[8:])
