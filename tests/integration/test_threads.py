"""Thread closing end to end: real workers, the embedded broker, a scripted judge."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from fixtures import hub_trace
from scripted_judge import MockJudge, Reply, script_frustration

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, message_key
from stream.kafka.mends.partitioning import key_hash
from stream.metrics import sample_value
from stream.threads.events import table_key

from .harness import Names, Worker, produce, read, read_scores, trace_bytes
from .test_worker import start

COHERENCE = "evaluating conversational coherence"
EFFECTIVENESS = "evaluating live feedback effectiveness"
T0 = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
FAST = {"SCORER_THREAD_TICK_S": "0.3"}


def chat(thread: str, n: int, *, at: datetime | None = None, finished: bool = False) -> dict:
    document = hub_trace(1)
    document["id"] = f"{thread}-trace-{n}"
    document["thread_id"] = thread
    document["start_time"] = (at or datetime.now(UTC)).isoformat()
    document["input"]["messages"][-1]["content"] = f"question {n} of {thread}"
    document["output"]["messages"][-1]["content"] = f"answer {n} of {thread}"
    if finished:
        document["metadata"]["conversation_finished"] = True
    return document


def session_turn(session: str, seq: int, timing: float, feedback: str = "steady the beat") -> dict:
    return {
        "session_id": session,
        "type": "turn",
        "seq": seq,
        # a second apart: within the 4 s gap the tests close by (a longer pause in event
        # time closes the session, as it would have live)
        "timestamp": (T0 + timedelta(seconds=seq)).isoformat(),
        "project_name": "fretcoach",
        "metrics": {"pitch_accuracy": 0.9, "scale_conformity": 0.85, "timing_stability": timing},
        "feedback": feedback,
    }


def session_end(session: str, seq: int = 99) -> dict:
    return {"session_id": session, "type": "end", "seq": seq, "timestamp": T0.isoformat()}


def as_messages(events: list[dict]) -> list[tuple[bytes, bytes]]:
    return [(e.get("session_id", e.get("id", "")).encode(), orjson.dumps(e)) for e in events]


def partition_of(conversation: str, partitions: int = 4) -> int:
    return key_hash(table_key("conversation", conversation)) % partitions


def thread_scores(scores: list[dict]) -> list[dict]:
    return [s for s in scores if s["scope"] == "thread"]


def by_target(scores: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for s in thread_scores(scores):
        grouped.setdefault(s["target_id"], []).append(s)
    return grouped


async def test_conversations_and_sessions_close_once_and_reopen(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    judge.script(COHERENCE, '{"score": 0.9, "reason": "coherent"}')
    script_frustration(judge, 0.2, "calm")
    judge.script(EFFECTIVENESS, '{"score": 1.0, "reason": "timing improved"}')
    worker = start(
        workers, broker, names, tmp_path, judge, SCORER_THREAD_INACTIVITY_GAP_S="4", **FAST
    )
    await produce(
        broker.bootstrap,
        names.traces,
        [
            trace_bytes(chat("idle", 0)),
            trace_bytes(chat("idle", 1)),
            trace_bytes(chat("single", 0)),
            trace_bytes(chat("finished", 0, finished=True)),
        ],
    )
    improving = [session_turn("improving", i, 0.5 + 0.08 * i) for i in range(6)]
    shuffled = [session_turn("shuffled", i, 0.6) for i in (2, 0, 1, 3)]
    shuffled.insert(2, session_turn("shuffled", 1, 0.6, feedback="a second copy of seq 1"))
    await produce(
        broker.bootstrap,
        names.sessions,
        as_messages(
            [
                *improving,
                session_end("improving"),
                *shuffled,
                session_end("shuffled"),
                session_end("empty"),
                {"session_id": "broken", "type": "turn"},  # no seq, no timestamp: DLQ
            ]
        ),
    )
    targets = {"idle", "single", "finished", "improving", "shuffled", "empty"}
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: {s["target_id"] for s in thread_scores(rs)} >= targets,
        timeout=60,
    )
    await asyncio.sleep(3)  # past another gap: nothing closes twice
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=3)
    grouped = by_target(scores)
    assert set(grouped) == targets
    for target, found in grouped.items():
        rules = sorted(s["rule_id"] for s in found)
        expected = (
            ["hub_conversational_coherence", "hub_user_frustration_score"]
            if target in ("idle", "single", "finished")
            else ["studio_live_feedback_effectiveness", "studio_live_feedback_improvement"]
        )
        assert rules == expected, (target, rules)
        assert {s["thread"]["close_seq"] for s in found} == {1}
    reasons = {t: found[0]["thread"]["close_reason"] for t, found in grouped.items()}
    assert reasons == {
        "idle": "inactivity",
        "single": "inactivity",
        "finished": "end",
        "improving": "end",
        "shuffled": "end",
        "empty": "end",
    }
    frustration = next(s for s in grouped["idle"] if s["rule_id"] == "hub_user_frustration_score")
    assert (frustration["value"], frustration["higher_is_better"]) == (0.2, False)
    assert {s["thread"]["turn_count"] for s in grouped["idle"]} == {2}
    # the judge saw the conversation in order, as a list of user/assistant messages
    (idle_prompt,) = [p for p in judge.prompts() if COHERENCE in p and "of idle" in p]
    order = [
        idle_prompt.index(f"{kind} {n} of idle") for n in (0, 1) for kind in ("question", "answer")
    ]
    assert order == sorted(order) and '"role": "user"' in idle_prompt
    # out-of-order and duplicate seq: folded in seq order, one copy of seq 1
    (shuffled_prompt,) = [p for p in judge.prompts() if EFFECTIVENESS in p and "a second copy" in p]
    seqs = [int(m) for m in re.findall(r'"seq": (\d+)', shuffled_prompt)]
    assert seqs == [0, 1, 2, 3]
    improvement = next(
        s for s in grouped["improving"] if s["rule_id"] == "studio_live_feedback_improvement"
    )
    assert improvement["value"] == 1.0 and improvement["thread"]["turn_count"] == 6
    empty = {s["rule_id"]: s for s in grouped["empty"]}
    assert empty["studio_live_feedback_effectiveness"]["status"] == "skipped"
    assert empty["studio_live_feedback_effectiveness"]["status_reason"] == "the thread has no turns"
    assert empty["studio_live_feedback_improvement"]["value"] == 0.5  # too short: the seed's 0.5
    text = worker.metrics()
    assert (
        sample_value(text, "scorer_thread_closes_total", kind="conversation", reason="inactivity")
        == 2
    )
    assert sample_value(text, "scorer_thread_closes_total", kind="session", reason="end") == 3
    assert sample_value(text, "scorer_threads_open") == 0
    assert sample_value(text, "scorer_thread_pending_closes") == 0
    assert (
        sample_value(
            text, "scorer_score_value_count", rule="hub_conversational_coherence", pack="fretcoach"
        )
        == 3
    )
    assert (
        sample_value(
            text, "scorer_dlq_messages_total", topic=names.sessions, reason="invalid_event"
        )
        == 1
    )

    # a turn after the close reopens the thread; the next close is a new version
    first_ids = {s["score_id"] for s in grouped["idle"]}
    await produce(broker.bootstrap, names.traces, [trace_bytes(chat("idle", 2))])
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: len(by_target(rs).get("idle", [])) >= 4,
        timeout=30,
    )
    idle = by_target(scores)["idle"]
    second = [s for s in idle if s["thread"]["close_seq"] == 2]
    assert len(idle) == 4 and len(second) == 2
    assert {s["thread"]["turn_count"] for s in second} == {3}
    assert not first_ids & {s["score_id"] for s in second}


async def test_a_replay_closes_threads_by_event_time(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    """History produced in a second closes threads where they would have closed live: the
    15-minute gap is measured in event time, not in the second the replay took.

    Event time advances per thread-events partition, as the minimum over the source
    partitions feeding it; like `scorer replay`, this history is keyed by thread id, and the
    two threads share both partitions (a real replay has enough threads for every source)."""
    start(workers, broker, names, tmp_path, None)
    later = next(
        f"later-{n}"
        for n in range(1000)
        if partition_of(f"later-{n}") == partition_of("morning")
        and key_hash(f"later-{n}".encode()) % 4 == key_hash(b"morning") % 4
    )
    history = [
        chat("morning", 0, at=T0),
        chat("morning", 1, at=T0 + timedelta(minutes=5)),
        chat(later, 0, at=T0 + timedelta(minutes=12)),
        chat(later, 1, at=T0 + timedelta(minutes=21)),  # morning idle for 16 minutes: closes
    ]
    await produce(
        broker.bootstrap, names.traces, [(message_key(d), orjson.dumps(d)) for d in history]
    )
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda rs: "morning" in by_target(rs), timeout=60
    )
    await asyncio.sleep(2)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=2)
    grouped = by_target(scores)
    assert set(grouped) == {"morning"}  # "later" is 0 minutes idle in event time: open
    assert {s["thread"]["close_reason"] for s in grouped["morning"]} == {"inactivity_event_time"}
    assert {s["thread"]["turn_count"] for s in grouped["morning"]} == {2}
    assert {s["status"] for s in grouped["morning"]} == {"skipped"}  # no judge configured


async def test_a_backlog_read_late_closes_sessions_where_they_closed_live(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    """Sessions produced before the worker starts, read more than the gap later: the wall
    clock ticks while the backlog is read, but a session is not idle while its source is
    read only up to a point before its deadline, and a turn that reached Kafka more than the
    gap after the one before closes the session first, as live."""
    steady = [session_turn("steady", i, 0.6) for i in range(6)]
    await produce(
        broker.bootstrap,
        names.sessions,
        as_messages(
            [*steady, session_end("steady"), *(session_turn("paused", i, 0.6) for i in (0, 1))]
        ),
    )
    await asyncio.sleep(5)  # longer than the gap, in Kafka time
    await produce(
        broker.bootstrap,
        names.sessions,
        as_messages([*(session_turn("paused", i, 0.6) for i in (2, 3)), session_end("paused")]),
    )
    await asyncio.sleep(5)  # the worker starts when all of it is older than the gap
    start(workers, broker, names, tmp_path, None, SCORER_THREAD_INACTIVITY_GAP_S="4", **FAST)
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: len(by_target(rs).get("paused", [])) >= 4 and "steady" in by_target(rs),
        timeout=60,
    )
    await asyncio.sleep(5)  # past another gap: nothing else closes
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=3)
    closes = {
        target: sorted(
            {
                (s["thread"]["close_seq"], s["thread"]["close_reason"], s["thread"]["turn_count"])
                for s in found
            }
        )
        for target, found in by_target(scores).items()
    }
    assert closes == {
        "steady": [(1, "end", 6)],
        "paused": [(1, "inactivity", 2), (2, "end", 4)],
    }


def live_closes(times: list[datetime], gap_s: float) -> list[int]:
    """The turn counts of a conversation's closes live: it closes after every pause of the gap
    or more, and each close judges the whole conversation so far."""
    counts = [n for n in range(1, len(times)) if (times[n] - times[n - 1]).total_seconds() >= gap_s]
    return [*counts, len(times)]


async def test_a_replayed_day_closes_every_thread_where_live_did(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    """A day of conversations, a quarter of them pausing 30-60 minutes, replayed in seconds
    (keyed by thread id, as `scorer replay` does): each closes as often, and with the same
    turns, as it did live with a 15-minute gap, although the four source partitions are
    read at their own speeds and each feeds every thread partition."""
    rng = random.Random(14)
    gap = 900.0
    start(workers, broker, names, tmp_path, None, SCORER_THREAD_INACTIVITY_GAP_S=str(gap))
    history: list[dict] = []
    expected: dict[str, list[int]] = {}
    for n in range(80):
        thread = f"day-{n}"
        moment = T0 - timedelta(hours=18) + timedelta(seconds=rng.uniform(0, 20 * 3600))
        times = []
        for turn in range(3):
            if turn:
                pause = rng.uniform(30, 60) * 60 if n % 4 == 0 and turn == 2 else 0
                moment += timedelta(seconds=pause or rng.uniform(60, 600))
            times.append(moment)
            history.append(chat(thread, turn, at=moment))
        expected[thread] = live_closes(times, gap)
    history.sort(key=lambda d: d["start_time"])
    # the day after: one conversation on each source partition moves its event time on
    day_after = T0 + timedelta(hours=6)
    sentinels = []
    for partition in range(4):
        thread = next(
            f"next-day-{partition}-{k}"
            for k in range(1000)
            if key_hash(f"next-day-{partition}-{k}".encode()) % 4 == partition
        )
        sentinels.append(chat(thread, 0, at=day_after))
    assert sorted(Counter(map(len, expected.values()))) == [1, 2]
    await produce(
        broker.bootstrap,
        names.traces,
        [(message_key(d), orjson.dumps(d)) for d in [*history, *sentinels]],
    )
    closes_expected = sum(len(c) for c in expected.values())

    def closes(scores: list[dict]) -> dict[str, list[int]]:
        seen: dict[str, dict[int, int]] = {}
        for s in thread_scores(scores):
            info = s["thread"]
            seen.setdefault(s["target_id"], {})[info["close_seq"]] = info["turn_count"]
        return {t: [c[k] for k in sorted(c)] for t, c in seen.items()}

    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: sum(map(len, closes(rs).values())) >= closes_expected,
        timeout=120,
    )
    await asyncio.sleep(2)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=2)
    found = closes(scores)
    differ = {t: (found.get(t), want) for t, want in expected.items() if found.get(t) != want}
    assert not differ, f"{len(differ)} of {len(expected)} threads closed otherwise than live"
    assert set(found) == set(expected)  # the day after is still open


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
async def test_kill_9_before_the_close_and_during_the_close(
    broker: EmbeddedBroker,
    names: Names,
    judge: MockJudge,
    workers: list[Worker],
    tmp_path: Path,
    store: str,
) -> None:
    """Sessions whose turns are in the table but whose gap has not passed when the worker is
    killed close exactly once after the restart, with every turn; a session whose close was
    being judged when the worker died is scored after the restart, once. With the RocksDB
    store the restarted worker reads the same local files (and the changelog's tail)."""
    judge.script(EFFECTIVENESS, '{"score": 0.5, "reason": "partial"}')
    held = "feedback of the held session"
    judge.script(held, Reply(delay_s=120), Reply('{"score": 1.0, "reason": "ok"}'))
    env = {"SCORER_THREAD_INACTIVITY_GAP_S": "25", "SCORER_STORE": store, **FAST}
    if store == "rocksdb":
        env["SCORER_DATA_DIR"] = str(tmp_path / "worker-data")
    worker = start(workers, broker, names, tmp_path, judge, **env)
    sessions = [f"s{n:02d}" for n in range(40)]
    turns = [session_turn(s, seq, 0.5 + seq / 20) for seq in range(4) for s in sessions]
    pending = [session_turn("pending-session", 0, 0.7, held), session_end("pending-session")]
    await produce(broker.bootstrap, names.sessions, as_messages(turns + pending))
    for _ in range(100):  # every turn folded and the pending session's judge call started
        text = worker.scrape()
        if sample_value(text, "scorer_thread_events_total", type="turn") >= 161 and any(
            held in p for p in judge.prompts()
        ):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the worker did not fold every turn")
    worker.kill()  # changelog writes may be in flight: nothing committed past them
    start(workers, broker, names, tmp_path, judge, **env)

    want = set(sessions) | {"pending-session"}
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: {s["target_id"] for s in thread_scores(rs)} >= want,
        timeout=120,
    )
    await asyncio.sleep(2)
    scores = await read_scores(broker.bootstrap, names.scores, until=lambda rs: False, timeout=2)
    grouped = by_target(scores)
    assert set(grouped) == want
    for session, found in grouped.items():
        assert Counter(s["rule_id"] for s in found) == {
            "studio_live_feedback_effectiveness": 1,
            "studio_live_feedback_improvement": 1,
        }, session
        assert {s["thread"]["close_seq"] for s in found} == {1}
    assert {
        s["thread"]["turn_count"]
        for s in thread_scores(scores)
        if s["target_id"] != "pending-session"
    } == {4}
    assert {s["thread"]["close_reason"] for s in grouped["s00"]} == {"inactivity"}
    pending_scores = {s["rule_id"]: s for s in grouped["pending-session"]}
    assert (
        pending_scores["studio_live_feedback_effectiveness"]["value"] == 1.0
    )  # the restart's call


# the window between the seek to committed offsets and the end of a rebalance, widened from the
# 13-17 ms measured on an idle worker past the 0.86 s measured under load: a record fetched in
# it was dropped (faust-streaming #596, mended in stream/kafka/mends/consumer.py)
WIDE_SEEK = {"SCORER_TEST_SEEK_DELAY_S": "1.0"}


def transport(kind: str) -> dict[str, str]:
    """A worker's env for the embedded broker's transport (``tansu``) or the one a real cluster
    gets (``kafka``). The latter trusts the broker's end offsets, which the embedded broker
    gets right only for batches of one record (table recovery reads up to them)."""
    if kind == "kafka":
        return {"SCORER_BROKER_KIND": kind, "SCORER_TEST_PRODUCER_BATCH_BYTES": "1"}
    return {"SCORER_BROKER_KIND": kind}


@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_two_workers_hand_threads_over_without_losing_a_turn(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, kind: str
) -> None:
    """A second worker joins while sessions stream in, then the first stops: every session
    closes once with all its turns, on both transports (``kind``)."""
    env = {"SCORER_THREAD_INACTIVITY_GAP_S": "300", **transport(kind), **WIDE_SEEK}
    sessions = [f"h{n:02d}" for n in range(30)]
    hand_over = HandOver(broker, names, workers, tmp_path, sessions, **env, **FAST)
    first = hand_over.start()
    await hand_over.turns(range(0, 2))
    await hand_over.folded(first, 60)
    second = hand_over.start()
    await asyncio.sleep(8)  # the group rebalances onto both workers
    await hand_over.turns(range(2, 4))
    await asyncio.sleep(3)
    # the second worker takes every partition over, with the table, while turns stream in
    await asyncio.gather(asyncio.to_thread(first.stop), hand_over.turns_during(range(4, 12), 8))
    await hand_over.closed_once_with_every_turn(12)
    assert "Traceback" not in second.log()


@pytest.mark.chaos  # the embedded broker's group gets stuck in about 1 run in 30 (docs/limitations.md)
@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_three_workers_hand_threads_over_without_losing_a_turn(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, kind: str
) -> None:
    """Three workers, each change a rebalance while turns stream in: a second and a third
    join, the first stops (SIGTERM), the second is killed (kill -9, its session times out),
    and a fourth joins; every session closes once with all its turns."""
    env = {"SCORER_THREAD_INACTIVITY_GAP_S": "300", **transport(kind), **WIDE_SEEK}
    sessions = [f"w{n:02d}" for n in range(30)]
    hand_over = HandOver(broker, names, workers, tmp_path, sessions, **env, **FAST)
    first = hand_over.start()
    await hand_over.turns(range(0, 1))
    await hand_over.folded(first, 30)
    second = hand_over.start()
    await hand_over.turns_during(range(1, 5), seconds=8)
    third = hand_over.start()
    await hand_over.turns_during(range(5, 9), seconds=8)
    ready = [ready_count(w) for w in (second, third)]
    await asyncio.gather(asyncio.to_thread(first.stop), hand_over.turns_during(range(9, 15), 6))
    # kill -9 once the group has settled: a member killed between its JoinGroup and its
    # SyncGroup leaves the embedded broker's group stuck for good (its defect, see docs/design/03-embedded-broker.md;
    # the chaos run kills at any moment)
    await until_ready_again(dict(zip((second, third), ready, strict=True)))
    second.kill()
    fourth = hand_over.start()
    await hand_over.turns_during(range(15, 21), seconds=10)
    await hand_over.closed_once_with_every_turn(21)
    for worker in (third, fourth):
        assert "Traceback" not in worker.log()


def ready_count(worker: Worker) -> int:
    """How many rebalances the worker has finished (Faust logs "Worker ready" at each)."""
    return worker.log().count("Worker ready")


async def until_ready_again(before: dict[Worker, int], timeout: float = 90) -> None:
    """Wait until each worker has finished a rebalance since it had finished ``before``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while any(ready_count(w) <= n for w, n in before.items()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the group did not settle after the change")
        await asyncio.sleep(0.2)


class HandOver:
    """Sessions streaming into a group of workers that changes under them."""

    def __init__(
        self,
        broker: EmbeddedBroker,
        names: Names,
        workers: list[Worker],
        tmp: Path,
        sessions: list[str],
        **env: str,
    ) -> None:
        self.broker, self.names, self.workers, self.tmp = broker, names, workers, tmp
        self.sessions, self.env = sessions, env

    def start(self) -> Worker:
        return start(self.workers, self.broker, self.names, self.tmp, None, **self.env)

    async def turns(self, seqs: range) -> None:
        """Turns ``seqs`` of every session, in one burst."""
        events = [session_turn(s, q, 0.5 + q / 20) for q in seqs for s in self.sessions]
        await produce(self.broker.bootstrap, self.names.sessions, as_messages(events))

    async def turns_during(self, seqs: range, seconds: float) -> None:
        """Turns ``seqs`` over ``seconds``: each a burst, one turn of every session, so that
        records queue in the agents whenever a rebalance ends."""
        for seq in seqs:
            events = [session_turn(s, seq, 0.5 + seq / 20) for s in self.sessions]
            await produce(self.broker.bootstrap, self.names.sessions, as_messages(events))
            await asyncio.sleep(seconds / len(seqs))

    async def folded(self, worker: Worker, count: int) -> None:
        for _ in range(150):
            if sample_value(worker.scrape(), "scorer_thread_events_total", type="turn") >= count:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"fewer than {count} turns folded")

    async def closed_once_with_every_turn(self, turns: int) -> None:
        """End every session; each closes once (close 1) with all ``turns`` of its turns."""
        sessions = self.sessions
        bootstrap, topic = self.broker.bootstrap, self.names.scores
        await produce(
            bootstrap, self.names.sessions, as_messages([session_end(s) for s in sessions])
        )
        await read_scores(
            bootstrap,
            topic,
            until=lambda rs: {s["target_id"] for s in thread_scores(rs)} >= set(sessions),
            timeout=120,
        )
        await asyncio.sleep(2)
        scores = await read_scores(bootstrap, topic, until=lambda rs: False, timeout=2)
        grouped = by_target(scores)
        assert set(grouped) == set(sessions)
        short = [
            session
            for session, found in grouped.items()
            if {(s["thread"]["close_seq"], s["thread"]["turn_count"]) for s in found}
            != {(1, turns)}
        ]
        # a turn lost: where each of its events went
        trail = await event_trail(self.broker, self.names, short) if short else ""
        for session, found in grouped.items():
            # at least once: a close scored again after a rebalance repeats its score ids
            values: dict[str, set[object]] = {}
            for score in found:
                values.setdefault(score["score_id"], set()).add(score["value"])
            assert all(len(v) == 1 for v in values.values()), (session, values)
            distinct = {s["score_id"]: s for s in found}.values()
            assert Counter(s["rule_id"] for s in distinct) == {
                "studio_live_feedback_effectiveness": 1,
                "studio_live_feedback_improvement": 1,
            }, session
            closes = {(s["thread"]["close_seq"], s["thread"]["turn_count"]) for s in found}
            assert closes == {(1, turns)}, trail


async def event_trail(broker: EmbeddedBroker, names: Names, sessions: list[str]) -> str:
    """Every record of ``sessions`` on the sessions topic, the thread-events topic and the
    thread table's changelog, in order, with its partition and offset (turn counts for the
    table's states)."""
    lines = [f"sessions with a turn missing: {sessions}"]
    for topic in (
        names.sessions,
        f"{names.group}-thread-events",
        f"{names.group}-threads-changelog",
    ):
        records = await read(broker.bootstrap, topic, until=lambda rs: False, timeout=4)
        for r in records:
            key, value = (r.key or b"").decode(errors="replace"), r.value or b""
            if not any(s in key or s.encode() in value for s in sessions):
                continue
            what = value[:160]
            if topic.endswith("-changelog") and value:
                state = orjson.loads(value)
                what = f"turns {[t.get('seq') for t in state.get('turns', [])]}".encode()
            lines.append(f"{topic}[{r.partition}]@{r.offset} t={r.timestamp} {key}: {what!r}")
    return "\n".join(lines)


async def test_co_partitioned_session_events_fold_where_they_are_read(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    """A sessions topic with as many partitions as the thread events: events keyed by their
    session id are folded where they are read (no thread-events record of them but the
    published markers), one keyed otherwise is forwarded, and closes are scored as before; a
    worker killed mid-session loses no turn and folds none twice (design record 33)."""
    judge.script(EFFECTIVENESS, '{"score": 0.5, "reason": "partial"}')
    await ensure_topics(broker.bootstrap, [names.sessions], 4)  # SCORER_TOPIC_PARTITIONS
    env = {"SCORER_THREAD_INACTIVITY_GAP_S": "60", **FAST}
    worker = start(workers, broker, names, tmp_path, judge, **env)
    placed, misplaced = ["placed-a", "placed-b"], "misplaced"
    # keyed by its session id (not spread: it closes as soon as its end is read) but produced
    # to another partition than its session's: forwarded there
    elsewhere = (key_hash(misplaced.encode()) + 1) % 4

    async def send(seqs: range, end: bool = False) -> None:
        turns = [session_turn(s, seq, 0.5 + seq / 10) for seq in seqs for s in placed]
        ends = [session_end(s) for s in placed] if end else []
        await produce(broker.bootstrap, names.sessions, as_messages([*turns, *ends]))
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            wrong = [session_turn(misplaced, seq, 0.5) for seq in seqs]
            for event in [*wrong, *([session_end(misplaced)] if end else [])]:
                await producer.send_and_wait(
                    names.sessions, orjson.dumps(event), key=misplaced.encode(), partition=elsewhere
                )
        finally:
            await producer.stop()

    broken = (b"placed-a", b'{"session_id": "placed-a", "type": "turn"}')  # no seq: DLQ
    await send(range(2))
    await produce(broker.bootstrap, names.sessions, [broken])
    for _ in range(150):
        if sample_value(worker.scrape(), "scorer_thread_events_total", type="turn") >= 6:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the worker did not fold the first turns")
    worker.kill()  # changelog writes and commits may be in flight: redelivered, not lost
    worker = start(workers, broker, names, tmp_path, judge, **env)
    await send(range(2, 3), end=True)

    want = {*placed, misplaced}
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: sum(len(f) for f in by_target(rs).values()) >= 2 * len(want),
        timeout=90,
    )
    grouped = by_target(scores)
    assert set(grouped) == want
    for session, found in grouped.items():
        assert sorted(s["rule_id"] for s in found) == [
            "studio_live_feedback_effectiveness",
            "studio_live_feedback_improvement",
        ], session
        assert {(s["thread"]["close_seq"], s["thread"]["close_reason"]) for s in found} == {
            (1, "end")
        }
        assert {s["thread"]["turn_count"] for s in found} == {3}, session  # none lost, none twice
    thread_events = await read(
        broker.bootstrap,
        f"{names.group}-thread-events",
        until=lambda rs: sum(b'"published"' in r.value for r in rs) >= len(want),
    )
    kinds = Counter(
        (e["thread_id"], e["type"])
        for e in (orjson.loads(r.value) for r in thread_events)
        if e.get("thread_id")
    )
    assert not {k for k in kinds if k[0] in placed and k[1] != "published"}  # folded in place
    assert kinds[(misplaced, "turn")] >= 3 and kinds[(misplaced, "end")] >= 1  # forwarded
    assert {s for s, kind in kinds if kind == "published"} == want
    dlq = await read(broker.bootstrap, names.dlq, until=lambda rs: len(rs) >= 1, timeout=10)
    assert len(dlq) == 1
    assert "folded where it is read" in workers[0].log()
