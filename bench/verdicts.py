"""Each verdict paid once (issue 28): the same traces replayed through a worker on the embedded
broker, against a scripted judge over HTTP (``tests/scripted_judge.py``) that counts its calls.
Prints each figure beside its target; asserts nothing (``tests/integration/test_verdict_cache.py``
and ``test_verdict_store.py`` assert the same on fewer traces).

(v1) ``--traces`` live-coach traces (each with feedback of its own), then the same traces again (a replay, or a producer
     retry): judge calls on the second pass [0], the same score ids [all], what the second
     pass cost per 1,000 traces against the first [0].
(v2) the worker killed (SIGKILL) and started again on ``--store`` (``rocksdb``: its cache on
     disk; ``memory``: rebuilt from the changelog), the same traces a third time: judge calls
     [0].
(b)  one rule in batch mode at the batch price: not built yet (issue 28, item 2).

    python bench/verdicts.py [--traces 300] [--store rocksdb]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from throughput import Phase, fetch_metrics, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, produce, reader
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scripted_judge import MockJudge

RULE = "studio_live_coach_feedback_quality"


def cost(page: str) -> float:
    """The judge cost the worker has counted so far (USD, every rule and model)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith("scorer_rule_judge_cost_usd_total{")
    )


async def score_events(bootstrap: str, topic: str, total: int, timeout: float) -> list[dict]:
    """Every score event on ``topic`` from its start, once ``total`` are there or ``timeout``
    passed (a pass's scores come on top of the earlier passes', with the same ids when
    cached; a redelivery after a kill adds its own)."""
    found: list[dict] = []
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while len(found) < total and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found.extend(orjson.loads(r.value) for r in records)
    return found


def distinct_live(n: int) -> list[bytes]:
    return [v for _, v in traces(n * 2) if b"studio-live-coach" in v][:n]


def unique(value: bytes, i: int) -> dict:
    """The trace with feedback of its own, so each asks the judge its own question (the
    throughput bench's traces are alike but for their ids, and alike prompts share a verdict).
    A document, produced keyed by its id as the contract says (a replay lands in the same
    partition: the verdicts table is kept per partition)."""
    document = orjson.loads(value)
    generation = document["output"]["generations"][0][0]
    generation["text"] = f"{generation['text']} (take {i}: keep the tempo at {60 + i} bpm)"
    return document


def wait_for_metrics(port: int, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return fetch_metrics(port)
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the worker's metrics never came up")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=300)
    parser.add_argument("--store", choices=("memory", "rocksdb"), default="rocksdb")
    args = parser.parse_args()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    workers: list[subprocess.Popen[bytes]] = []  # stopped whatever happens
    try:
        p = Phase(broker.bootstrap, tmp)
        asyncio.run(ensure_topics(broker.bootstrap, [p.src, p.dst], 4))
        live = [unique(v, i) for i, v in enumerate(distinct_live(args.traces))]
        n = len(live)
        rules = rules_subset(tmp, [RULE])
        env = {"SCORER_STORE": args.store, "SCORER_JUDGE_MODEL": "gpt-4o-mini"}
        with MockJudge(latency_s=0.05) as judge:
            judge.script("", '{"score": 3, "reason": "bench"}')
            proc, port = p.worker(rules, OPENAI_BASE_URL=judge.base_url, **env)
            workers.append(proc)
            wait_for_metrics(port)

            def one_pass() -> tuple[int, set[str], int, float]:
                """One pass over the traces: its judge calls, every score id on the topic so
                far, how many of its scores were cached, and what it cost."""
                settled = asyncio.run(score_events(broker.bootstrap, p.dst, 10**9, 5))
                calls, spent = len(judge.requests), cost(fetch_metrics(port))
                asyncio.run(produce(broker.bootstrap, p.src, live))
                events = asyncio.run(score_events(broker.bootstrap, p.dst, len(settled) + n, 300))
                cached = sum(1 for e in events if (e.get("details") or {}).get("cached"))
                return (
                    len(judge.requests) - calls,
                    {e["score_id"] for e in events},
                    cached,
                    cost(fetch_metrics(port)) - spent,
                )

            first_calls, first_ids, _, first_cost = one_pass()
            second_calls, second_ids, second_cached, second_cost = one_pass()
            page = fetch_metrics(port)
            hits = sample_value(page, "scorer_judge_cache_lookups_total", outcome="hit")
            saved = sample_value(page, "scorer_judge_cache_saved_cost_usd_total")
            per_1k = 1000 / max(n, 1)
            print(
                f"(v1) {n} traces, then the same again: first pass {first_calls} judge calls, "
                f"${first_cost * per_1k:.4f} per 1,000 traces; second pass {second_calls} "
                f"judge calls [target 0], ${second_cost * per_1k:.4f} per 1,000 [target 0]; "
                f"new score ids {len(second_ids - first_ids)} [target 0], {second_cached} of "
                f"{n} scores marked cached [target all]; cache hits {hits:.0f}, saved "
                f"${saved:.4f}"
            )

            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            proc, port = p.worker(rules, OPENAI_BASE_URL=judge.base_url, **env)
            workers.append(proc)
            wait_for_metrics(port)
            third_calls, third_ids, third_cached, _ = one_pass()
            print(
                f"(v2) killed and started again on the {args.store} store, the same {n} traces a "
                f"third time: {third_calls} judge calls [target 0]; new score ids "
                f"{len(third_ids - first_ids)} [target 0]; {third_cached - second_cached} scores "
                f"marked cached since the restart [target >= {n}: the pass, and redeliveries of "
                "what the kill left uncommitted]"
            )
            stop(proc)
        log = (tmp / f"worker-{p.suffix}.log").read_text(errors="replace")
        for line in log.splitlines():
            if "verdict index rebuilt" in line:
                print(f"     worker: {line.strip()[:160]}")
        print("(b)  one rule in batch mode: not built yet [target: half the online cost]")
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(30)
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
