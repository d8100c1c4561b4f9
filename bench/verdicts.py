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
(b)  the same rule run twice on the same traces, each run on fresh topics and a fresh worker
     (its own group and data dir, so no verdict cache answers): online against the scripted
     judge, then with ``judge.mode: batch`` (a copy of the rule in a temporary rules folder)
     against the Batch API double (``tests/batch_double.py``) answering the same content. Both
     count tokens alike (prompt: the last message's characters // 4; completion: the answer's
     characters // 4), so the token totals match and only the price differs: online and batch
     cost per 1,000 traces, their ratio [<= 0.5], judge calls online in the batch run [0],
     batches submitted and requests per batch, and the time from the last trace produced to
     the last batched score (minutes to hours by design; seconds with the double: no target).

    python bench/verdicts.py [--traces 300] [--store rocksdb] [--phases v,b] [--keep]
        [--batch-max-jobs 100] [--batch-max-wait-s 5] [--batch-poll-s 0.5] [--batch-store STORE]

(b) runs on ``--store`` unless ``--batch-store`` says otherwise.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from throughput import Phase, fetch_metrics, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, produce, reader
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from batch_double import BatchDouble
from scripted_judge import MockJudge

RULE = "studio_live_coach_feedback_quality"
ANSWER = '{"score": 3, "reason": "bench"}'  # what both judges answer, online and in a batch
SCORES_TIMEOUT_S = 180  # a run's scores: seconds with the double (a batch is done at its 3rd poll)


def cost(page: str) -> float:
    """The judge cost the worker has counted so far (USD, every rule and model)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith("scorer_rule_judge_cost_usd_total{")
    )


async def score_records(
    bootstrap: str, topic: str, total: int, timeout: float
) -> list[tuple[dict[str, Any], int]]:
    """Every score event on ``topic`` from its start with its Kafka timestamp (ms), once
    ``total`` are there or ``timeout`` passed."""
    found: list[tuple[dict[str, Any], int]] = []
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while len(found) < total and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found.extend((orjson.loads(r.value), r.timestamp) for r in records)
    return found


async def score_events(
    bootstrap: str, topic: str, total: int, timeout: float
) -> list[dict[str, Any]]:
    """Every score event on ``topic`` from its start, once ``total`` are there or ``timeout``
    passed (a pass's scores come on top of the earlier passes', with the same ids when
    cached; a redelivery after a kill adds its own)."""
    return [event for event, _ in await score_records(bootstrap, topic, total, timeout)]


def distinct_live(n: int) -> list[bytes]:
    return [v for _, v in traces(n * 2) if b"studio-live-coach" in v][:n]


def unique(value: bytes, i: int) -> dict[str, Any]:
    """The trace with feedback of its own, so each asks the judge its own question (the
    throughput bench's traces are alike but for their ids, and alike prompts share a verdict).
    A document, produced keyed by its id as the contract says (a replay lands in the same
    partition: the verdicts table is kept per partition)."""
    document: dict[str, Any] = orjson.loads(value)
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


def replay_passes(
    broker: EmbeddedBroker,
    tmp: Path,
    live: list[dict[str, Any]],
    store: str,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    """(v1) and (v2): the same traces through one worker three times, killed before the third."""
    n = len(live)
    p = Phase(broker.bootstrap, tmp)
    asyncio.run(ensure_topics(broker.bootstrap, [p.src, p.dst], 4))
    rules = rules_subset(tmp, [RULE])
    env = {"SCORER_STORE": store, "SCORER_JUDGE_MODEL": "gpt-4o-mini"}
    with MockJudge(latency_s=0.05) as judge:
        judge.script("", ANSWER)
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
            f"(v2) killed and started again on the {store} store, the same {n} traces a "
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


def in_batch_mode(rules: Path, max_jobs: int, max_wait_s: float) -> None:
    """Turn the copied rule's judge block to ``judge.mode: batch`` (the copy only; the rule
    under ``rules/`` is untouched)."""
    path = rules / "fretcoach" / f"{RULE}.yaml"
    text = path.read_text()
    online = "\njudge:\n  temperature: 0.0\n"
    if online not in text:
        raise RuntimeError(f"{path.name}: its judge block changed; update bench/verdicts.py")
    batched = (
        f"{online}  mode: batch\n  batch:\n    max_jobs: {max_jobs}\n"
        f"    max_wait_s: {max_wait_s:g}\n"
    )
    path.write_text(text.replace(online, batched))


@dataclass
class Run:
    """One run of the rule over the traces, on fresh topics and a fresh worker."""

    scores: list[dict[str, Any]]
    cost: float  # USD, from the worker's scorer_rule_judge_cost_usd_total
    online_calls: int  # chat completions the scripted judge answered during the run
    produced_at: float  # wall clock (s) once the last trace was produced
    last_score_at: float  # Kafka timestamp (s) of the last score

    def tokens(self) -> tuple[int, int]:
        """Prompt and completion tokens, summed over the scores' usage."""
        usages = [s.get("usage") or {} for s in self.scores]
        return (
            sum(u.get("prompt_tokens", 0) for u in usages),
            sum(u.get("completion_tokens", 0) for u in usages),
        )


def run_rule(
    broker: EmbeddedBroker,
    tmp: Path,
    live: list[dict[str, Any]],
    judge: MockJudge,
    workers: list[subprocess.Popen[bytes]],
    rules: Path,
    **env: str,
) -> Run:
    """The traces through a fresh worker (fresh topics, group and data dir: no verdict cache
    from another run) until each has its score."""
    n = len(live)
    p = Phase(broker.bootstrap, tmp)
    asyncio.run(ensure_topics(broker.bootstrap, [p.src, p.dst], 4))
    proc, port = p.worker(
        rules, OPENAI_BASE_URL=judge.base_url, SCORER_JUDGE_MODEL="gpt-4o-mini", **env
    )
    workers.append(proc)
    wait_for_metrics(port)
    calls = len(judge.requests)
    asyncio.run(produce(broker.bootstrap, p.src, live))
    produced_at = time.time()
    records = asyncio.run(score_records(broker.bootstrap, p.dst, n, SCORES_TIMEOUT_S))
    if len(records) < n:
        raise RuntimeError(
            f"only {len(records)} of {n} scores came within {SCORES_TIMEOUT_S} s "
            f"(the worker's log: {tmp / f'worker-{p.suffix}.log'}, kept with --keep)"
        )
    spent = cost(fetch_metrics(port))
    stop(proc)
    return Run(
        scores=[event for event, _ in records],
        cost=spent,
        online_calls=len(judge.requests) - calls,
        produced_at=produced_at,
        last_score_at=max(stamp for _, stamp in records) / 1000,
    )


def batch_phase(
    broker: EmbeddedBroker,
    tmp: Path,
    live: list[dict[str, Any]],
    workers: list[subprocess.Popen[bytes]],
    args: argparse.Namespace,
) -> None:
    """(b): the rule online, then in batch mode, on the same traces."""
    n = len(live)
    per_1k = 1000 / max(n, 1)
    with MockJudge(latency_s=0.05) as judge, BatchDouble(default=ANSWER) as api:
        judge.script("", ANSWER)
        store = {"SCORER_STORE": args.batch_store}
        online = run_rule(broker, tmp, live, judge, workers, rules_subset(tmp, [RULE]), **store)
        batch_rules = rules_subset(tmp, [RULE])
        in_batch_mode(batch_rules, args.batch_max_jobs, args.batch_max_wait_s)
        batched = run_rule(
            broker,
            tmp,
            live,
            judge,
            workers,
            batch_rules,
            SCORER_BATCH_BASE_URL=api.base_url,
            SCORER_BATCH_POLL_S=f"{args.batch_poll_s:g}",
            **store,
        )
        sizes = [len(b.lines) for b in api.batches.values()]
        statuses = sorted({b.status for b in api.batches.values()})
    marked = sum(1 for s in batched.scores if (s.get("usage") or {}).get("batch") is True)
    ok = sum(1 for s in batched.scores if s.get("status") == "ok")
    online_1k, batch_1k = online.cost * per_1k, batched.cost * per_1k
    ratio = batched.cost / online.cost if online.cost else float("nan")
    print(
        f"(b)  {n} traces through the same rule, each run on fresh topics and a fresh worker "
        f"({args.batch_store} store); "
        f"tokens counted alike by both judges (prompt: the last message's characters // 4, "
        f"completion: the answer's // 4): online {online.tokens()[0]} prompt + "
        f"{online.tokens()[1]} completion tokens, batch {batched.tokens()[0]} + "
        f"{batched.tokens()[1]}"
    )
    print(
        f"     online ${online_1k:.4f} per 1,000 traces ({online.online_calls} judge calls); "
        f"batch mode ${batch_1k:.4f} per 1,000 traces ({marked} of {n} scores usage.batch, "
        f"{ok} ok); batch / online = {ratio:.3f} [target <= 0.5]"
    )
    print(
        f"     judge calls online in the batch run: {batched.online_calls} [target 0]; "
        f"batches submitted {len(sizes)} ({', '.join(statuses)}), requests per batch "
        f"{sizes} (judge.batch.max_jobs {args.batch_max_jobs}, max_wait_s "
        f"{args.batch_max_wait_s:g}, SCORER_BATCH_POLL_S {args.batch_poll_s:g})"
    )
    print(
        f"     last trace produced to last batched score: "
        f"{batched.last_score_at - batched.produced_at:.1f} s (minutes to hours by design; "
        f"the double finishes a batch at its third poll) [no target]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=300)
    parser.add_argument("--store", choices=("memory", "rocksdb"), default="rocksdb")
    parser.add_argument("--phases", default="v,b", help="comma-separated subset of v,b")
    parser.add_argument("--batch-max-jobs", type=int, default=100)
    parser.add_argument("--batch-max-wait-s", type=float, default=5.0)
    parser.add_argument("--batch-poll-s", type=float, default=0.5)
    parser.add_argument("--batch-store", choices=("memory", "rocksdb"), default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    args.batch_store = args.batch_store or args.store
    phases = set(args.phases.split(","))
    if not phases <= {"v", "b"}:
        parser.error(f"--phases: unknown {sorted(phases - {'v', 'b'})}; choose from v,b")
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    workers: list[subprocess.Popen[bytes]] = []  # stopped whatever happens
    try:
        live = [unique(v, i) for i, v in enumerate(distinct_live(args.traces))]
        if "v" in phases:
            replay_passes(broker, tmp, live, args.store, workers)
        if "b" in phases:
            batch_phase(broker, tmp, live, workers, args)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(30)
        broker.stop()
        if args.keep:
            print(f"kept {tmp} (the workers' logs, the broker's log)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
