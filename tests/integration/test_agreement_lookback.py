"""Labels that come after their scores, once the worker that read the scores is gone (design
record 36): the join holds no score, so the new owner of the partition reads the scores back
from the internal topic, including the run its predecessor read after its last bucket closed
(killed, it stored nothing of it)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, committed, produce, read, read_scores
from .test_agreement import RULE, env, label, labelled_rules_worker, labelled_worker, trace

N = 8


def looked_back(worker: Worker) -> float:
    found = re.search(r"^scorer_agreement_lookback_records_total (\S+)", worker.scrape(), re.M)
    return float(found[1]) if found else 0.0


async def test_labels_after_their_scores_join_on_a_worker_that_never_saw_them(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    judge.script("case", '{"answer": "yes", "reason": "scripted"}')
    first = labelled_worker(broker, names, tmp_path, judge, RULE)
    workers.append(first)
    await produce(broker.bootstrap, names.traces, [trace(i) for i in range(N)])
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda ss: len(ss) >= N, timeout=90
    )
    assert {s["status"] for s in scores} == {"ok"}
    # the first worker's join read every score (its offsets committed), then it is killed:
    # no bucket of what it read was closed, so the next owner must read that run back
    events = f"{names.group}-agreement-events"

    async def read_by_join() -> int:
        offsets = [await committed(broker.bootstrap, names.group, events, p) for p in range(4)]
        return sum(o or 0 for o in offsets)

    for _ in range(120):
        if await read_by_join() >= N:
            break
        await asyncio.sleep(0.5)
    assert await read_by_join() >= N
    first.kill()

    second = labelled_rules_worker(broker, names, tmp_path, judge)
    workers.append(second)
    await produce(broker.bootstrap, env(names)["SCORER_LABELS_TOPIC"], [label(i) for i in range(N)])
    records = await read(
        broker.bootstrap,
        env(names)["SCORER_AGREEMENT_TOPIC"],
        until=lambda rs: len({orjson.loads(r.value)["agreement_id"] for r in rs}) >= N,
        timeout=120,
    )
    pairs = {p["agreement_id"]: p for p in (orjson.loads(r.value) for r in records)}
    assert {p["target_id"] for p in pairs.values()} == {f"t-{i}" for i in range(N)}
    assert {p["score_id"] for p in pairs.values()} == {s["score_id"] for s in scores}
    assert all(p["judged_value"] == "yes" for p in pairs.values())
    assert looked_back(second) >= N  # read back from the topic, not from the table
