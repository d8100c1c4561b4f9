"""Throughput benchmark on the embedded broker. Prints figures; asserts nothing.

Phases: (a) raw aiokafka consume-and-produce pass-through; (a') and (a'') the Faust baselines
(faust_baselines.py), a Faust agent that parses and forwards each trace: (a') the naive one on
stock Faust, (a'') the one a competent user writes (batches, unawaited sends, a producer linger)
on the transport mends the scorer gets, and (a''') that one doing (b)'s job by hand (the same two
checks, a score and a decision record a trace); (b) the scorer with deterministic rules only,
its worker's CPU per trace set against the baselines'; (t) agents' traces with tool calls
(tool_call_cpu.py); (c) the scorer with one LLM rule against a local judge of fixed latency; (d)
the same against a judge that enforces a requests-per-minute limit with 429s. Rates are from the
output records' Kafka timestamps (first to last), so start-up and consumer-group joins are not
counted; CPU per trace is the worker process's, from its first output record to its last.

    python bench/throughput.py [--traces 20000] [--judge-traces 2400] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from math import nan
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics, reader
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from faust_baselines import faust_baselines
from process_io import cpu_seconds, produce
from redaction_cpu import main as redaction_main
from scripted_judge import MockJudge
from tool_call_cpu import tool_call_phase

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = [
    orjson.loads(x)
    for x in (ROOT / "stream/samples/fretcoach_traces.jsonl").read_bytes().splitlines()
]
LIVE = next(t for t in SAMPLE if t["name"] == "studio-live-coach")
STUDIO = next(t for t in SAMPLE if t["name"] == "studio-ai-recommendation")


def traces(n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        doc = dict(LIVE if i % 2 == 0 else STUDIO, id=f"bench-{uuid.uuid4().hex}-{i}")
        out.append((doc["id"].encode(), orjson.dumps(doc)))
    return out


# (b)'s rules: the FretCoach pack's two checks, one matching each of the two sample traces
CHECK_RULES = ["studio_live_coach_feedback_format", "studio_immediate_actionability_check"]
CPU_US: dict[int, float] = {}  # worker pid -> CPU microseconds per output record


async def drain(
    bootstrap: str, topic: str, expected: int, timeout: float, pid: int | None = None
) -> tuple[int, float]:
    """Count records until ``expected``; return (count, seconds from first to last timestamp).

    With ``pid``, also record that process's CPU time per record between the first and the
    last record seen (CPU_US): steadier than wall-clock rates on a shared 2-core machine.
    """
    count, first, last = 0, None, None
    cpu_start, count_at_start = None, 0
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while count < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200, max_records=10000)).values():
                for r in records:
                    count += 1
                    first = r.timestamp if first is None else min(first, r.timestamp)
                    last = r.timestamp if last is None else max(last, r.timestamp)
            if pid is not None and cpu_start is None and count:
                cpu_start, count_at_start = cpu_seconds(pid), count
        if pid is not None and cpu_start is not None and count > count_at_start:
            CPU_US[pid] = (cpu_seconds(pid) - cpu_start) / (count - count_at_start) * 1e6
    return count, ((last - first) / 1000.0 if first is not None and last is not None else 0.0)


async def raw_passthrough(bootstrap: str, src: str, dst: str, n: int) -> None:
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        group_id=f"raw-{uuid.uuid4().hex[:6]}",
        enable_auto_commit=False,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await consumer.start()
    await producer.start()
    done = 0
    try:
        while done < n:
            for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
                for r in records:
                    orjson.loads(r.value)
                    await producer.send(dst, key=r.key, value=r.value)
                    done += 1
            await producer.flush()
            await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


def histogram_quantile(metrics_text: str, name: str, q: float) -> float | None:
    buckets = []
    for line in metrics_text.splitlines():
        m = re.match(rf'{name}_bucket\{{le="([^"]+)"\}} (\S+)', line)
        if m:
            buckets.append((float("inf") if m[1] == "+Inf" else float(m[1]), float(m[2])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= q * total:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (
                (q * total - prev_count) / max(count - prev_count, 1e-9)
            )
        prev_le, prev_count = le, count
    return None


class Phase:
    def __init__(self, bootstrap: str, tmp: Path) -> None:
        self.bootstrap, self.tmp = bootstrap, tmp
        self.suffix = uuid.uuid4().hex[:8]
        self.src, self.dst = f"bench-in-{self.suffix}", f"bench-out-{self.suffix}"

    def worker(
        self, rules_dir: Path, log: Path | None = None, loglevel: str | None = None, **env: str
    ) -> tuple[subprocess.Popen[bytes], int]:
        """A worker on the bench's topics; ``env`` over the bench's settings, a value of ""
        unsetting one (the worker's default); its output to ``log``."""
        port = free_port()
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "SCORER_TRACES_TOPIC": self.src,
            "SCORER_SCORES_TOPIC": self.dst,
            "SCORER_DECISIONS_TOPIC": f"bench-dec-{self.suffix}",
            "SCORER_DLQ_TOPIC": f"bench-dlq-{self.suffix}",
            "SCORER_APP_ID": f"bench-{self.suffix}",
            "SCORER_WEB_PORT": str(port),
            "SCORER_RULES_DIR": f"{rules_dir}{os.pathsep}no-shipped-packs",
            "SCORER_DATA_DIR": str(self.tmp / self.suffix),
            "SCORER_SESSION_TIMEOUT_S": "6",
            "SCORER_BROKER_KIND": "tansu",
            **env,
        }
        full_env = {name: value for name, value in full_env.items() if value != ""}
        out = open(log or self.tmp / f"worker-{self.suffix}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stream.cli",
                "worker",
                "--loglevel",
                loglevel or os.environ.get("SCORER_BENCH_LOGLEVEL", "warn"),
            ],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        return proc, port


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def rules_subset(tmp: Path, ids: list[str]) -> Path:
    """A rules folder with only these FretCoach rules, and the pack's own code."""
    source = ROOT / "rules" / "fretcoach"
    target = tmp / f"rules-{uuid.uuid4().hex[:6]}" / "fretcoach"
    target.mkdir(parents=True)
    for rule_id in ids:
        shutil.copy(source / f"{rule_id}.yaml", target / f"{rule_id}.yaml")
    for module in source.glob("*.py"):
        shutil.copy(module, target / module.name)
    return target.parent


def fetch_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def judged_phase(
    bootstrap: str, tmp: Path, n: int, judge: MockJudge | str, concurrency: int
) -> tuple[int, float, str]:
    """Score ``n`` live-coach traces with the LLM live-coach rule against ``judge`` (a
    scripted judge, or the base URL of any OpenAI-compatible one that answers the rule).

    Returns (scores seen, seconds from first to last, the worker's /metrics text)."""
    p = Phase(bootstrap, tmp)
    asyncio.run(ensure_topics(bootstrap, [p.src, p.dst], 4))
    live_only = [(k, v) for k, v in traces(n * 2) if b"studio-live-coach" in v][:n]
    asyncio.run(produce(bootstrap, p.src, live_only))
    rules = rules_subset(tmp, ["studio_live_coach_feedback_quality"])
    if isinstance(judge, MockJudge):
        judge.script("", '{"score": 3, "reason": "bench"}')
    base_url = judge.base_url if isinstance(judge, MockJudge) else judge
    # the sample traces differ only in their ids: with the verdict cache on, every trace
    # after the first would be answered from it and the phase would not measure the judge
    proc, port = p.worker(
        rules,
        OPENAI_BASE_URL=base_url,
        SCORER_JUDGE_MAX_CONCURRENCY=str(concurrency),
        SCORER_JUDGE_CACHE_TTL_S="0",
    )
    count, secs = asyncio.run(drain(bootstrap, p.dst, n, 600))
    metrics_text = fetch_metrics(port)
    stop(proc)
    return count, secs, metrics_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=20000)
    parser.add_argument("--judge-traces", type=int, default=2400)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rpm", type=float, default=3000)
    parser.add_argument(
        "--batch-wait-ms", help="(b): the worker's SCORER_TRACE_BATCH_WAIT_MS (unset: default)"
    )
    parser.add_argument(
        "--batch-max", help="(b): the worker's SCORER_TRACE_BATCH_MAX (unset: default)"
    )
    parser.add_argument(
        "--phases",
        default="a,a',b,t,c,d,d-silent",
        help="comma-separated subset of a,a',a'',a''',b,t,c,d,d-silent (a' runs the other two)",
    )
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    bs = broker.bootstrap
    results: dict[str, float] = {}
    size = len(traces(1)[0][1])
    print(f"embedded broker {bs}; {args.traces} traces of ~{size} bytes; 2 cores")
    try:
        # (a) raw aiokafka
        if "a" in phases:
            p = Phase(bs, tmp)
            asyncio.run(ensure_topics(bs, [p.src, p.dst], 4))
            asyncio.run(produce(bs, p.src, traces(args.traces)))
            asyncio.run(raw_passthrough(bs, p.src, p.dst, args.traces))
            n, secs = asyncio.run(drain(bs, p.dst, args.traces, 120))
            results["a"] = n / secs
            print(f"(a)  raw aiokafka pass-through      {results['a']:8.0f} traces/s")

        # (a') the naive Faust agent, and (a'') the competent one
        if phases & {"a'", "a''", "a'''"}:

            def measure(topic: str, expected: int, pid: int) -> tuple[float, float]:
                count, secs = asyncio.run(drain(bs, topic, expected, 300, pid))
                return count / secs, CPU_US.get(pid, nan)

            labels = {"a'", "a''", "a'''"} if "a'" in phases else phases & {"a''", "a'''"}
            results.update(faust_baselines(bs, tmp, lambda: traces(args.traces), measure, labels))

        # (b) deterministic rules only (one check matches each trace)
        if "b" in phases:
            p = Phase(bs, tmp)
            asyncio.run(ensure_topics(bs, [p.src, p.dst], 4))
            asyncio.run(produce(bs, p.src, traces(args.traces)))
            rules = rules_subset(tmp, CHECK_RULES)
            batching = {
                name: value
                for name, value in (
                    ("SCORER_TRACE_BATCH_WAIT_MS", args.batch_wait_ms),
                    ("SCORER_TRACE_BATCH_MAX", args.batch_max),
                )
                if value
            }
            proc, port = p.worker(rules, **batching)
            n, secs = asyncio.run(drain(bs, p.dst, args.traces, 300, proc.pid))
            overhead = fetch_metrics(port)
            stop(proc)
            results["b"] = n / secs
            results["b cpu"] = CPU_US.get(proc.pid, nan)
            naive, competent = results.get("a'", nan), results.get("a''", nan)
            print(
                f"(b)  scorer, deterministic rules     {results['b']:8.0f} traces/s   "
                f"(b)/(a') = {results['b'] / naive:.2f}  [target >= 1.2], "
                f"(b)/(a'') = {results['b'] / competent:.2f}"
            )
            b_cpu = results["b cpu"]
            naive_cpu, competent_cpu = results.get("a' cpu", nan), results.get("a'' cpu", nan)
            print(
                f"     worker CPU per trace: (a') naive {naive_cpu:.0f} us, (a'') competent "
                f"{competent_cpu:.0f} us, (b) scorer {b_cpu:.0f} us; (a') / (b) = "
                f"{naive_cpu / b_cpu:.2f}, (a'') / (b) = {competent_cpu / b_cpu:.2f}  "
                "[target: scorer CPU per trace <= competent's]"
            )
            if (same_cpu := results.get("a''' cpu")) is not None:
                print(
                    f"     the same job by hand (a''') {same_cpu:.0f} us; (a''') / (b) = "
                    f"{same_cpu / b_cpu:.2f}  [the engine's cost over hand-written code]"
                )
            p50 = histogram_quantile(overhead, "scorer_scoring_overhead_seconds", 0.5)
            p99 = histogram_quantile(overhead, "scorer_scoring_overhead_seconds", 0.99)
            print(
                f"     time in the scorer per trace (no judge): p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
            )
            batches = sample_value(overhead, "scorer_trace_batch_size_count")
            taken = sample_value(overhead, "scorer_trace_batch_size_sum")
            print(f"     traces scored together: {taken / batches:.1f} a batch on average")
            redaction_main(["--traces", "400"])  # the judge's copy masked: its CPU per trace

        if "t" in phases:  # (t) agent traces, four tool calls each, the default packs
            results.update(tool_call_phase(bs, tmp, args.traces // 4))
        # (c) one LLM rule, judge with fixed latency
        if "c" in phases:
            with MockJudge(latency_s=args.latency) as judge:
                n, secs, overhead = judged_phase(
                    bs, tmp, args.judge_traces, judge, args.concurrency
                )
            ceiling = args.concurrency / args.latency
            results["c"] = n / secs
            p50 = histogram_quantile(overhead, "scorer_scoring_overhead_seconds", 0.5)
            p99 = histogram_quantile(overhead, "scorer_scoring_overhead_seconds", 0.99)
            print(
                f"(c)  scorer, LLM rule, {args.latency * 1000:.0f} ms judge, concurrency {args.concurrency}: {results['c']:6.1f} traces/s   "
                f"(c)/ceiling {ceiling:.0f}/s = {results['c'] / ceiling:.2f}  [target >= 0.9]"
            )
            print(
                f"     scoring overhead beyond the judge call: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms  [target p50 < 10 ms]"
            )
            pub50 = histogram_quantile(overhead, "scorer_publish_latency_seconds", 0.5)
            pub99 = histogram_quantile(overhead, "scorer_publish_latency_seconds", 0.99)
            print(
                f"     then waiting for the broker to acknowledge the scores: p50 {pub50 * 1000:.1f} ms, p99 {pub99 * 1000:.1f} ms"
            )

        # (d) judge enforcing a requests-per-minute limit; d-silent: one that does not say so
        for phase, announce in (("d", True), ("d-silent", False)):
            if phase not in phases:
                continue
            n_rpm = int(args.rpm / 60 * 30)  # about 30 s at the limit
            # a provider enforcing N rpm lets about one second of it through at once (OpenAI
            # enforces per-minute limits over shorter windows); the client must pace itself to it
            with MockJudge(
                latency_s=0.05,
                rpm_limit=args.rpm,
                rpm_burst=args.rpm / 60,
                announce_limits=announce,
            ) as judge:
                n, secs, _ = judged_phase(bs, tmp, n_rpm, judge, args.concurrency)
                statuses = list(judge.statuses)
            limit = args.rpm / 60
            share_429 = statuses.count(429) / max(len(statuses), 1)
            how = "announced in headers" if announce else "not announced"
            print(
                f"({phase}) scorer vs {args.rpm:.0f} rpm limit ({how}): {n / secs:6.1f} traces/s = {n / secs / limit:.2f} of the limit "
                f"[target >= 0.95]; 429s {share_429 * 100:.1f} % of {len(statuses)} calls [target < 2 %]"
            )
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
