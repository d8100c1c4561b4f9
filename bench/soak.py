"""Memory soak: worker RSS over a long steady mix on the embedded broker. Prints figures;
asserts nothing.

Starts the embedded broker, the scripted judge (``tests/scripted_judge.py``) and ``--workers``
``scorer worker`` processes (the FretCoach pack; closed threads kept ``--retention`` seconds
after a ``--gap`` of inactivity, assembled OTLP traces remembered ``--otlp-retention``), then
streams ``--rate`` records a second for ``--minutes``, in rounds of:

- three hub-coach conversations of three traces each (``thread_id``; three in four end with
  ``metadata.conversation_finished``, the rest close by inactivity) and one studio trace;
- three coaching sessions of three turns (three in four end with an ``end`` event);
- one conversation of two turns as OpenTelemetry spans (the model-call span and the root span
  in records of their own, protobuf and OTLP/JSON in turn; every other one ends).

Every ``--every`` seconds it reads each worker's RSS (``VmRSS`` of the worker's own process:
``scorer worker`` runs Faust in the process it starts in, it does not fork). At the end it
prints the samples, RSS at start, middle and end, the least-squares RSS slope over the second
half (MiB/min; the target is at most 0.1) and the records produced and scores read.

With ``--tracemalloc`` the worker is the same CLI started through a tiny in-process sampler
(``python -c``; nothing in ``stream/`` changes): ``PYTHONTRACEMALLOC`` traces every
allocation from interpreter start, a daemon thread writes the traced total every second and
dumps a snapshot when the soak asks (a request file, no signal: Faust's worker owns SIGUSR1
and SIGUSR2). Snapshots are taken at the middle and at the end of the traffic, and the
allocation sites that grew most between them are printed. RSS under tracemalloc includes
its own bookkeeping; the traced total is the figure to read then.

    python bench/soak.py [--minutes 30] [--rate 25] [--retention 30] [--gap 5] [--workers 1]
    python bench/soak.py --minutes 12 --tracemalloc [--frames 25] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from threads import rss_mib, slope
from throughput import SAMPLE, fetch_metrics, stop

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from otlp_records import as_otlp_json  # noqa: E402
from scripted_judge import MockJudge  # noqa: E402

HUB = next(t for t in SAMPLE if t["name"] == "hub-coach-chat")
STUDIO = [t for t in SAMPLE if t["name"] in ("studio-live-coach", "studio-ai-recommendation")]

# The worker under tracemalloc: the same CLI, with a sampler thread in its own process.
TRACING_WORKER = """
import os, sys, threading, time, tracemalloc
from pathlib import Path

out = Path(os.environ["SOAK_TRACEMALLOC_DIR"])

def sample():
    while True:
        time.sleep(1.0)
        current, peak = tracemalloc.get_traced_memory()
        (out / "traced.tmp").write_text(f"{time.time()} {current} {peak}")
        (out / "traced.tmp").replace(out / "traced")
        for request in sorted(out.glob("*.request")):
            snapshot = tracemalloc.take_snapshot()
            target = request.with_suffix(".pickle")
            snapshot.dump(str(target.with_suffix(".tmp")))
            target.with_suffix(".tmp").replace(target)
            request.unlink()

threading.Thread(target=sample, name="soak-tracemalloc", daemon=True).start()
sys.argv = ["scorer", "worker", "--loglevel", os.environ.get("SOAK_LOGLEVEL", "warn")]
from stream.cli import main
main()
"""


@dataclass
class Topics:
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        self.traces = f"soak-traces-{self.suffix}"
        self.sessions = f"soak-sessions-{self.suffix}"
        self.otlp = f"soak-otlp-{self.suffix}"
        self.scores = f"soak-scores-{self.suffix}"
        self.decisions = f"soak-decisions-{self.suffix}"
        self.dlq = f"soak-dlq-{self.suffix}"
        self.app_id = f"soak-{self.suffix}"

    def all(self) -> list[str]:
        return [self.traces, self.sessions, self.otlp, self.scores, self.decisions, self.dlq]


class SoakWorker:
    """One ``scorer worker`` process (or the same CLI under the tracemalloc sampler)."""

    def __init__(
        self, n: int, bootstrap: str, topics: Topics, tmp: Path, args: argparse.Namespace
    ) -> None:
        self.port = free_port()
        self.log_path = tmp / f"worker-{n}.log"
        self.trace_dir = tmp / f"tracemalloc-{n}" if args.tracemalloc else None
        env = {
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("SCORER_", "OPENAI_", "PYTHONTRACEMALLOC"))
            },
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SCORER_BROKER_KIND": "tansu",
            "SCORER_APP_ID": topics.app_id,
            "SCORER_TRACES_TOPIC": topics.traces,
            "SCORER_SESSIONS_TOPIC": topics.sessions,
            "SCORER_OTLP_TOPIC": topics.otlp,
            "SCORER_SCORES_TOPIC": topics.scores,
            "SCORER_DECISIONS_TOPIC": topics.decisions,
            "SCORER_DLQ_TOPIC": topics.dlq,
            "SCORER_WEB_PORT": str(self.port),
            "SCORER_DATA_DIR": str(tmp / f"data-{n}"),
            "SCORER_PACKS": '["fretcoach"]',
            "SCORER_THREAD_INACTIVITY_GAP_S": f"{args.gap:g}",
            "SCORER_THREAD_RETENTION_S": f"{args.retention:g}",
            "SCORER_OTLP_RETENTION_S": f"{args.otlp_retention:g}",
            "OPENAI_BASE_URL": args.judge_url,
            "OPENAI_API_KEY": "sk-soak",
        }
        scorer = Path(sys.executable).parent / "scorer"
        command = [str(scorer), "worker", "--loglevel", args.loglevel]
        if self.trace_dir is not None:
            self.trace_dir.mkdir()
            env |= {
                "PYTHONTRACEMALLOC": str(args.frames),
                "SOAK_TRACEMALLOC_DIR": str(self.trace_dir),
                "SOAK_LOGLEVEL": args.loglevel,
            }
            command = [sys.executable, "-c", TRACING_WORKER]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid

    def metrics(self) -> str:
        try:
            return fetch_metrics(self.port)
        except OSError:
            return ""

    def children(self) -> list[int]:
        """Processes this worker started (none: Faust runs in the process itself)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def traced_mib(self) -> float | None:
        """Python memory tracemalloc traces in the worker now (MiB), if it is traced."""
        if self.trace_dir is None:
            return None
        try:
            return int((self.trace_dir / "traced").read_text().split()[1]) / 2**20
        except (OSError, IndexError, ValueError):
            return None

    def snapshot(self, name: str, timeout: float = 300.0) -> Path | None:
        """Ask the sampler for a tracemalloc snapshot; its file, once written."""
        if self.trace_dir is None:
            return None
        (self.trace_dir / f"{name}.request").touch()
        target = self.trace_dir / f"{name}.pickle"
        deadline = time.monotonic() + timeout
        while not target.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        return target if target.exists() else None


def metric_sum(text: str, name: str) -> float:
    """Every sample of ``name`` summed over its labels."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


# --- the workload ----------------------------------------------------------------------


def now_iso(offset_s: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + offset_s, UTC).isoformat()


def hub_turn(thread: str, n: int, finished: bool) -> dict[str, Any]:
    document = orjson.loads(orjson.dumps(HUB))
    document["id"] = f"{thread}-t{n}"
    document["thread_id"] = thread
    document["start_time"] = document["end_time"] = now_iso()
    document["input"]["messages"][-1]["content"] = f"question {n}: how do I keep time in {thread}?"
    document["output"]["messages"][-1]["content"] = (
        f"answer {n}: loop the bar at 70 bpm with a click on 2 and 4 ({thread})."
    )
    if finished:
        document["metadata"]["conversation_finished"] = True
    return document


def studio_trace(n: int, prefix: str) -> dict[str, Any]:
    return dict(STUDIO[n % len(STUDIO)], id=f"{prefix}-studio-{n}", start_time=now_iso())


def session_turn(session: str, seq: int) -> dict[str, Any]:
    return {
        "session_id": session,
        "type": "turn",
        "seq": seq,
        "timestamp": now_iso(0.2 * seq),
        "project_name": "fretcoach",
        "metrics": {
            "pitch_accuracy": 0.9,
            "scale_conformity": 0.82,
            "timing_stability": 0.55 + seq / 50,
        },
        "feedback": "Timing Stability is your weakest metric; play with the metronome at 70 bpm "
        "and land each note on the click.",
    }


class SpanSource:
    """Conversations as an app instrumented with the OpenTelemetry SDK exports them."""

    def __init__(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "fretcoach"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("fretcoach.hub")
        self.records = itertools.count()

    def turn(self, conversation: str, n: int, finished: bool) -> list[bytes]:
        """One chat turn: the model call's span and the root span, one export record each."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        question = [{"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]}]
        answer = [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": f"answer {n}: slow down, loop the bar"}],
                "finish_reason": "stop",
            }
        ]
        with self.tracer.start_as_current_span("hub-coach-chat") as root:
            root.set_attribute("gen_ai.conversation.id", conversation)
            if finished:
                root.set_attribute("conversation_finished", True)
            with self.tracer.start_as_current_span("chat gpt-4o-mini") as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
                llm.set_attribute("gen_ai.input.messages", orjson.dumps(question).decode())
                llm.set_attribute("gen_ai.output.messages", orjson.dumps(answer).decode())
                llm.set_attribute("gen_ai.usage.input_tokens", 40)
                llm.set_attribute("gen_ai.usage.output_tokens", 12)
        spans = list(self.exporter.get_finished_spans())  # the child first, then the root
        self.exporter.clear()
        out = []
        for span in spans:
            raw = encode_spans([span]).SerializeToString()
            out.append(as_otlp_json(raw) if next(self.records) % 2 else raw)
        return out


Record = tuple[str, bytes | None, bytes]  # (topic, key, value)


def rounds(topics: Topics, spans: SpanSource) -> Iterator[list[Record]]:
    """The steady mix, one round at a time, each record built as it is produced (times are
    now); within a round, every thread's turn n goes out before any turn n + 1."""
    for r in itertools.count():
        prefix = f"{topics.suffix}-r{r}"
        steps: list[list[Record]] = [[], [], [], []]
        for c in range(3):
            thread = f"{prefix}-conv{c}"
            ends = (3 * r + c) % 4 != 0  # one in four closes by inactivity
            for n in range(3):
                doc = hub_turn(thread, n, finished=ends and n == 2)
                steps[n].append((topics.traces, doc["id"].encode(), orjson.dumps(doc)))
        studio = studio_trace(r, prefix)
        steps[0].append((topics.traces, studio["id"].encode(), orjson.dumps(studio)))
        for s in range(3):
            session = f"{prefix}-session{s}"
            for seq in range(3):
                steps[seq].append(
                    (topics.sessions, session.encode(), orjson.dumps(session_turn(session, seq)))
                )
            if (3 * r + s) % 4 != 0:
                end = {"session_id": session, "type": "end", "seq": 3, "timestamp": now_iso(0.6)}
                steps[3].append((topics.sessions, session.encode(), orjson.dumps(end)))
        conversation = f"{prefix}-otlp"
        for n in range(2):
            for raw in spans.turn(conversation, n, finished=r % 2 == 0 and n == 1):
                steps[n].append((topics.otlp, None, raw))
        yield from steps


# --- the soak --------------------------------------------------------------------------


@dataclass
class Sample:
    minutes: float  # since the traffic started
    produced: int
    scores: int
    rss: list[float]  # MiB, one per worker
    traced: list[float | None]  # MiB traced by tracemalloc, one per worker


@dataclass
class Tally:
    produced: Counter[str] = field(default_factory=Counter)
    scores: Counter[str] = field(default_factory=Counter)  # by "<scope> <status>"
    unscored: Counter[str] = field(default_factory=Counter)  # by "<rule>: <reason>"
    dead_letters: int = 0

    @property
    def scores_read(self) -> int:
        return sum(self.scores.values())


async def read_outputs(bootstrap: str, topics: Topics, tally: Tally, done: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        topics.scores, topics.dlq, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        while not done.is_set():
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                if tp.topic == topics.dlq:
                    tally.dead_letters += len(records)
                    continue
                for record in records:
                    score = orjson.loads(record.value)
                    tally.scores[f"{score['scope']} {score['status']}"] += 1
                    if score["status"] != "ok":
                        reason = str(score.get("status_reason"))[:100]
                        tally.unscored[f"{score['rule_id']}: {reason}"] += 1
    finally:
        await consumer.stop()


def describe(values: list[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


async def soak(
    bootstrap: str,
    topics: Topics,
    workers: list[SoakWorker],
    judge: MockJudge,
    args: argparse.Namespace,
) -> tuple[list[Sample], Tally, dict[str, list[Path | None]]]:
    tally = Tally()
    samples: list[Sample] = []
    snapshots: dict[str, list[Path | None]] = {}
    judge_calls = 0
    spans = SpanSource()
    seconds = args.minutes * 60
    done = asyncio.Event()
    reading = asyncio.create_task(read_outputs(bootstrap, topics, tally, done))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
    await producer.start()
    sent = 0
    started = time.monotonic()
    next_sample = started
    mid_snapshot = args.tracemalloc
    try:
        for step in rounds(topics, spans):
            now = time.monotonic()
            if now >= started + seconds:
                break
            if now >= next_sample:
                judge_calls += len(judge.requests)
                judge.requests.clear()  # the scripted judge keeps every request: not ours
                judge.statuses.clear()
                sample = Sample(
                    (now - started) / 60,
                    sent,
                    tally.scores_read,
                    [rss_mib(w.pid) for w in workers],
                    [w.traced_mib() for w in workers],
                )
                samples.append(sample)
                texts = await asyncio.gather(*(asyncio.to_thread(w.metrics) for w in workers))
                open_threads = sum(metric_sum(t, "scorer_threads_open") for t in texts)
                closes = sum(metric_sum(t, "scorer_thread_closes_total") for t in texts)
                gathering = sum(metric_sum(t, "scorer_otlp_traces_gathering") for t in texts)
                lag = sum(metric_sum(t, "scorer_consumer_lag") for t in texts)
                traced = (
                    f"  traced {describe([t or 0.0 for t in sample.traced])} MiB"
                    if args.tracemalloc
                    else ""
                )
                print(
                    f"  {sample.minutes * 60:6.0f} s  produced {sent:7d}  scores "
                    f"{sample.scores:7d}  judge calls {judge_calls:7d}  closes {closes:6.0f}  "
                    f"open threads {open_threads:4.0f}  gathering {gathering:3.0f}  lag {lag:5.0f}"
                    f"  RSS {describe(sample.rss)} MiB{traced}",
                    flush=True,
                )
                next_sample += args.every
            if mid_snapshot and now >= started + seconds / 2:
                mid_snapshot = False
                snapshots["mid"] = await asyncio.gather(
                    *(asyncio.to_thread(w.snapshot, "mid") for w in workers)
                )
            for topic, key, value in step:
                await producer.send(topic, key=key, value=value)
                tally.produced[topic] += 1
                sent += 1
                # paced against the start, so a slow send is caught up, not lost
                delay = started + sent / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        await producer.flush()
        if args.tracemalloc:
            snapshots["end"] = await asyncio.gather(
                *(asyncio.to_thread(w.snapshot, "end") for w in workers)
            )
        # the last threads close by inactivity, the last span traces after their grace
        await asyncio.sleep(args.gap + 10)
    finally:
        await producer.stop()
        done.set()
        await reading
    return samples, tally, snapshots


def rss_report(samples: list[Sample], minutes: float, index: int, traced: bool) -> list[str]:
    half = minutes / 2
    rss = [(s.minutes, s.rss[index]) for s in samples]
    mid = min(rss, key=lambda p: abs(p[0] - half))
    first = [p for p in rss if p[0] <= half]
    second = [p for p in rss if p[0] >= half]
    second_slope = slope(second)
    verdict = "met" if second_slope <= 0.1 else "NOT met"
    lines = [
        f"RSS start {rss[0][1]:.1f} MiB (t = {rss[0][0] * 60:.0f} s), "
        f"mid {mid[1]:.1f} MiB (t = {mid[0] * 60:.0f} s), "
        f"end {rss[-1][1]:.1f} MiB (t = {rss[-1][0] * 60:.0f} s); min {min(r for _, r in rss):.1f}, "
        f"max {max(r for _, r in rss):.1f}",
        f"RSS slope: first half {slope(first):+.3f} MiB/min, second half "
        f"{second_slope:+.3f} MiB/min over {len(second)} samples "
        f"[target <= 0.1 MiB/min: {verdict}]",
    ]
    if traced:
        points = [(s.minutes, t) for s in samples if (t := s.traced[index]) is not None]
        if points:
            lines.append(
                f"tracemalloc traced {points[0][1]:.1f} -> {points[-1][1]:.1f} MiB; "
                f"second-half slope {slope([p for p in points if p[0] >= half]):+.3f} MiB/min"
            )
    return lines


def growth_report(mid: Path, end: Path, top: int) -> list[str]:
    """The allocation sites that grew most from ``mid`` to ``end``."""
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
        tracemalloc.Filter(False, "<unknown>"),
    ]
    old = tracemalloc.Snapshot.load(str(mid)).filter_traces(ignore)
    new = tracemalloc.Snapshot.load(str(end)).filter_traces(ignore)
    total_old = sum(s.size for s in old.statistics("filename"))
    total_new = sum(s.size for s in new.statistics("filename"))
    lines = [
        f"traced in the snapshots: {total_old / 2**20:.2f} -> {total_new / 2**20:.2f} MiB "
        f"({(total_new - total_old) / 2**10:+.1f} KiB)",
        f"top {top} lines by growth (size diff, count diff, line):",
    ]
    for stat in new.compare_to(old, "lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(
            f"  {stat.size_diff / 2**10:+9.1f} KiB {stat.count_diff:+8d}  "
            f"{frame.filename.replace(str(ROOT) + '/', '')}:{frame.lineno}"
        )
    lines.append("top 8 tracebacks by growth (innermost last):")
    for stat in new.compare_to(old, "traceback")[:8]:
        lines.append(f"  {stat.size_diff / 2**10:+9.1f} KiB {stat.count_diff:+8d} blocks")
        for line in stat.traceback.format(limit=12):
            lines.append(f"    {line.replace(str(ROOT) + '/', '')}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=25.0, help="records a second, all topics")
    parser.add_argument("--retention", type=float, default=30.0, help="SCORER_THREAD_RETENTION_S")
    parser.add_argument("--otlp-retention", type=float, default=30.0)
    parser.add_argument("--gap", type=float, default=5.0, help="the threads' inactivity gap")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--judge-latency", type=float, default=0.05)
    parser.add_argument("--loglevel", default="warn")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--frames", type=int, default=25, help="PYTHONTRACEMALLOC frames")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-soak-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    bootstrap = broker.bootstrap
    topics = Topics()
    workers: list[SoakWorker] = []
    print(
        f"embedded broker {bootstrap}; logs in {tmp}; {os.cpu_count()} cores (shared)\n"
        f"soak {args.minutes:g} min at {args.rate:g} records/s; gap {args.gap:g} s, thread "
        f"retention {args.retention:g} s, OTLP retention {args.otlp_retention:g} s; "
        f"{args.workers} worker(s){' under tracemalloc' if args.tracemalloc else ''}",
        flush=True,
    )
    try:
        with MockJudge(latency_s=args.judge_latency) as judge:
            # every rule answers the default {"score": 1.0}; this one names its score
            judge.script(
                "the user experiences confusion, annoyance, or disengagement",
                '{"User frustration": {"score": 0.1, "reason": "scripted"}}',
            )
            args.judge_url = judge.base_url
            asyncio.run(ensure_topics(bootstrap, topics.all(), 4))
            workers = [SoakWorker(n, bootstrap, topics, tmp, args) for n in range(args.workers)]
            deadline = time.monotonic() + 120
            while not all(w.metrics() for w in workers) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(10)  # joined the group and recovered
            for w in workers:
                cmdline = Path(f"/proc/{w.pid}/cmdline").read_bytes().replace(b"\0", b" ")
                print(
                    f"worker pid {w.pid} ({cmdline.decode()[:60]}...): children "
                    f"{w.children() or 'none'}; idle RSS {rss_mib(w.pid):.1f} MiB",
                    flush=True,
                )
            samples, tally, snapshots = asyncio.run(soak(bootstrap, topics, workers, judge, args))
            final = [rss_mib(w.pid) for w in workers]
    finally:
        for w in workers:
            stop(w.process)
        broker.stop()
    print(f"\nsamples: {len(samples)} (every {args.every:g} s over {args.minutes:g} min)")
    for index, w in enumerate(workers):
        print(f"worker {index} (pid {w.pid}):")
        for line in rss_report(samples, args.minutes, index, args.tracemalloc):
            print(f"  {line}")
        print(f"  RSS after the last closes: {final[index]:.1f} MiB")
    produced = ", ".join(f"{n} {topic.split('-')[1]}" for topic, n in tally.produced.items())
    print(f"records produced: {sum(tally.produced.values())} ({produced})")
    print(
        f"scores read: {tally.scores_read} ("
        + ", ".join(f"{k} {n}" for k, n in sorted(tally.scores.items()))
        + f"); dead letters: {tally.dead_letters}"
    )
    for reason, n in tally.unscored.most_common(5):
        print(f"  not ok: {n} x {reason}")
    for index, w in enumerate(workers):
        mid = snapshots.get("mid", [None] * len(workers))[index]
        end = snapshots.get("end", [None] * len(workers))[index]
        if mid and end:
            print(f"\ntracemalloc, worker {index} (pid {w.pid}), middle -> end of the traffic:")
            for line in growth_report(mid, end, args.top):
                print(line)
        elif args.tracemalloc:
            print(f"\ntracemalloc, worker {index}: no snapshots (see {w.log_path})")


if __name__ == "__main__":
    main()
