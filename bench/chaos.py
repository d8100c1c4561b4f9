"""Chaos run (issue 23, item 3): workers killed, stopped and started while traces, coaching
sessions and OpenTelemetry spans stream in; then invariants checked from the topics alone.

The embedded broker; three ``scorer worker`` processes in one group (the FretCoach pack, a
scripted local judge whose answer is a function of the prompt alone, as a judge at
temperature 0); producers streaming hub-coach traces (some alone, most as turns of
conversations keyed by thread id), coaching-session events (turns, then an end) and OTLP
export records (a trace's spans in two unkeyed records, protobuf or OTLP/JSON). Every few
seconds (seeded) one fault on a random worker: ``kill9``, ``sigterm`` (graceful stop),
``start`` (a new worker, while fewer than four run) or ``sigstop`` (longer than the session
timeout, then SIGCONT); at least one worker always runs. After the last cycle the faults stop,
every open session and conversation is ended, the workers run until everything is scored and
the sources are committed, then they are stopped (SIGTERM) and the topics are read.

Invariants, from the topics alone (violation kinds in brackets):

- every trace produced (alone, a conversation's turn, or assembled from spans) has a decision
  record [``trace_without_decisions``], whose hub trace rules are all ``scored``
  [``trace_not_scored``], and every score id a decision names is on the scores topic
  [``score_missing``]; no score is ``error`` [``score_error``];
- every score id has one value: its copies (at-least-once) agree on value, raw value, label,
  status, criterion, target and thread info [``score_id_two_values``];
- closes, from the thread scores (``thread.close_seq``, ``thread.turn_count``). The producer
  sends each thread in rounds: turns a fraction of a second apart, then its end (a session's
  ``end`` event; a conversation's last trace has ``metadata.conversation_finished``); a
  thread may be reopened by a later round, a few seconds after the end. A pause inside a
  round rarely reaches the inactivity gap (30 s): when it does (a thread not picked for a
  while, or the producer itself held up on a loaded machine), the ledger notes it, by the
  turns' own event times, and a close there (an extra close, the later close numbers moved
  up by one) is right, not early. Apart from those, the only close a round may have is the
  one its end makes, and
  "each turn is in the first close at or after it" is exact: a thread of rounds R1..Rk has
  closes 1..k, close j counting |R1| + ... + |Rj| turns (turns are distinct: seq or trace id;
  every close judges all turns so far). Its last rounds not closed at all (the closes there
  are as expected) is [``close_missing``]; a turn in no close, with every round closed (the
  last close counts fewer turns than were produced), is [``turn_lost``]; a close by
  inactivity in the middle of a round, whose later turns reopen the thread and are in its
  next close (no turn lost, but a close live would not have made: no pause reached the gap)
  is [``early_close``]; any other difference (a close extra or counting more than was
  produced, scores of one close disagreeing on their turn count) is [``close_wrong``]; a
  close whose scores do not cover every thread rule of its kind is [``close_incomplete``];
- once every worker has stopped, the group's committed offset equals the end offset (from a
  fetch: the embedded broker's ListOffsets is wrong) on every partition of the source topics
  (traces, sessions, spans) and internal ones (thread events, span assembly, assembled
  traces); on an internal topic the only records allowed past the committed offset are the
  workers' own clock events (``tick``, ``progress``) and ``published`` markers (a close whose
  marker was not read is scored again, same ids) [``offset_not_committed``];
- no dead letter with reason ``engine_error`` [``dead_letter_engine_error``]; no worker exits
  unless told to [``worker_exited``];
- liveness, watched during the run: no 90 s without a commit on the source topics while
  records wait there [``stalled``, with each live worker's last group join and sync]. After a
  stall every worker is replaced (at most five times) so that the run can go on.

Usage (prints progress, then the table; exit status 1 on any violation; logs under ``--dir``,
default a new ``/tmp/chaos-*``):

    .venv/bin/python bench/chaos.py --cycles 200 [--kind tansu|kafka] [--seed N]
    .venv/bin/python bench/chaos.py --cycles 10 --interval 3 6   # a short run
    .venv/bin/python bench/chaos.py --cycles 50 --seek-delay 0.3   # widen the rebalance window

On a violation, ``trail.txt`` (where the records of the first threads and traces concerned
went: source offsets, internal topics, changelog states, decisions) and ``offsets.txt`` (who
owned each partition left behind at each rebalance, and the records at its committed offset)
are written next to the worker logs.

``tests/integration/test_chaos.py`` (marker ``chaos``) runs a short one through ``run_chaos``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.tansu import fetched_highwaters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixtures import fretcoach_rules, hub_trace
from integration.harness import Names, Worker
from otlp_records import as_otlp_json
from scripted_judge import FRUSTRATION, MockJudge, Reply, Script

FAULTS = ("kill9", "sigterm", "start", "sigstop")
CLOCK_EVENTS = {"tick", "progress"}
# violation kinds whose examples start with the trace or thread concerned
PER_TARGET = {"trace_without_decisions", "trace_not_scored", "score_missing", "turn_lost"}
PER_TARGET |= {"close_missing", "close_wrong", "close_incomplete", "early_close"}
GAP_S = 30.0  # the inactivity gap: longer than a pause inside a round, nearly always
HUB = "hub-coach-chat"
JOINED = re.compile(r"Joined group '(?P<group>[^']+)' \(generation (?P<generation>-?\d+)\)")
PARTITIONS = 4

Say = Callable[[str], None]


# --- the judge --------------------------------------------------------------------------

_PROMPT: contextvars.ContextVar[str] = contextvars.ContextVar("chaos_prompt", default="")


@dataclass
class PromptHashAnswer(Script):
    """An answer that is a function of the prompt alone (a judge at temperature 0): a close
    scored twice on different turns under one score id shows two values. ``key``: the
    answer's wrapper (the frustration rule's own format)."""

    key: str | None = None

    def next(self) -> Reply:
        self.served += 1
        digest = hashlib.sha256(_PROMPT.get().encode()).digest()
        score = int.from_bytes(digest[:2], "big") % 11 / 10
        answer: dict[str, Any] = {"score": score, "reason": f"prompt-hashed {score}"}
        return Reply(orjson.dumps({self.key: answer} if self.key else answer).decode())


class PromptJudge(MockJudge):
    """The scripted judge with every answer hashed from its prompt."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.scripts = [PromptHashAnswer(FRUSTRATION, [], key="User frustration")]
        self.scripts.append(PromptHashAnswer("", []))

    async def _completions(self, request: Any) -> Any:
        body = await request.json()  # aiohttp keeps the body: the parent reads it again
        token = _PROMPT.set(str(body["messages"][-1]["content"]))
        try:
            return await super()._completions(request)
        finally:
            _PROMPT.reset(token)


# --- what was produced -----------------------------------------------------------------


@dataclass
class ProducedThread:
    """A session or conversation as the producer sent it: its turns, round by round."""

    kind: str  # "session" | "conversation"
    thread_id: str
    rounds: list[list[str]] = field(default_factory=list)  # turn keys (seq or trace id)
    quota: int = 0  # turns still to send in the open round (0: no round open)
    reopen_at: float | None = None
    seq: int = 0
    last_turn_at: float = 0.0  # the event time of its last turn

    pauses: set[int] = field(default_factory=set)  # turn counts followed by a pause > gap

    def add_turn(self, key: str, at: float) -> None:
        """Turn ``key`` of event time ``at`` (epoch s), in the open round. A pause longer than
        the inactivity gap before it (by event time) is noted: the thread may close there."""
        if self.rounds[-1] and at - self.last_turn_at > GAP_S:
            self.pauses.add(self.turns)
        self.rounds[-1].append(key)
        self.last_turn_at = at

    def closes_as_expected(self, actual: list[tuple[int, int]]) -> bool:
        """``actual`` (close seq, turn count) are the expected closes, with a close at a pause
        longer than the gap (``pauses``) allowed in between."""
        counts = [count for _, count in actual]
        kept = [c for c in counts if c not in self.pauses or c in self.round_ends()]
        seqs = [seq for seq, _ in actual]
        return kept == self.round_ends() and seqs == list(range(1, len(actual) + 1))

    def round_ends(self) -> list[int]:
        return [count for _, count in self.expected_closes()]

    @property
    def turns(self) -> int:
        return sum(len(r) for r in self.rounds)

    def expected_closes(self) -> list[tuple[int, int]]:
        counts, total = [], 0
        for number, turns in enumerate(self.rounds, 1):
            total += len(turns)
            counts.append((number, total))
        return counts


@dataclass
class Sent:
    topic: str
    what: str  # "trace", "turn", "end", "spans"
    thread: str | None
    future: Awaitable[Any]
    partition: int = -1
    offset: int = -1


@dataclass
class Ledger:
    traces: dict[str, str] = field(default_factory=dict)  # trace id -> "trace" | turn | "otlp"
    threads: dict[str, ProducedThread] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)

    def counts(self, roles: dict[str, str]) -> Counter[str]:
        """Records produced, by topic role and what they carry."""
        return Counter(f"{roles.get(s.topic, s.topic)} {s.what}" for s in self.sent)


# --- traffic ---------------------------------------------------------------------------


class SeededIds:
    """OpenTelemetry ids from the run's seed (the SDK's IdGenerator interface)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        return True


class Traffic:
    """Producers of traces, coaching sessions and spans, each at its own seeded pace."""

    def __init__(
        self, bootstrap: str, names: Names, rng: random.Random, rate: float, ledger: Ledger
    ) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.rng = rng
        self.rate = rate
        self.ledger = ledger
        self.producer: AIOKafkaProducer | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.running = False
        self.counter = 0
        self.template = hub_trace(1)
        self.template.pop("thread_id", None)
        self._otlp: Any = None

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        await self.producer.start()
        self.running = True
        self.tasks = [
            asyncio.create_task(self._loop(self._plain_trace, 1.0)),
            asyncio.create_task(self._loop(lambda: self._thread_step("conversation", 4), 1.2)),
            asyncio.create_task(self._loop(lambda: self._thread_step("session", 6), 2.5)),
            asyncio.create_task(self._loop(self._otlp_trace, 0.5)),
        ]

    async def finish(self) -> None:
        """Stop streaming; end every open round (a session's end, a conversation's finishing
        trace); forget rounds not begun; wait for every record to be on the broker."""
        self.running = False
        await asyncio.gather(*self.tasks)
        for thread in self.ledger.threads.values():
            thread.reopen_at = None
            if thread.quota and thread.rounds and thread.rounds[-1]:
                if thread.kind == "session":
                    await self._end_session(thread)
                else:
                    await self._conversation_turn(thread, finished=True)
            elif thread.quota and thread.rounds:
                thread.rounds.pop()  # a round with no turn sent: it never began
            thread.quota = 0
        for sent in self.ledger.sent:
            metadata = await sent.future
            sent.partition, sent.offset = metadata.partition, metadata.offset
        assert self.producer
        await self.producer.stop()

    async def _loop(self, step: Callable[[], Awaitable[None]], per_s: float) -> None:
        while self.running:
            await step()
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) / (per_s * self.rate))

    async def _send(
        self, topic: str, key: bytes | None, value: bytes, what: str, thread: str | None = None
    ) -> None:
        assert self.producer
        future = await self.producer.send(topic, key=key, value=value)
        self.ledger.sent.append(Sent(topic, what, thread, future))

    def _trace(self, trace_id: str, thread: str | None, n: int) -> dict[str, Any]:
        document = orjson.loads(orjson.dumps(self.template))
        document["id"] = trace_id
        if thread:
            document["thread_id"] = thread
        document["start_time"] = datetime.now(UTC).isoformat()
        document["end_time"] = document["start_time"]
        document["input"]["messages"][-1]["content"] = f"question {n} of {thread or trace_id}"
        document["output"]["messages"][-1]["content"] = f"answer {n} of {thread or trace_id}"
        return document

    def _next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter:06d}"

    async def _plain_trace(self) -> None:
        trace_id = self._next_id("trace-")
        self.ledger.traces[trace_id] = "trace"
        document = self._trace(trace_id, None, 0)
        await self._send(self.names.traces, trace_id.encode(), orjson.dumps(document), "trace")

    async def _thread_step(self, kind: str, open_threads: int) -> None:
        """One event of one thread: a new thread or a due reopening joins those in a round;
        a thread in a round sends its next turn, and its end after its last."""
        now = time.monotonic()
        threads = self.ledger.threads.values()
        due = [t for t in threads if t.kind == kind and t.reopen_at and t.reopen_at <= now]
        for thread in due:
            thread.reopen_at = None
            self._begin_round(thread)
        active = [t for t in threads if t.kind == kind and t.quota]
        if len(active) < open_threads:
            prefix = "session-" if kind == "session" else "conv-"
            thread = ProducedThread(kind, self._next_id(prefix))
            self.ledger.threads[thread.thread_id] = thread
            self._begin_round(thread)
            active.append(thread)
        thread = self.rng.choice(active)
        last = thread.quota == 1
        if kind == "session":
            await self._session_turn(thread)
            if last:
                await self._end_session(thread)
        else:
            await self._conversation_turn(thread, finished=last)
        if last and len(thread.rounds) < 4 and self.rng.random() < 0.3:
            thread.reopen_at = time.monotonic() + self.rng.uniform(2.0, 8.0)

    def _begin_round(self, thread: ProducedThread) -> None:
        thread.rounds.append([])
        thread.quota = self.rng.randint(1, 5)

    async def _session_turn(self, thread: ProducedThread) -> None:
        seq = thread.seq
        thread.seq += 1
        timing = round(self.rng.uniform(0.3, 1.0), 2)
        event = {
            "session_id": thread.thread_id,
            "type": "turn",
            "seq": seq,
            "timestamp": (now := datetime.now(UTC)).isoformat(),
            "project_name": "fretcoach",
            "metrics": {"pitch_accuracy": 0.9, "scale_conformity": 0.8, "timing_stability": timing},
            "feedback": f"turn {seq}: steady the beat",
        }
        thread.add_turn(str(seq), now.timestamp())
        thread.quota -= 1
        key = thread.thread_id.encode()
        await self._send(self.names.sessions, key, orjson.dumps(event), "turn", thread.thread_id)

    async def _end_session(self, thread: ProducedThread) -> None:
        event = {
            "session_id": thread.thread_id,
            "type": "end",
            "seq": thread.seq,
            "timestamp": datetime.now(UTC).isoformat(),
        }
        thread.quota = 0
        key = thread.thread_id.encode()
        await self._send(self.names.sessions, key, orjson.dumps(event), "end", thread.thread_id)

    async def _conversation_turn(self, thread: ProducedThread, *, finished: bool) -> None:
        trace_id = f"{thread.thread_id}-t{thread.seq}"
        document = self._trace(trace_id, thread.thread_id, thread.seq)
        if finished:
            document["metadata"]["conversation_finished"] = True
        thread.seq += 1
        thread.add_turn(trace_id, datetime.fromisoformat(document["start_time"]).timestamp())
        thread.quota = 0 if finished else thread.quota - 1
        self.ledger.traces[trace_id] = "turn"
        # keyed by thread id (as `scorer replay`): a conversation's turns stay in order
        key = thread.thread_id.encode()
        await self._send(self.names.traces, key, orjson.dumps(document), "turn", thread.thread_id)

    def _otlp_app(self) -> Any:
        if self._otlp is None:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            exporter = InMemorySpanExporter()
            provider = TracerProvider(
                resource=Resource.create({"service.name": "fretcoach"}),
                id_generator=SeededIds(self.rng),  # type: ignore[arg-type]
            )
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            self._otlp = (provider.get_tracer("chaos"), exporter)
        return self._otlp

    async def _otlp_trace(self) -> None:
        """One trace as an instrumented app exports it: the model call's span in one record,
        the root's in a later one, unkeyed (any partition), protobuf or OTLP/JSON."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        tracer, exporter = self._otlp_app()
        self.counter += 1
        n = self.counter
        question = [{"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]}]
        answer = [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": f"answer {n}: loop the bar at 60 bpm"}],
                "finish_reason": "stop",
            }
        ]
        with tracer.start_as_current_span(HUB) as root:
            root.set_attribute("app.user_tier", "pro")
            with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
                llm.set_attribute("gen_ai.input.messages", orjson.dumps(question).decode())
                llm.set_attribute("gen_ai.output.messages", orjson.dumps(answer).decode())
        spans = list(exporter.get_finished_spans())
        exporter.clear()
        trace_id = f"{spans[0].context.trace_id:032x}"
        self.ledger.traces[trace_id] = "otlp"
        for span in spans:  # the model call's span ended first
            raw = encode_spans([span]).SerializeToString()
            value = as_otlp_json(raw) if self.rng.random() < 0.5 else raw
            await self._send(self.names.otlp, None, value, "spans", trace_id)


# --- workers and faults ----------------------------------------------------------------


class Fleet:
    """The worker processes of one group, and the faults done to them."""

    def __init__(
        self, bootstrap: str, names: Names, tmp: Path, env: dict[str, str], say: Say
    ) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.tmp = tmp
        self.env = env
        self.say = say
        self.workers: list[Worker] = []
        self.paused: set[int] = set()  # ports of workers under SIGSTOP
        self.asked: set[int] = set()  # ports of workers we stopped or killed
        self.unasked_exits: list[str] = []
        self.anomalies: list[str] = []

    def start(self) -> Worker:
        worker = Worker(self.bootstrap, self.names, self.tmp, **self.env).start()
        self.workers.append(worker)
        return worker

    async def ready(self, workers: list[Worker], timeout: float) -> None:
        """Wait until each of ``workers`` has finished its first recovery."""
        deadline = time.monotonic() + timeout
        while not all("Worker ready" in w.log() for w in workers):
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not ready within {timeout:.0f} s: {self.tmp}")
            await asyncio.sleep(0.5)

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.process and w.process.poll() is None]

    def running(self) -> list[Worker]:
        return [w for w in self.alive() if w.port not in self.paused]

    def note_exits(self) -> None:
        """Workers that exited without being told to."""
        for worker in self.workers:
            assert worker.process
            code = worker.process.poll()
            if code is None or worker.port in self.asked:
                continue
            self.asked.add(worker.port)
            tail = " | ".join(worker.log().strip().splitlines()[-5:])
            self.unasked_exits.append(f"worker {worker.port} exited ({code}): {tail[-600:]}")
            self.say(f"!! worker {worker.port} exited on its own with code {code}")

    async def kill9(self, worker: Worker) -> None:
        assert worker.process
        self.asked.add(worker.port)
        worker.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.process.wait, 30)

    async def sigterm(self, worker: Worker, timeout: float = 60.0) -> None:
        assert worker.process
        self.asked.add(worker.port)
        worker.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(worker.process.wait, timeout)
        except subprocess.TimeoutExpired:
            self.anomalies.append(
                f"worker {worker.port} still running {timeout:.0f} s after SIGTERM"
            )
            await self.kill9(worker)

    async def sigstop(self, worker: Worker, seconds: float) -> None:
        assert worker.process
        self.paused.add(worker.port)
        worker.process.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            worker.process.send_signal(signal.SIGCONT)
            self.paused.discard(worker.port)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.sigterm(w) for w in self.alive()))

    def kill_all(self) -> None:
        for worker in self.alive():
            assert worker.process
            self.asked.add(worker.port)
            worker.process.send_signal(signal.SIGCONT)
            worker.process.kill()
            worker.process.wait(10)

    async def restart_all(self, count: int) -> None:
        """Every worker killed (-9) and ``count`` new ones started: the way out of a stall."""
        for worker in self.alive():
            await self.kill9(worker)
        fresh = [self.start() for _ in range(count)]
        try:
            await self.ready(fresh, timeout=180)
        except TimeoutError as exc:
            self.anomalies.append(str(exc))

    def group_state(self) -> str:
        """Each live worker's last group join and sync, from its log (a stalled group)."""
        said = []
        for worker in self.alive():
            joins = 0
            last_join = last_sync = "never"
            for line in worker.log().splitlines():
                if JOINED.search(line):
                    joins += 1
                    last_join = line[1:24] + " " + line[line.index("(generation") :][:16]
                elif "Successfully synced group" in line:
                    joins = 0
                    last_sync = line[1:24]
            said.append(
                f"worker {worker.port}: last sync {last_sync}, {joins} joins since, last {last_join}"
            )
        return "; ".join(said)

    def owners(self, topic: str, partition: int) -> list[str]:
        """Which worker was assigned ``topic[partition]`` at each rebalance, from the logs."""
        found = []
        for worker in self.workers:
            generation = "?"
            lines = worker.log().splitlines()
            for n, line in enumerate(lines):
                if match := JOINED.search(line):
                    generation = match["generation"]
                if "Setting newly assigned partitions" not in line:
                    continue
                for row in lines[n + 1 : n + 40]:
                    if "for group" in row:
                        break
                    cells = [c.strip() for c in row.split("|")]
                    if len(cells) > 2 and cells[1] == topic and partition in numbers(cells[2]):
                        found.append(f"{line[1:24]} generation {generation}: worker {worker.port}")
        return sorted(found)

    def generations(self) -> set[int]:
        found: set[int] = set()
        for worker in self.workers:
            for match in JOINED.finditer(worker.log()):
                if match["group"] == self.names.group:
                    found.add(int(match["generation"]))
        return found

    def tracebacks(self) -> list[str]:
        return [
            f"worker {w.port}: {line}"
            for w in self.workers
            for line in w.log().splitlines()
            if "Traceback" in line or "[ERROR]" in line or "CRITICAL" in line
        ]


def numbers(text: str) -> set[int]:
    """``{0-2, 5}`` -> {0, 1, 2, 5} (Faust's partition sets in its logs)."""
    found: set[int] = set()
    for part in text.strip("{} ").split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit():
            found.update(range(int(low), int(high or low) + 1))
    return found


class StallWatch:
    """Whether the group still commits: a stall is no commit on the source topics for
    ``stall_s`` while records wait there."""

    def __init__(self, bootstrap: str, group: str, sources: list[str], stall_s: float) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.sources = sources
        self.stall_s = stall_s
        self.tps: list[TopicPartition] = []
        self.total = -1
        self.since = time.monotonic()

    async def stalled(self) -> str | None:
        if not self.tps:
            self.tps = await partitions_of(self.bootstrap, self.sources)
        ends = await end_offsets(self.bootstrap, self.tps)
        committed = await committed_offsets(self.bootstrap, self.group, self.tps)
        total = sum(c or 0 for c in committed.values())
        behind = sum(ends[tp] - (committed[tp] or 0) for tp in self.tps)
        now = time.monotonic()
        if total != self.total or not behind:
            self.total, self.since = total, now
            return None
        if now - self.since < self.stall_s:
            return None
        return f"no source offset committed for {now - self.since:.0f} s, {behind} records waiting"

    def reset(self) -> None:
        self.total, self.since = -1, time.monotonic()


async def describe_group(bootstrap: str, group: str) -> str:
    """The group as the broker describes it: state, protocol, members."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
        _, _, state, _, protocol, members = response.groups[0]
        return f"state {state!r}, protocol {protocol!r}, {len(members)} members"
    except Exception as exc:  # evidence only: say why there is none
        return f"not described ({exc!r})"
    finally:
        await admin.close()


async def on_stall(
    config: ChaosConfig, fleet: Fleet, watch: StallWatch, report: ChaosReport, say: Say
) -> None:
    """A stalled group: the evidence is recorded as a violation; then, while recoveries are
    allowed, every worker is replaced so the run can go on."""
    stalled = await watch.stalled()
    if stalled is None:
        return
    evidence = f"{stalled}; broker: {await describe_group(watch.bootstrap, watch.group)}; "
    evidence += fleet.group_state()
    say(f"!! stalled: {evidence}")
    report.violations.add("stalled", evidence)
    if len(report.violations.found["stalled"]) <= config.max_recoveries:
        say(f"replacing every worker with {config.workers} new ones")
        await fleet.restart_all(config.workers)
        report.recoveries += 1
    watch.reset()


# --- reading the topics ----------------------------------------------------------------


async def end_offsets(bootstrap: str, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's real end offset: the embedded broker's ListOffsets answers the last
    batch's base offset + 1, so take the high watermark from a fetch there."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        reported = await consumer.end_offsets(list(tps))
    finally:
        await consumer.stop()
    fetched = await fetched_highwaters(bootstrap, reported)  # type: ignore[arg-type]
    return {TopicPartition(tp.topic, tp.partition): end for tp, end in fetched.items()}


async def partitions_of(bootstrap: str, topics: Iterable[str]) -> list[TopicPartition]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()  # a metadata round trip for every topic
        return [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
    finally:
        await consumer.stop()


class TopicLog:
    """Every record of some topics from their start (a group-less consumer), read on."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.records: dict[str, list[ConsumerRecord[bytes, bytes]]] = {t: [] for t in topics}
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        self.tps: list[TopicPartition] = []

    async def __aenter__(self) -> TopicLog:
        await self.consumer.start()
        self.tps = await partitions_of(self.bootstrap, self.topics)
        self.consumer.assign(self.tps)
        await self.consumer.seek_to_beginning(*self.tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def poll(self, timeout_ms: int = 500) -> int:
        batch = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=5000)
        for tp, records in batch.items():
            self.records[tp.topic].extend(records)
        return sum(map(len, batch.values()))

    async def read_to_end(self, timeout: float = 120.0) -> None:
        ends = await end_offsets(self.bootstrap, self.tps)
        deadline = time.monotonic() + timeout
        while True:
            behind = [tp for tp in self.tps if await self.consumer.position(tp) < ends[tp]]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {behind} to their end offsets {ends}")
            await self.poll(300)

    def values(self, topic: str) -> list[dict[str, Any]]:
        return [orjson.loads(r.value) for r in self.records[topic] if r.value]


async def read_range(bootstrap: str, tp: TopicPartition, start: int, end: int) -> list[Any]:
    """The records of one partition from ``start`` up to ``end``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    records: list[Any] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + 60
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=300)
            records.extend(r for r in batch.get(tp, []) if r.offset < end)
    finally:
        await consumer.stop()
    return records


async def committed_offsets(
    bootstrap: str, group: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        return {tp: await consumer.committed(tp) for tp in tps}
    finally:
        await consumer.stop()


# --- the invariants --------------------------------------------------------------------


@dataclass
class Expected:
    """What the rule set makes of the traffic: the hub trace rules, each kind's thread rules."""

    trace_rules: set[str]
    thread_rules: dict[str, set[str]]

    @classmethod
    def from_pack(cls) -> Expected:
        rules = fretcoach_rules()
        hub = {
            r.id
            for r in rules.for_scope("trace")
            if r.filter is not None and HUB in (r.filter.trace_names or [])
        }
        kinds = ("session", "conversation")
        return cls(hub, {kind: {r.id for r in rules.thread_rules(kind)} for kind in kinds})


class Violations:
    """Violations by kind, with every example kept (the table shows the first few)."""

    def __init__(self) -> None:
        self.found: dict[str, list[str]] = defaultdict(list)

    def add(self, kind: str, example: str) -> None:
        self.found[kind].append(example)

    def __bool__(self) -> bool:
        return any(self.found.values())

    def total(self) -> int:
        return sum(map(len, self.found.values()))


def score_value(score: dict[str, Any]) -> tuple[Any, ...]:
    """What every copy of one score id must agree on."""
    thread = score.get("thread") or {}
    return (
        score.get("value"),
        score.get("raw_value"),
        score.get("label"),
        score.get("status"),
        score.get("criterion"),
        score.get("rule_id"),
        score.get("target_id"),
        thread.get("kind"),
        thread.get("close_seq"),
        thread.get("turn_count"),
        thread.get("dropped_turns"),
    )


def check_scores(scores: list[dict[str, Any]], found: Violations) -> dict[str, dict[str, Any]]:
    """Score ids with one value each, none ``error``; returns one copy per score id."""
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for score in scores:
        by_id[score["score_id"]].append(score)
    for score_id, copies in by_id.items():
        values = sorted({score_value(c) for c in copies}, key=repr)
        if len(values) > 1:
            found.add("score_id_two_values", f"{score_id} ({copies[0]['target_id']}): {values}")
    for score in scores:
        if score.get("status") == "error":
            found.add(
                "score_error",
                f"{score['score_id']} {score['rule_id']} {score['target_id']}: "
                f"{score.get('status_reason')}",
            )
    return {score_id: copies[0] for score_id, copies in by_id.items()}


def check_traces(
    ledger: Ledger,
    decisions: list[dict[str, Any]],
    scores: dict[str, dict[str, Any]],
    expected: Expected,
    found: Violations,
) -> None:
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in decisions:
        if "trace_id" in message:
            by_trace[message["trace_id"]].append(message)
    for trace_id, how in ledger.traces.items():
        messages = by_trace.get(trace_id)
        if not messages:
            found.add("trace_without_decisions", f"{trace_id} ({how})")
            continue
        for message in messages:
            outcomes = {d["rule_id"]: d for d in message["decisions"]}
            for rule in sorted(expected.trace_rules):
                decision = outcomes.get(rule)
                if decision is None or decision["outcome"] != "scored":
                    said = decision and (decision["outcome"], decision.get("detail"))
                    found.add("trace_not_scored", f"{trace_id} ({how}) {rule}: {said}")
            for decision in message["decisions"]:
                score_id = decision.get("score_id")
                if decision["outcome"] == "scored" and score_id and score_id not in scores:
                    found.add(
                        "score_missing", f"{trace_id} ({how}) {decision['rule_id']}: {score_id}"
                    )


def check_closes(
    ledger: Ledger, scores: dict[str, dict[str, Any]], expected: Expected, found: Violations
) -> dict[str, int]:
    """Each thread's closes against its rounds (see the module docstring); returns counts."""
    closes: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for score in scores.values():
        if score.get("scope") == "thread" and score.get("thread"):
            closes[score["target_id"]][score["thread"]["close_seq"]].append(score)
    stats: Counter[str] = Counter()
    for thread_id, thread in ledger.threads.items():
        if not thread.rounds:
            continue
        stats[f"{thread.kind}s"] += 1
        stats[f"{thread.kind} rounds"] += len(thread.rounds)
        seen = closes.get(thread_id, {})
        stats[f"{thread.kind} closes"] += len(seen)
        actual: list[tuple[int, int]] = []
        reasons_seen: list[str] = []
        rules = expected.thread_rules[thread.kind]
        for close_seq in sorted(seen):
            copies = seen[close_seq]
            counts = {s["thread"]["turn_count"] for s in copies}
            reasons = sorted({s["thread"]["close_reason"] for s in copies})
            if len(counts) > 1:
                found.add("close_wrong", f"{thread_id} close {close_seq}: turn counts {counts}")
            if missing := rules - {s["rule_id"] for s in copies}:
                found.add("close_incomplete", f"{thread_id} close {close_seq}: no {missing}")
            actual.append((close_seq, max(counts)))
            reasons_seen.append("/".join(reasons))
            if reasons != ["end"]:
                stats["closes not by their end"] += 1
        want = thread.expected_closes()
        if actual == want or thread.closes_as_expected(actual):
            continue
        trail = (
            f"{thread_id} ({thread.kind}): closes {actual} by {reasons_seen}, "
            f"rounds produced {want}"
        )
        if len(actual) < len(want) and actual == want[: len(actual)]:
            found.add("close_missing", trail)  # its last rounds never closed: a stall
        elif actual and len(actual) >= len(want) and actual[-1][1] < thread.turns:
            found.add("turn_lost", trail)
        elif actual[-1][1] == thread.turns and any(r != "end" for r in reasons_seen):
            found.add("early_close", trail)  # closed idle mid-round; the rest reopened it
        else:
            found.add("close_wrong", trail)
    return dict(stats)


def check_dead_letters(records: list[Any], found: Violations) -> Counter[str]:
    reasons: Counter[str] = Counter()
    for record in records:
        headers = {k: v.decode(errors="replace") for k, v in record.headers}
        reason = headers.get("scorer.error.reason", "?")
        reasons[reason] += 1
        if reason == "engine_error":
            found.add(
                "dead_letter_engine_error",
                f"{headers.get('scorer.source.topic')}[{headers.get('scorer.source.partition')}]"
                f"@{headers.get('scorer.source.offset')}: {headers.get('scorer.error', '')[:300]}",
            )
    return reasons


def event_type(record: Any) -> str:
    try:
        document = orjson.loads(record.value)
    except orjson.JSONDecodeError:
        return "not JSON"
    return str(document.get("type")) if isinstance(document, dict) else "not an object"


async def check_offsets(
    bootstrap: str,
    group: str,
    sources: list[str],
    internal: list[str],
    found: Violations,
    lagging: list[tuple[TopicPartition, int, int]],
) -> dict[str, Any]:
    """Committed against end offsets, every partition of the source and internal topics;
    on an internal topic, what lies past the committed offset is classified. Partitions
    found behind go to ``lagging`` (partition, committed, end)."""
    tps = await partitions_of(bootstrap, [*sources, *internal])
    ends = await end_offsets(bootstrap, tps)
    committed = await committed_offsets(bootstrap, group, tps)
    tail: Counter[str] = Counter()
    for tp in tps:
        end, done = ends[tp], committed[tp]
        where = f"{tp.topic}[{tp.partition}]"
        if done is None:
            if end > 0:
                found.add("offset_not_committed", f"{where}: nothing committed, end {end}")
                lagging.append((tp, 0, end))
            continue
        if done > end:
            found.add("offset_not_committed", f"{where}: committed {done} past the end {end}")
        if done >= end:
            continue
        if tp.topic in sources:
            found.add("offset_not_committed", f"{where}: committed {done}, end {end}")
            lagging.append((tp, done, end))
            continue
        data = []
        for record in await read_range(bootstrap, tp, done, end):
            kind = event_type(record)
            tail[kind] += 1
            if kind not in CLOCK_EVENTS | {"published"}:
                data.append(f"@{record.offset} {kind}")
        if data:
            found.add(
                "offset_not_committed",
                f"{where}: committed {done}, end {end}, not clock events: {data[:8]}",
            )
            lagging.append((tp, done, end))
    return {
        "partitions": len(tps),
        "records": sum(ends.values()),
        "at end": sum(1 for tp in tps if committed[tp] == ends[tp]),
        "tail": dict(tail),
    }


# --- the run ---------------------------------------------------------------------------


@dataclass
class ChaosConfig:
    cycles: int = 200
    kind: str = "tansu"
    seed: int = 23
    interval: tuple[float, float] = (4.0, 8.0)  # seconds between faults
    stop_s: tuple[float, float] = (8.0, 12.0)  # SIGSTOP length (session timeout: 6 s)
    workers: int = 3
    max_workers: int = 4
    rate: float = 1.0  # traffic, a multiple of the default pace
    judge_latency_s: float = 0.05
    drain_timeout_s: float = 600.0
    seek_delay_s: float = 0.0  # SCORER_TEST_SEEK_DELAY_S on every worker
    changelog_delay_s: float = 0.0  # SCORER_TEST_CHANGELOG_DELAY_S on every worker
    stall_s: float = 90.0  # no source commit this long while records wait: a stall
    max_recoveries: int = 5  # stalls after which every worker is replaced and the run goes on


@dataclass
class ChaosReport:
    config: ChaosConfig
    cycles: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    workers_started: int = 0
    generations: int = 0
    produced: Counter[str] = field(default_factory=Counter)
    read: dict[str, int] = field(default_factory=dict)
    scores: int = 0
    score_ids: int = 0
    threads: dict[str, int] = field(default_factory=dict)
    dead_letters: Counter[str] = field(default_factory=Counter)
    offsets: dict[str, Any] = field(default_factory=dict)
    violations: Violations = field(default_factory=Violations)
    anomalies: list[str] = field(default_factory=list)
    errors_logged: list[str] = field(default_factory=list)
    chaos_s: float = 0.0
    drain_s: float = 0.0
    wall_s: float = 0.0
    drained: bool = False
    recoveries: int = 0
    lagging: list[tuple[TopicPartition, int, int]] = field(default_factory=list)
    logs: str = ""

    def table(self, examples: int = 3) -> str:
        c = self.config
        rows = [
            ("kind / seed", f"{c.kind} / {c.seed}"),
            ("cycles", str(self.cycles)),
            ("faults", ", ".join(f"{k} {self.faults[k]}" for k in FAULTS)),
            ("workers started", str(self.workers_started)),
            ("rebalances (group generations)", str(self.generations)),
            ("produced", ", ".join(f"{k} {v}" for k, v in sorted(self.produced.items()))),
            ("threads", ", ".join(f"{k} {v}" for k, v in sorted(self.threads.items()))),
            ("read", ", ".join(f"{k} {v}" for k, v in self.read.items())),
            ("scores", f"{self.scores} events, {self.score_ids} score ids"),
            ("dead letters", ", ".join(f"{k} {v}" for k, v in self.dead_letters.items()) or "0"),
            ("offsets", ", ".join(f"{k} {v}" for k, v in self.offsets.items())),
            ("drained", "yes" if self.drained else "NO (timed out)"),
            ("stalls recovered (all workers replaced)", str(self.recoveries)),
            (
                "wall",
                f"{self.wall_s:.0f} s (chaos {self.chaos_s:.0f} s, drain {self.drain_s:.0f} s)",
            ),
            ("errors logged by workers", str(len(self.errors_logged))),
            ("violations", str(self.violations.total())),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
        for kind, found in sorted(self.violations.found.items()):
            targets = {example.split(" ", 1)[0] for example in found}
            per = f" ({len(targets)} traces or threads)" if kind in PER_TARGET else ""
            lines.append(f"  {kind}: {len(found)}{per}")
            lines.extend(f"    {example[:400]}" for example in found[:examples])
        for note in self.anomalies[:examples]:
            lines.append(f"  anomaly: {note[:400]}")
        for line in self.errors_logged[:examples]:
            lines.append(f"  logged: {line[:300]}")
        lines.append(f"logs: {self.logs}")
        return "\n".join(lines)


async def run_chaos(
    config: ChaosConfig, bootstrap: str, tmp: Path, say: Say = lambda _: None
) -> ChaosReport:
    """One chaos run against the broker at ``bootstrap``; worker logs under ``tmp``."""
    started = time.monotonic()
    rng = random.Random(config.seed)
    names = Names()
    report = ChaosReport(config, logs=str(tmp))
    ledger = Ledger()
    sources = [names.traces, names.sessions, names.otlp]
    internal = [
        f"{names.group}-thread-events",
        f"{names.group}-otlp-assembly",
        f"{names.group}-otlp-traces",
    ]
    await ensure_topics(bootstrap, sources, PARTITIONS)
    with PromptJudge(latency_s=config.judge_latency_s) as judge:
        env = {
            "OPENAI_BASE_URL": judge.base_url,
            "OPENAI_API_KEY": "sk-chaos",
            "SCORER_BROKER_KIND": config.kind,
            "SCORER_THREAD_INACTIVITY_GAP_S": str(GAP_S),
            "SCORER_OTLP_GRACE_S": "1",
        }
        if config.seek_delay_s:
            env["SCORER_TEST_SEEK_DELAY_S"] = str(config.seek_delay_s)
        if config.changelog_delay_s:
            env["SCORER_TEST_CHANGELOG_DELAY_S"] = str(config.changelog_delay_s)
        if config.kind == "kafka":
            # Faust's own transport trusts ListOffsets, which the embedded broker gets right
            # only for batches of one record (table recovery reads up to the end offsets)
            env["SCORER_TEST_PRODUCER_BATCH_BYTES"] = "1"
            # and confirms a gap in a fetch with one refetch, as a Kafka cluster allows; the
            # embedded broker can serve a batch before an earlier one is written (workers
            # racing on an internal topic's partition): give it that broker's patience
            env["SCORER_TEST_GAP_PATIENCE_S"] = "5"
        fleet = Fleet(bootstrap, names, tmp, env, say)
        traffic = Traffic(bootstrap, names, rng, config.rate, ledger)
        try:
            for _ in range(config.workers):
                fleet.start()
            # traffic begins once the group is at work: records produced before a group's
            # first start are a start-up backlog, not a hand-over
            await fleet.ready(fleet.workers, timeout=180)
            await traffic.start()
            say(f"{config.workers} workers ready; traffic and faults begin")
            await faults(config, fleet, rng, report, sources, say)
            report.chaos_s = time.monotonic() - started
            say("faults over: ending every open session and conversation")
            await traffic.finish()
            drain_started = time.monotonic()
            if not fleet.running():
                fleet.start()
            report.drained = await drain(config, fleet, ledger, sources, internal, report, say)
            report.drain_s = time.monotonic() - drain_started
            fleet.note_exits()
            say("stopping the workers (SIGTERM)")
            await fleet.stop_all()
        finally:
            fleet.kill_all()
    await check(report, bootstrap, names, ledger, sources, internal)
    report.workers_started = len(fleet.workers)
    report.generations = len(fleet.generations())
    report.anomalies += fleet.anomalies
    report.errors_logged = fleet.tracebacks()
    for exit_note in fleet.unasked_exits:
        report.violations.add("worker_exited", exit_note)
    roles = {names.traces: "traces", names.sessions: "sessions", names.otlp: "otlp"}
    report.produced = ledger.counts(roles)
    report.produced["otlp traces"] = sum(1 for how in ledger.traces.values() if how == "otlp")
    report.wall_s = time.monotonic() - started
    if report.violations:
        (tmp / "violations.json").write_bytes(
            orjson.dumps(report.violations.found, option=orjson.OPT_INDENT_2)
        )
        report.anomalies += await trails(bootstrap, names, ledger, report, tmp)
    if report.lagging:
        report.anomalies += await offsets_trail(bootstrap, fleet, report.lagging, tmp)
    return report


async def offsets_trail(
    bootstrap: str, fleet: Fleet, lagging: list[tuple[TopicPartition, int, int]], tmp: Path
) -> list[str]:
    """For partitions left behind: who owned them at each rebalance, and the records at
    their committed offset, to ``offsets.txt``."""
    lines = []
    for tp, done, end in lagging[:8]:
        lines.append(f"== {tp.topic}[{tp.partition}]: committed {done}, end {end}")
        lines += [f"  owner {owner}" for owner in fleet.owners(tp.topic, tp.partition)]
        for r in await read_range(bootstrap, tp, max(0, done - 3), min(end, done + 12)):
            key = (r.key or b"").decode(errors="replace")
            lines.append(f"  @{r.offset} t={r.timestamp} {key}: {summary(r)[:160]}")
    path = tmp / "offsets.txt"
    path.write_text("\n".join(lines) + "\n")
    return [f"owners and records of the partitions left behind are in {path}"]


async def faults(
    config: ChaosConfig,
    fleet: Fleet,
    rng: random.Random,
    report: ChaosReport,
    sources: list[str],
    say: Say,
) -> None:
    """One fault a cycle, on a random worker; at least one worker always runs."""
    watch = StallWatch(fleet.bootstrap, fleet.names.group, sources, config.stall_s)
    for cycle in range(1, config.cycles + 1):
        fleet.note_exits()
        await on_stall(config, fleet, watch, report, say)
        alive, running = fleet.alive(), fleet.running()
        options = []
        if len(alive) < config.max_workers:
            options.append("start")
            if len(alive) < config.workers:
                options += ["start", "start"]  # back towards three
        if len(running) >= 2:
            options += ["kill9", "sigterm", "sigstop"]
        if not options:  # the only running worker, and four alive: one is under SIGSTOP
            options = ["start"]
        fault = rng.choice(options)
        target = rng.choice(running) if fault != "start" else None
        report.faults[fault] += 1
        report.cycles = cycle
        seconds = rng.uniform(*config.stop_s) if fault == "sigstop" else 0.0
        whom = f"worker {target.port}" if target else "a new worker"
        said = f" for {seconds:.1f} s" if seconds else ""
        say(f"cycle {cycle}/{config.cycles}: {fault} {whom}{said} ({len(alive)} alive)")
        if fault == "start":
            fleet.start()
        elif fault == "kill9":
            assert target
            await fleet.kill9(target)
        elif fault == "sigterm":
            assert target
            await fleet.sigterm(target)
        else:
            assert target
            await fleet.sigstop(target, seconds)
        await asyncio.sleep(rng.uniform(*config.interval))


async def drain(
    config: ChaosConfig,
    fleet: Fleet,
    ledger: Ledger,
    sources: list[str],
    internal: list[str],
    report: ChaosReport,
    say: Say,
) -> bool:
    """Wait until every trace has its decisions and scores, every round its close and the
    sources are committed to their end; then until the internal topics are committed up to
    their end offsets of that moment (the workers' clocks write to them all the time). False
    when the drain timeout passed first."""
    bootstrap, names = fleet.bootstrap, fleet.names
    expected = Expected.from_pack()
    deadline = time.monotonic() + config.drain_timeout_s
    watch = StallWatch(bootstrap, names.group, sources, config.stall_s)
    source_tps = await partitions_of(bootstrap, sources)
    ends = await end_offsets(bootstrap, source_tps)
    async with TopicLog(bootstrap, [names.scores, names.decisions]) as log:
        last_said = 0.0
        while True:
            if time.monotonic() > deadline:
                report.anomalies.append(f"drain timed out; {fleet.group_state()}")
                return False
            while await log.poll(200):
                pass
            missing = outstanding(ledger, log, expected)
            committed = await committed_offsets(bootstrap, names.group, source_tps)
            behind = sum(ends[tp] - (committed[tp] or 0) for tp in source_tps)
            if not missing and not behind:
                break
            if time.monotonic() - last_said > 15:
                say(f"draining: {missing} outputs missing, {behind} source records uncommitted")
                last_said = time.monotonic()
            await on_stall(config, fleet, watch, report, say)
            await asyncio.sleep(2)
    say("everything scored, every source committed to its end")
    internal_tps = await partitions_of(bootstrap, internal)
    marks = await end_offsets(bootstrap, internal_tps)
    while time.monotonic() < deadline:
        committed = await committed_offsets(bootstrap, names.group, internal_tps)
        behind = sum(max(0, marks[tp] - (committed[tp] or 0)) for tp in internal_tps)
        if not behind:
            say("internal topics committed past their end offsets of then")
            await asyncio.sleep(3)  # late duplicates of the last closes land too
            return True
        await asyncio.sleep(2)
    report.anomalies.append(f"internal topics not committed in time; {fleet.group_state()}")
    return False


def outstanding(ledger: Ledger, log: TopicLog, expected: Expected) -> int:
    """Decision records, scores and closes the run still waits for."""
    scores = {s["score_id"]: s for s in log.values(log.topics[0])}
    decided: dict[str, dict[str, Any]] = {}
    for message in log.values(log.topics[1]):
        if "trace_id" in message:
            decided[message["trace_id"]] = message
    missing = 0
    for trace_id in ledger.traces:
        message = decided.get(trace_id)
        if message is None:
            missing += 1
            continue
        ids = [d.get("score_id") for d in message["decisions"] if d["outcome"] == "scored"]
        missing += sum(1 for score_id in ids if score_id not in scores)
    closes: dict[str, set[int]] = defaultdict(set)
    for score in scores.values():
        if score.get("scope") == "thread" and score.get("thread"):
            closes[score["target_id"]].add(score["thread"]["close_seq"])
    for thread_id, thread in ledger.threads.items():
        missing += max(0, len(thread.rounds) - len(closes.get(thread_id, ())))
    return missing


async def check(
    report: ChaosReport,
    bootstrap: str,
    names: Names,
    ledger: Ledger,
    sources: list[str],
    internal: list[str],
) -> None:
    expected = Expected.from_pack()
    found = report.violations
    outputs = [names.scores, names.decisions, names.dlq]
    async with TopicLog(bootstrap, outputs) as log:
        await log.read_to_end()
    scores = log.values(names.scores)
    by_id = check_scores(scores, found)
    check_traces(ledger, log.values(names.decisions), by_id, expected, found)
    report.threads = check_closes(ledger, by_id, expected, found)
    report.dead_letters = check_dead_letters(log.records[names.dlq], found)
    report.offsets = await check_offsets(
        bootstrap, names.group, sources, internal, found, report.lagging
    )
    report.scores, report.score_ids = len(scores), len(by_id)
    report.read = {
        role: len(log.records[topic])
        for role, topic in zip(("scores", "decisions", "dlq"), outputs, strict=True)
    }


async def trails(
    bootstrap: str, names: Names, ledger: Ledger, report: ChaosReport, tmp: Path
) -> list[str]:
    """Where the records of the first threads and traces with a violation went: the source
    records, the internal topics' records and the tables' changelog states, to
    ``trail.txt``."""
    wanted: list[str] = []
    for found in report.violations.found.values():
        of_kind = 0
        for example in found:
            target = example.split(" ", 1)[0]
            known = target in ledger.threads or target in ledger.traces
            if known and target not in wanted and of_kind < 3:
                wanted.append(target)
                of_kind += 1
    if not wanted:
        return []
    lines = [
        f"sent {sent.topic}[{sent.partition}]@{sent.offset} {sent.what} {sent.thread}"
        for sent in ledger.sent
        if sent.thread in wanted
    ]
    group = names.group
    topics = [
        f"{group}-thread-events",
        f"{group}-threads-changelog",
        f"{group}-otlp-assembly",
        f"{group}-otlp-traces",
        f"{group}-otlp_traces-changelog",
        names.decisions,
    ]
    async with TopicLog(bootstrap, topics) as log:
        await log.read_to_end(300)
    for topic in topics:
        for r in log.records[topic]:
            key = (r.key or b"").decode(errors="replace")
            if not any(key == t or key.endswith(f"/{t}") for t in wanted):
                continue
            lines.append(f"{topic}[{r.partition}]@{r.offset} t={r.timestamp} {key}: {summary(r)}")
    path = tmp / "trail.txt"
    path.write_text("\n".join(lines) + "\n")
    return [f"the trail of {wanted} is in {path}"]


def summary(record: Any) -> str:
    """A record of an internal topic in a few words."""
    if not record.value:
        return "tombstone"
    try:
        document = orjson.loads(record.value)
    except orjson.JSONDecodeError:
        return repr(record.value[:120])
    if not isinstance(document, dict):
        return repr(record.value[:120])
    if "turns" in document:
        turns = [t.get("key") for t in document["turns"]]
        pending = [(p.get("close_seq"), p.get("reason")) for p in document.get("pending", [])]
        return (
            f"thread state: turns {turns}, closes {document.get('closes')}, open "
            f"{document.get('is_open')}, ended {document.get('ended')}, pending {pending}, "
            f"last_arrival {document.get('last_arrival')}"
        )
    if "decisions" in document:
        outcomes = Counter(d["outcome"] for d in document["decisions"])
        return f"decisions {dict(outcomes)} close_seq {document.get('close_seq')}"
    if "otlp" in document:
        return f"assembled trace: {document['otlp']}"
    if "spans" in document and isinstance(document["spans"], list):
        ids = [s.get("span_id") or s.get("name") for s in document["spans"] if isinstance(s, dict)]
        return f"{document.get('type', 'spans')}: {ids} arrival {document.get('arrival')}"
    return record.value[:200].decode(errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--kind", choices=["tansu", "kafka"], default="tansu")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--interval", type=float, nargs=2, default=[4.0, 8.0])
    parser.add_argument("--stop", type=float, nargs=2, default=[8.0, 12.0])
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--seek-delay", type=float, default=0.0)
    parser.add_argument("--changelog-delay", type=float, default=0.0)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    config = ChaosConfig(
        cycles=args.cycles,
        kind=args.kind,
        seed=args.seed,
        interval=tuple(args.interval),
        stop_s=tuple(args.stop),
        rate=args.rate,
        drain_timeout_s=args.drain_timeout,
        seek_delay_s=args.seek_delay,
        changelog_delay_s=args.changelog_delay,
    )
    tmp = args.dir or Path(tempfile.mkdtemp(prefix="chaos-"))
    tmp.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - began:7.1f} s] {line}", flush=True)

    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    try:
        report = asyncio.run(run_chaos(config, broker.bootstrap, tmp, say))
    finally:
        broker.stop()
    print(report.table(), flush=True)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
