"""Replays keyed by trace id: a thread's turns come through every partition of the traces topic,
and a partition read far ahead of the others must not close a thread before its earlier turns
in the others are read."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fixtures import hub_trace

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.mends.partitioning import key_hash
from stream.threads.events import ThreadEvent

from .harness import Names, Worker, produce, read, read_scores, trace_bytes
from .test_worker import start

GAP = 900.0
PARTITIONS = 4
DAY = datetime(2026, 11, 19, 0, 0, tzinfo=UTC)


def chat(thread: str, n: int, at: datetime, trace_id: str | None = None) -> dict[str, Any]:
    document = hub_trace(1)
    document["id"] = trace_id or f"{thread}-trace-{n}"
    document["thread_id"] = thread
    document["start_time"] = at.isoformat()
    document["input"]["messages"][-1]["content"] = f"question {n} of {thread}"
    document["output"]["messages"][-1]["content"] = f"answer {n} of {thread}"
    return document


def partition_of(document: dict[str, Any]) -> int:
    """Where the producer puts a trace keyed by its id (Kafka's default partitioner)."""
    return key_hash(document["id"].encode()) % PARTITIONS


def one_on(partition: int, thread: str, at: datetime) -> dict[str, Any]:
    """A one-turn conversation whose trace lands on ``partition``."""
    trace_id = next(
        f"{thread}-trace-{k}"
        for k in range(1000)
        if key_hash(f"{thread}-trace-{k}".encode()) % PARTITIONS == partition
    )
    return chat(thread, 0, at, trace_id)


def live_closes(times: list[datetime]) -> list[int]:
    """The turn counts of a conversation's closes live: it closes after every pause of the gap
    or more, and each close judges the whole conversation so far."""
    counts = [n for n in range(1, len(times)) if (times[n] - times[n - 1]).total_seconds() >= GAP]
    return [*counts, len(times)]


def closes(scores: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each thread's closes, in order, as the turn count each judged."""
    seen: dict[str, dict[int, int]] = {}
    for score in scores:
        if score["scope"] == "thread":
            info = score["thread"]
            seen.setdefault(score["target_id"], {})[info["close_seq"]] = info["turn_count"]
    return {t: [c[k] for k in sorted(c)] for t, c in seen.items()}


async def read_up_to(
    bootstrap: str, names: Names, traces: list[dict[str, Any]], partitions: range
) -> None:
    """Wait until the worker has read ``traces`` and told every thread partition that it has
    read ``partitions`` of the traces topic up to them: their turns, then a progress report
    saying so, are on the thread-events topic."""
    wanted = {d["id"] for d in traces}
    latest = max(datetime.fromisoformat(d["start_time"]).timestamp() for d in traces)
    sources = [f"{names.traces}:{p}" for p in partitions]

    def seen(records: list[Any]) -> bool:
        events = [ThreadEvent.from_bytes(r.value) for r in records]
        turns = {e.turn.key for e in events if e.type == "turn" and e.turn is not None}
        reports = [e.positions for e in events if e.type == "progress"]
        return wanted <= turns and any(
            all(s in r and r[s][0] >= latest for s in sources) for r in reports
        )

    records = await read(bootstrap, f"{names.group}-thread-events", until=seen, timeout=180)
    assert seen(records), f"partitions {list(partitions)} not read up to {latest} in time"


async def test_a_replay_keyed_by_trace_id_closes_threads_where_live_did(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    """A day of conversations, a quarter of them pausing 30-60 minutes, replayed keyed by
    trace id (an Opik export as it was produced), so each conversation's turns are spread
    over the four partitions; and partition 0 is read to the end of the day while the others
    are read only up to their first conversations (an hour before the day): its turns are the
    day's last, the others' are earlier turns of the same conversations. Each conversation
    closes as often, and with the same turns, as it did live with a 15-minute gap."""
    rng = random.Random(23)
    start(workers, broker, names, tmp_path, None, SCORER_THREAD_INACTIVITY_GAP_S=str(GAP))
    history: list[dict[str, Any]] = []
    expected: dict[str, list[int]] = {}
    for n in range(80):
        thread = f"day-{n}"
        moment = DAY + timedelta(seconds=rng.uniform(0, 20 * 3600))
        times = []
        for turn in range(3):
            if turn:
                pause = rng.uniform(30, 60) * 60 if n % 4 == 0 and turn == 2 else 0
                moment += timedelta(seconds=pause or rng.uniform(60, 600))
            times.append(moment)
            history.append(chat(thread, turn, moment))
        expected[thread] = live_closes(times)
    history.sort(key=lambda d: d["start_time"])
    ahead = [d for d in history if partition_of(d) == 0]
    behind = [d for d in history if partition_of(d) != 0]
    spans = [{partition_of(d) for d in history if d["thread_id"] == t} for t in expected]
    assert sorted(Counter(map(len, expected.values()))) == [1, 2]
    # most conversations have turns on partition 0 and on another
    assert len(ahead) > 40 and sum(0 in s and len(s) > 1 for s in spans) > 40
    # the other partitions' first conversations, an hour before the day: read before the rest
    dawn = [one_on(p, f"dawn-{p}", DAY - timedelta(hours=1)) for p in range(1, PARTITIONS)]
    # the day after: a conversation on each partition moves its event time past the day
    after = [one_on(p, f"next-day-{p}", DAY + timedelta(days=1)) for p in range(PARTITIONS)]
    expected.update({d["thread_id"]: [1] for d in dawn})

    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in dawn])
    await read_up_to(broker.bootstrap, names, dawn, range(1, PARTITIONS))
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in ahead])
    await read_up_to(broker.bootstrap, names, ahead, range(1))  # to the day's end
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in [*behind, *after]])
    total = sum(map(len, expected.values()))

    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: sum(map(len, closes(rs).values())) >= total,
        timeout=240,
    )
    await asyncio.sleep(2)  # nothing else closes
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=2)
    found = closes(scores)
    differ = {t: (found.get(t), want) for t, want in expected.items() if found.get(t) != want}
    assert not differ, (
        f"{len(differ)} of {len(expected)} threads closed otherwise than live "
        f"(thread: (closed, live)): {dict(sorted(differ.items())[:8])}"
    )
    assert set(found) == set(expected)  # the day after is still open
