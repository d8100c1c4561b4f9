"""A judge that misbehaves as real providers do, on the embedded broker. Prints figures;
asserts nothing.

(r) One call in seven answered 429, whatever the load: the same batch of live-coach traces
    against a clean judge and against the refusing one; prints the time ratio (target <= 3x).
(s) An unannounced requests-per-minute limit (``--rpm``), a burst of ``--calls`` judge calls
    at once through the judge client alone (no broker): prints the share of calls answered
    429 (target < 2 %) and the share of the limit used (target >= 0.95).
(o) An outage in a steady stream: traces at ``--rate`` a second for ``--seconds``, the judge
    answering 503 to every call for ``--outage`` seconds from ``--outage-at``; prints error
    scores (target 0), traces scored, the consumer-lag peak and when the last score came.

    python bench/judge_trouble.py [--phases r,s,o] [--traces 510] [--rpm 600 --calls 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
from throughput import Phase, fetch_metrics, judged_phase, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scripted_judge import MockJudge


def random_429s(bootstrap: str, tmp: Path, n: int, concurrency: int) -> None:
    with MockJudge(latency_s=0.05) as clean:
        n_clean, secs_clean, _ = judged_phase(bootstrap, tmp, n, clean, concurrency)
    with MockJudge(latency_s=0.05, refuse_share=1 / 7) as refusing:
        n_refused, secs_refused, _ = judged_phase(bootstrap, tmp, n, refusing, concurrency)
        statuses = list(refusing.statuses)
    print(
        f"(r)  {n} traces, clean judge: {secs_clean:.1f} s ({n_clean} scores); one call in seven "
        f"answered 429: {secs_refused:.1f} s ({n_refused} scores, {statuses.count(429)} of "
        f"{len(statuses)} calls 429); ratio {secs_refused / max(secs_clean, 1e-9):.2f} "
        "[target <= 3]"
    )


def silent_limit(rpm: float, calls: int) -> None:
    from fixtures import fretcoach_rules, settings

    from stream.judge.client import JudgeClient
    from stream.ruleset.schema import LLMJudgeRule

    async def run(judge: MockJudge) -> float:
        client = JudgeClient(
            settings(
                openai_base_url=judge.base_url, openai_api_key="k", judge_max_attempts=100
            ).judge_config()
        )
        rule = next(r for r in fretcoach_rules().rules if r.id == "hub_answer_correctness")
        assert isinstance(rule, LLMJudgeRule)
        started = time.monotonic()
        await asyncio.gather(*(client.judge(rule, f"bench call {i}") for i in range(calls)))
        await client.close()
        return time.monotonic() - started

    # a provider enforcing N rpm lets about one second of it through at once
    with MockJudge(
        latency_s=0.05, rpm_limit=rpm, rpm_burst=rpm / 60, announce_limits=False
    ) as judge:
        judge.script("", '{"score": 0.5, "reason": "bench"}')
        secs = asyncio.run(run(judge))
        statuses = list(judge.statuses)
    used = calls / secs / (rpm / 60)
    share = statuses.count(429) / len(statuses)
    print(
        f"(s)  {calls} calls at once, unannounced {rpm:g} rpm limit: {used:.2f} of the limit used "
        f"[target >= 0.95]; {statuses.count(429)} of {len(statuses)} calls 429 = "
        f"{share * 100:.1f} % [target < 2 %]"
    )


async def paced(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]], rate: float
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        started = time.monotonic()
        for i, (key, value) in enumerate(messages):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            await producer.send(topic, key=key, value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def scores_until(bootstrap: str, topic: str, expected: int, timeout: float) -> list[dict]:
    found: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while len(found) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    event = orjson.loads(r.value)
                    found[event["score_id"]] = event
    return list(found.values())


def outage(bootstrap: str, tmp: Path, args: argparse.Namespace) -> None:
    p = Phase(bootstrap, tmp)
    asyncio.run(ensure_topics(bootstrap, [p.src, p.dst], 4))
    n = int(args.rate * args.seconds)
    live = [(k, v) for k, v in traces(n * 2) if b"studio-live-coach" in v][:n]
    rules = rules_subset(tmp, ["studio_live_coach_feedback_quality"])
    with MockJudge(latency_s=0.2) as judge:
        judge.script("", '{"score": 3, "reason": "bench"}')
        proc, port = p.worker(rules, OPENAI_BASE_URL=judge.base_url, SCORER_LAG_INTERVAL_S="1")
        time.sleep(8)  # the worker joins its group
        started = time.monotonic()

        async def run() -> tuple[list[dict], float]:
            lag_peak = 0.0

            async def watch() -> None:
                nonlocal lag_peak
                down = False
                while True:
                    elapsed = time.monotonic() - started
                    if not down and elapsed >= args.outage_at:
                        judge.go_down(args.outage)
                        down = True
                    try:
                        page = fetch_metrics(port)
                    except OSError:
                        page = ""
                    lag_peak = max(lag_peak, sample_value(page, "scorer_consumer_lag", topic=p.src))
                    await asyncio.sleep(1.0)

            watcher = asyncio.create_task(watch())
            producing = asyncio.create_task(paced(bootstrap, p.src, live, args.rate))
            scores = await scores_until(bootstrap, p.dst, n, args.seconds + args.outage + 300)
            await producing
            watcher.cancel()
            return scores, lag_peak

        scores, lag_peak = asyncio.run(run())
        done = time.monotonic() - started
        stop(proc)
    errors = sum(1 for s in scores if s["status"] == "error")
    print(
        f"(o)  {n} traces at {args.rate:g}/s, judge down {args.outage:g} s from t={args.outage_at:g} s: "
        f"{len(scores)} scored, {errors} error scores [target 0]; consumer lag peak "
        f"{lag_peak:.0f}; last score at t={done:.0f} s (stream ended at t={args.seconds:g} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phases", default="r,s,o", help="comma-separated subset of r,s,o")
    parser.add_argument("--traces", type=int, default=510)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--outage-at", type=float, default=15.0)
    parser.add_argument("--rpm", type=float, default=600.0)
    parser.add_argument("--calls", type=int, default=1500)
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    try:
        if "r" in phases:
            random_429s(broker.bootstrap, tmp, args.traces, args.concurrency)
        if "s" in phases:
            silent_limit(args.rpm, args.calls)
        if "o" in phases:
            outage(broker.bootstrap, tmp, args)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
