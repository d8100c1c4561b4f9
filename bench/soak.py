"""Memory soak: worker RSS over a long steady mix on the embedded broker. Prints figures;
asserts nothing.

Starts the embedded broker, the scripted judge (``tests/scripted_judge.py``) and ``--workers``
``scorer worker`` processes (the mix's packs; closed threads kept ``--retention`` seconds
after a ``--gap`` of inactivity, assembled OTLP traces remembered ``--otlp-retention``; the
store ``--store``, ``SCORER_STORE``; the agreement join on unless ``--no-labels``, which sets
``SCORER_LABELS_TOPIC=""``; ``SCORER_MEMORY_MB`` set to ``--memory-mb`` when given), then
streams ``--rate`` records a second for ``--minutes``, in the steps of a ``--mix``
(``bench/soak_mix.py`` builds them and scripts the judge):

- ``issue43`` (the default; issue 43's load, 50 records/s, gap 10 s): every second a cohort of
  five hub-coach conversations (4 traces with a ``thread_id``, never finished: they close by
  inactivity), three metric coaching sessions and three transcript coaching sessions (project
  ``coaching``; 4 turns and an ``end`` each); turn n of a cohort goes out a second after turn
  n - 1, so about 90 threads are open at any time. Packs ``fretcoach`` and ``coaching``; the
  judge answers the coaching rubric's 15 criteria, every other rule its default. ``--rate``
  other than 50 scales its clock (a cohort every 50 / rate seconds).
- ``issue43-cached``: the same, but the hub texts repeat across conversations, so most judged
  scores are verdict-cache hits (the judge asked about once a second, as in the issue's own
  soak); in ``issue43`` every hub text names its conversation (about 110 judge calls a
  second, each verdict new: the verdict cache and table fill to their bounds).
- ``classic`` (25 records/s, gap 5 s; the FretCoach pack), in rounds of: three hub-coach
  conversations of three traces each (three in four end with
  ``metadata.conversation_finished``, the rest close by inactivity) and one studio trace;
  three coaching sessions of three turns (three in four end with an ``end`` event); one
  conversation of two turns as OpenTelemetry spans (the model-call span and the root span in
  records of their own, protobuf and OTLP/JSON in turn; every other one ends).

Every ``--every`` seconds it reads each worker's RSS (``VmRSS`` of the worker's own process:
``scorer worker`` runs Faust in the process it starts in, it does not fork). At the end it
prints the samples, RSS at start, middle and end, the least-squares RSS slope over each half
(MiB/min; the target for the second is at most 0.1), the RSS after the last closes against
``--memory-mb`` when given, the records produced, the scores read (by scope and status), the
judge calls, the closes (by kind and reason), the threads still open and what the worker's
metrics say it holds (verdict cache, ``scorer_held_entries``/``_bytes`` by structure).

With ``--tracemalloc`` the worker is the same CLI started through a tiny in-process sampler
(``python -c``; nothing in ``stream/`` changes): ``PYTHONTRACEMALLOC`` traces every
allocation from interpreter start, a daemon thread writes the traced total every second and
dumps a snapshot when the soak asks (a request file, no signal: Faust's worker owns SIGUSR1
and SIGUSR2). Snapshots are taken at the middle and at the end of the traffic, and the
allocation sites that grew most between them are printed. RSS under tracemalloc includes
its own bookkeeping; the traced total is the figure to read then.

    python bench/soak.py [--mix issue43|issue43-cached|classic] [--minutes 30] [--rate 50] [--gap 10]
        [--retention 30] [--store rocksdb|memory] [--no-labels] [--memory-mb 512] [--workers 1]
    python bench/soak.py --minutes 12 --tracemalloc [--frames 25] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from process_io import cpu_seconds
from prometheus_client.parser import text_string_to_metric_families
from soak_mix import MIXES, Mix
from threads import rss_mib, slope
from throughput import fetch_metrics, stop

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from scripted_judge import MockJudge  # noqa: E402

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
            "SCORER_PACKS": MIXES[args.mix].packs,
            "SCORER_STORE": args.store,
            "SCORER_THREAD_INACTIVITY_GAP_S": f"{args.gap:g}",
            "SCORER_THREAD_RETENTION_S": f"{args.retention:g}",
            "SCORER_OTLP_RETENTION_S": f"{args.otlp_retention:g}",
            "OPENAI_BASE_URL": args.judge_url,
            "OPENAI_API_KEY": "sk-soak",
        }
        if not args.labels:
            env["SCORER_LABELS_TOPIC"] = ""  # the agreement join off
        if args.memory_mb is not None:
            env["SCORER_MEMORY_MB"] = str(args.memory_mb)
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
    judge_calls: int = 0
    final_metrics: list[str] = field(default_factory=list)  # each worker's, after the closes

    def count_judge_calls(self, judge: MockJudge) -> None:
        """Judge calls so far (the scripted judge keeps every request: not ours to keep)."""
        n = len(judge.requests)
        del judge.requests[:n], judge.statuses[:n]
        self.judge_calls += n

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
        for step in MIXES[args.mix].steps(topics):
            now = time.monotonic()
            if now >= started + seconds:
                break
            if now >= next_sample:
                tally.count_judge_calls(judge)
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
                    f"{sample.scores:7d}  judge calls {tally.judge_calls:7d}  closes {closes:6.0f}  "
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
        tally.final_metrics = await asyncio.gather(*(asyncio.to_thread(w.metrics) for w in workers))
        tally.count_judge_calls(judge)
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


def end_report(tally: Tally) -> list[str]:
    """Judge calls, closes, open threads, scores by scope and what the worker says it holds
    (its verdict cache, and each structure of ``scorer_held_entries``), after the last closes."""
    closes: Counter[str] = Counter()
    held: Counter[str] = Counter()
    open_threads = 0.0
    for text in tally.final_metrics:
        open_threads += metric_sum(text, "scorer_threads_open")
        for name in ("judge_cache_entries", "judge_cache_bytes"):
            held[f"verdict_cache {name.split('_')[-1]}"] += metric_sum(text, f"scorer_{name}")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "scorer_thread_closes_total":
                    closes[f"{sample.labels['kind']} {sample.labels['reason']}"] += sample.value
                elif sample.name in ("scorer_held_entries", "scorer_held_bytes"):
                    what = sample.name.split("_")[-1]
                    held[f"{sample.labels['structure']} {what}"] += sample.value
    by_scope: dict[str, Counter[str]] = {}
    for key, n in tally.scores.items():
        scope, status = key.split(" ", 1)
        by_scope.setdefault(scope, Counter())[status] += n
    return [
        f"judge calls: {tally.judge_calls}",
        f"closes: {sum(closes.values()):.0f} ("
        + ", ".join(f"{k} {n:.0f}" for k, n in sorted(closes.items()))
        + f"); open threads at the end: {open_threads:.0f}",
        "scores by scope: "
        + "; ".join(
            f"{scope} {sum(c.values())} ("
            + ", ".join(f"{status} {n}" for status, n in sorted(c.items()))
            + ")"
            for scope, c in sorted(by_scope.items())
        ),
        "held at the end: "
        + ", ".join(
            f"{k} {n / 2**20:.1f} MiB" if k.endswith("bytes") else f"{k} {n:.0f}"
            for k, n in sorted(held.items())
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=sorted(MIXES), default="issue43")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, help="records a second (issue43 50, classic 25)")
    parser.add_argument("--retention", type=float, default=30.0, help="SCORER_THREAD_RETENTION_S")
    parser.add_argument("--otlp-retention", type=float, default=30.0)
    parser.add_argument("--gap", type=float, help="inactivity gap, s (issue43 10, classic 5)")
    parser.add_argument("--store", choices=["rocksdb", "memory"], default="rocksdb")
    parser.add_argument(
        "--labels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the agreement join (--no-labels: SCORER_LABELS_TOPIC='')",
    )
    parser.add_argument("--memory-mb", type=int, help="SCORER_MEMORY_MB, the RSS budget")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--judge-latency", type=float, default=0.05)
    parser.add_argument("--loglevel", default="warn")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--frames", type=int, default=25, help="PYTHONTRACEMALLOC frames")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    mix: Mix = MIXES[args.mix]
    args.rate = mix.rate if args.rate is None else args.rate
    args.gap = mix.gap if args.gap is None else args.gap
    tmp = Path(tempfile.mkdtemp(prefix="scorer-soak-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    bootstrap = broker.bootstrap
    topics = Topics()
    workers: list[SoakWorker] = []
    print(
        f"embedded broker {bootstrap}; logs in {tmp}; {os.cpu_count()} cores (shared)\n"
        f"soak {args.minutes:g} min of mix {args.mix} at {args.rate:g} records/s; packs "
        f"{mix.packs}; store {args.store}; labels join {'on' if args.labels else 'off'}; "
        f"memory budget {f'{args.memory_mb:g} MiB' if args.memory_mb else 'not set'}; gap "
        f"{args.gap:g} s, thread retention {args.retention:g} s, OTLP retention "
        f"{args.otlp_retention:g} s; {args.workers} worker(s)"
        f"{' under tracemalloc' if args.tracemalloc else ''}",
        flush=True,
    )
    try:
        with MockJudge(latency_s=args.judge_latency) as judge:
            mix.script(judge)
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
            cpu = [cpu_seconds(w.pid) for w in workers]
    finally:
        for w in workers:
            stop(w.process)
        broker.stop()
    print(f"\nsamples: {len(samples)} (every {args.every:g} s over {args.minutes:g} min)")
    for index, w in enumerate(workers):
        print(f"worker {index} (pid {w.pid}):")
        for line in rss_report(samples, args.minutes, index, args.tracemalloc):
            print(f"  {line}")
        print(f"  RSS after the last closes: {final[index]:.1f} MiB; CPU {cpu[index]:.0f} s")
        if args.memory_mb is not None:
            within = "within" if final[index] <= args.memory_mb else "over"
            print(f"  RSS end {final[index]:.1f} MiB, budget {args.memory_mb:g} MiB: {within}")
    produced = ", ".join(f"{n} {topic.split('-')[1]}" for topic, n in tally.produced.items())
    print(f"records produced: {sum(tally.produced.values())} ({produced})")
    print(
        f"scores read: {tally.scores_read} ("
        + ", ".join(f"{k} {n}" for k, n in sorted(tally.scores.items()))
        + f"); dead letters: {tally.dead_letters}"
    )
    for reason, n in tally.unscored.most_common(10):
        print(f"  not ok: {n} x {reason}")
    for line in end_report(tally):
        print(line)
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
