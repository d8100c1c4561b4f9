"""`scorer estimate` against what a worker then does (issue 44's target): on the demo's
files with the demo's packs, the judge calls and prompt tokens it predicts are within 5 % of
the calls a real worker makes to the judge and the prompt tokens those calls carry.

The scripted judge reports usage from its last message only; a provider counts every
message. The prompt tokens here are counted from the requests the judge received, as a
provider counts them with a characters / 4 tokenizer (every message's content, 3 tokens a
message, 3 priming the answer: OpenAI's cookbook count): so what is compared is the prompts
(which calls, what they render, the fan-outs, the cache hits within the file, the thread
closes), not a tokenizer, which there is none of here (the estimate's output says so)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from scripted_judge import MockJudge, demo_answers, script_frustration

from stream.demo import PAIR_SAMPLES, SAMPLES, SESSION_SAMPLES
from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import message_key, message_value, read_traces

from .harness import Names, Worker, produce
from .test_worker import start

PACKS = '["fretcoach","critique"]'
GAP_S = "3"


def provider_prompt_tokens(body: dict[str, Any]) -> int:
    messages = body["messages"]
    return sum(len(str(m.get("content") or "")) // 4 + 3 for m in messages) + 3


def run_estimate(files: list[Path], tmp: Path, *args: str, **extra: str) -> dict[str, Any]:
    sample = tmp / "sample.jsonl"
    sample.write_bytes(b"".join(f.read_bytes().rstrip(b"\n") + b"\n" for f in files))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
        "SCORER_PACKS": PACKS,
        "SCORER_THREAD_INACTIVITY_GAP_S": GAP_S,
        **extra,
    }
    done = subprocess.run(
        [sys.executable, "-m", "stream.cli", "estimate", str(sample), "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    estimate: dict[str, Any] = orjson.loads(done.stdout)
    return estimate


async def test_the_estimate_predicts_the_calls_and_prompt_tokens_a_worker_makes(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    files = [SAMPLES, PAIR_SAMPLES, SESSION_SAMPLES]
    estimate = run_estimate(files, tmp_path)
    predicted = estimate["total"]
    assert predicted["judge_calls"] > 50 and predicted["prompt_tokens"] > 10_000
    assert {"judge_calls", "prompt_tokens", "completion_tokens", "usd"} <= set(predicted)
    assert all({"judge_calls", "prompt_tokens", "usd"} <= set(r) for r in estimate["rules"])

    demo_answers(judge)  # every rule answered in its own shape: no call asked again
    script_frustration(judge)
    worker = start(
        workers,
        broker,
        names,
        tmp_path,
        judge,
        SCORER_PACKS=PACKS,
        SCORER_THREAD_INACTIVITY_GAP_S=GAP_S,
    )
    traces = [i for i in read_traces(SAMPLES) + read_traces(PAIR_SAMPLES)]
    sessions = read_traces(SESSION_SAMPLES)
    await produce(
        broker.bootstrap, names.traces, [(message_key(i), message_value(i)) for i in traces]
    )
    await produce(
        broker.bootstrap, names.sessions, [(message_key(i), message_value(i)) for i in sessions]
    )
    # every call made: the count stays put for longer than a thread's gap and a batch's turn
    deadline = time.monotonic() + 150
    seen, steady_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(1)
        if len(judge.requests) != seen:
            seen, steady_since = len(judge.requests), time.monotonic()
        elif seen and time.monotonic() - steady_since > 12:
            break
    made = len(judge.requests)
    tokens = sum(provider_prompt_tokens(r["body"]) for r in judge.requests)
    print(
        f"estimate: {predicted['judge_calls']} calls, {predicted['prompt_tokens']} prompt tokens; "
        f"worker: {made} calls, {tokens} prompt tokens"
    )
    assert abs(predicted["judge_calls"] - made) <= 0.05 * made
    assert abs(predicted["prompt_tokens"] - tokens) <= 0.05 * tokens
    # calibrated by the usage the worker's scores reported (this judge counts the last
    # message only, as no provider does): the estimate follows the judge's own count
    reported = sum(len(str(r["body"]["messages"][-1]["content"])) // 4 for r in judge.requests)
    calibrated = run_estimate(
        files,
        tmp_path,
        "--calibrate",
        "1h",
        KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap,
        **names.env(),
    )
    assert "calibrated on" in calibrated["tokens_counted_by"], calibrated["notes"]
    assert abs(calibrated["total"]["prompt_tokens"] - reported) <= 0.05 * reported
    # a judge call is no line in the worker's log at its default level (httpx's INFO line
    # per request was most of a newcomer's log)
    assert "HTTP Request" not in worker.log()


async def test_the_estimate_plans_the_records_of_a_topic_in_a_time_range(
    broker: EmbeddedBroker, names: Names, tmp_path: Path
) -> None:
    from aiokafka import AIOKafkaProducer

    from stream.kafka.io import ensure_topics

    now_ms = int(time.time() * 1000)
    old_ms = now_ms - 3 * 86_400_000  # three days ago
    traces = [orjson.loads(line) for line in SAMPLES.read_bytes().splitlines()[:5]]
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for n, trace in enumerate(traces):  # three old, two recent
            when = old_ms + n * 1000 if n < 3 else now_ms - 60_000 + n
            await producer.send_and_wait(
                names.traces, orjson.dumps(trace), key=trace["id"].encode(), timestamp_ms=when
            )
    finally:
        await producer.stop()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
        "SCORER_PACKS": '["fretcoach"]',
    }

    def estimate(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "stream.cli", "estimate", "--topic", names.traces, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = orjson.loads(done.stdout)
        return found

    assert estimate("--since", "1d", "--json")["sample"]["traces"] == 2
    day = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((old_ms - 1000) / 1000))
    # whole seconds: past the third old record (at +2 s) whatever its milliseconds
    after = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((old_ms + 3500) / 1000))
    assert estimate("--from", day, "--to", after, "--json")["sample"]["traces"] == 3
