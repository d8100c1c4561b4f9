"""What the worker publishes for the demo's samples, normalised, to compare two commits.

A behaviour-preserving change (a restructuring) must leave every score event, decision
record and dead letter the same. This runs a real worker on the embedded broker over the
demo's samples (FretCoach traces and coaching sessions, the critique pack's pair) twice,
with the scripted judge and with no judge, waits until the output topics go quiet, and
writes every message as one canonical JSON line, sorted, with what differs between two
runs of one commit removed: clocks (``created_at`` and friends), latencies, and the score
ids of closes (a thread's or pair's close hashes the wall-clock time it opened), named by
their rule, criterion and target instead.

    python bench/equivalence.py OUT.jsonl            # then, on the other commit:
    python bench/equivalence.py OTHER.jsonl && cmp OUT.jsonl OTHER.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics, reader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scripted_judge import MockJudge, demo_answers

SAMPLES = Path(__file__).resolve().parent.parent / "stream" / "samples"
TRACES = [SAMPLES / "fretcoach_traces.jsonl", SAMPLES / "comparison_pair.jsonl"]
SESSIONS = SAMPLES / "fretcoach_sessions.jsonl"
# fields whose values are clocks or durations: they differ between two runs of one commit
VOLATILE = {"created_at", "decided_at", "latency_ms", "duration_ms", "elapsed_ms", "judged_at"}
QUIET_S = 12.0  # no new message for this long (after the conversations' gap) means done


def lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().splitlines() if ln.strip()]


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            try:
                key = orjson.loads(value).get("id") or orjson.loads(value).get("session_id")
            except (orjson.JSONDecodeError, AttributeError):
                key = None
            await producer.send_and_wait(topic, value, key=str(key).encode() if key else None)
    finally:
        await producer.stop()


async def drain(bootstrap: str, topics: list[str], timeout: float) -> list[str]:
    """Read ``topics`` from the start until nothing new arrives for ``QUIET_S``."""
    out: list[str] = []
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topics[0]) as consumer:
        consumer.subscribe(topics)
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < QUIET_S:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for r in records:
                    last = time.monotonic()
                    try:
                        body: Any = strip(orjson.loads(r.value))
                    except orjson.JSONDecodeError:
                        body = r.value.decode(errors="replace")
                    key = r.key.decode(errors="replace") if r.key else None
                    headers = sorted(
                        (k, v.decode(errors="replace"))
                        for k, v in (r.headers or [])
                        if k not in VOLATILE
                    )
                    role = tp.topic.rsplit("-", 1)[0]
                    row = {"topic": role, "key": key, "headers": headers, "value": body}
                    out.append(orjson.dumps(row, option=orjson.OPT_SORT_KEYS).decode())
    return out


def close_ids_named(rows: list[str]) -> list[str]:
    """Rows with the score ids of thread and pair scores replaced by what they score: a
    close's id hashes the wall-clock time its thread or pair opened."""
    names = {}
    for row in rows:
        value = orjson.loads(row)["value"]
        if isinstance(value, dict) and value.get("scope") in ("thread", "pair"):
            names[value["score_id"]] = (
                f"<{value['scope']} {value['rule_id']} {value['criterion']} {value['target_id']}>"
            )
    named = []
    for row in rows:
        for sid, name in names.items():
            row = row.replace(sid, name)
        named.append(row)
    return named


def run(bootstrap: str, tmp: Path, mode: str, judge_url: str | None) -> list[str]:
    names = {
        role: f"{role}-{mode}"
        for role in ("traces", "sessions", "scores", "decisions", "dlq", "otlp")
    }
    asyncio.run(ensure_topics(bootstrap, list(names.values()), 3))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCORER_BROKER_KIND": "tansu",
        "SCORER_WEB_PORT": str(free_port()),
        "SCORER_DATA_DIR": str(tmp / f"data-{mode}"),
        "SCORER_SESSION_TIMEOUT_S": "6",
        "SCORER_THREAD_INACTIVITY_GAP_S": "5",
        "SCORER_PACKS": '["fretcoach", "critique"]',
        "SCORER_APP_ID": f"scorer-{mode}",
        "SCORER_TOPIC_PARTITIONS": "3",
        **{f"SCORER_{role.upper()}_TOPIC": name for role, name in names.items()},
    }
    if judge_url:
        env |= {"OPENAI_BASE_URL": judge_url, "OPENAI_API_KEY": "equivalence"}
    log = open(tmp / f"worker-{mode}.log", "ab")  # noqa: SIM115 - owned by the child
    worker = subprocess.Popen(
        [sys.executable, "-m", "stream.cli", "worker", "--loglevel", "warn"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(8)  # the worker joins its group before the traces arrive
        asyncio.run(produce(bootstrap, names["traces"], [b for p in TRACES for b in lines(p)]))
        asyncio.run(produce(bootstrap, names["sessions"], lines(SESSIONS)))
        time.sleep(8)  # past the conversations' inactivity gap
        topics = [names["scores"], names["decisions"], names["dlq"]]
        rows = close_ids_named(asyncio.run(drain(bootstrap, topics, timeout=180)))
        if worker.poll() is not None or not rows:
            tail = (tmp / f"worker-{mode}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"the worker ({mode}) published nothing or died:\n{tail}")
        return rows
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        broker = EmbeddedBroker(log_path=tmp / "broker.log").start()
        try:
            with MockJudge() as judge:
                demo_answers(judge)
                judged = run(broker.bootstrap, tmp, "judge", judge.base_url)
            unjudged = run(broker.bootstrap, tmp, "nojudge", None)
        finally:
            broker.stop()
    rows = sorted(f'["judge", {r}]' for r in judged) + sorted(f'["nojudge", {r}]' for r in unjudged)
    args.out.write_text("\n".join(rows) + "\n")
    print(f"{args.out}: {len(judged)} messages with the judge, {len(unjudged)} without")


if __name__ == "__main__":
    main()
