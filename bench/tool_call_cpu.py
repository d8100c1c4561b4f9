"""Phase (t) of ``bench/throughput.py``: agent traces with tool calls, scored by the default
packs; the worker's CPU per trace and per tool call. Prints figures; asserts nothing.

The trace is ``tests/tool_agent.py``'s agent, run once against the scripted model (the real
OpenAI SDK, no telemetry) and written in the trace model (``trace_model``): a system prompt, the
user's question, three declared tools with JSON schemas, four tool calls over two assistant
turns with their results (one failed, one with arguments that miss a required property, one
to a tool not declared), and the answer; about 2.5 kB. Each bench trace is a copy with its own
trace id and call ids, and no thread id (the conversation pack's rules would only hold thread
state until their 15-minute close).

Two workers, one after the other, on the same traces: the default selection of packs
(``SCORER_PACKS`` unset: the tools pack's five checks on every call, 20 scores a trace, and the
other shipped packs' deterministic checks where their filters match), then the same with the
tools pack's rules switched off (``SCORER_DISABLED_RULES``). CPU is the worker process's user
and system time (``/proc``) from its first decision message to its last (one a trace, so
start-up is not counted), over the traces decided in between; the difference of the two runs
over four is what scoring one call costs.

    python bench/tool_call_cpu.py [--traces 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import openai
import orjson
from opentelemetry.trace import get_tracer

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics, read_all, reader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from process_io import cpu_seconds, produce
from scripted_judge import MockJudge
from tool_agent import RULES, Agent, Run, script_model, trace_model


def agent_run() -> Run:
    """The agent's conversation, from one real run against the scripted model."""
    with MockJudge() as model:
        script_model(model)
        client = openai.OpenAI(base_url=model.base_url, api_key="sk-bench", max_retries=0)
        return Agent(client, get_tracer("bench")).run()


def agent_traces(run: Run, n: int) -> list[tuple[bytes, bytes]]:
    """``n`` copies of the run as trace-model traces, each with its own trace and call ids."""
    out = []
    for i in range(n):
        copied = Run(copy.deepcopy(run.messages))
        for message in copied.messages:
            for call in message.get("tool_calls", []):
                call["id"] = f"{call['id']}-{i}"
            if message["role"] == "tool":
                message["tool_call_id"] = f"{message['tool_call_id']}-{i}"
        trace = trace_model(copied, f"bench-tools-{uuid.uuid4().hex}-{i}", project="bench")
        out.append((trace["id"].encode(), orjson.dumps(trace)))
    return out


async def decided(bootstrap: str, topic: str, n: int, pid: int, timeout: float) -> dict[str, float]:
    """Read ``n`` decision messages; the worker's CPU seconds per trace and traces a second,
    both from the first message to the last."""
    count, start, cpu_start, first, last = 0, 0, 0.0, 0, 0
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while count < n and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200, max_records=10000)).values():
                for record in records:
                    first = first or record.timestamp
                    last = max(last, record.timestamp)
                    count += 1
            if count and not start:
                start, cpu_start = count, cpu_seconds(pid)
        cpu = cpu_seconds(pid) - cpu_start
    if count < n:
        raise SystemExit(f"(t) only {count} of {n} traces were decided in {timeout:.0f} s")
    if count == start:
        raise SystemExit(f"(t) all {n} traces were decided at once: too few to measure")
    return {
        "cpu_per_trace": cpu / (count - start),
        "traces_per_s": count / max((last - first) / 1000, 1e-3),
    }


def scores_by_scope(bootstrap: str, topic: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in asyncio.run(read_all(bootstrap, topic, None, idle_s=2.0)):
        scope = orjson.loads(value)["scope"]
        counts[scope] = counts.get(scope, 0) + 1
    return counts


def score(bootstrap: str, tmp: Path, traces: list[tuple[bytes, bytes]], **env: str) -> Any:
    """One worker (the shipped packs, the default selection, ``env`` over it) scoring
    ``traces``: its CPU per trace, traces a second, and its scores by scope."""
    suffix = uuid.uuid4().hex[:8]
    src, scores, decisions = (f"bench-{kind}-{suffix}" for kind in ("in", "out", "dec"))
    asyncio.run(ensure_topics(bootstrap, [src, scores, decisions], 4))
    asyncio.run(produce(bootstrap, src, traces))
    worker_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCORER_TRACES_TOPIC": src,
        "SCORER_SCORES_TOPIC": scores,
        "SCORER_DECISIONS_TOPIC": decisions,
        "SCORER_DLQ_TOPIC": f"bench-dlq-{suffix}",
        "SCORER_APP_ID": f"bench-{suffix}",
        "SCORER_WEB_PORT": str(free_port()),
        "SCORER_DATA_DIR": str(tmp / suffix),
        "SCORER_SESSION_TIMEOUT_S": "6",
        "SCORER_BROKER_KIND": "tansu",
        **env,
    }
    with open(tmp / f"worker-{suffix}.log", "ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stream.cli", "worker", "--loglevel", "warn"],
            env=worker_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        figures = asyncio.run(decided(bootstrap, decisions, len(traces), worker.pid, 600))
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
    return figures, scores_by_scope(bootstrap, scores)


def tool_call_phase(bootstrap: str, tmp: Path, n: int) -> dict[str, float]:
    """Phase (t): prints its figures and returns them."""
    run = agent_run()
    calls = len(run.calls)
    traces = agent_traces(run, n)
    size = sum(len(value) for _, value in traces) // n
    full, by_scope = score(bootstrap, tmp, traces)
    off = {"SCORER_DISABLED_RULES": orjson.dumps(list(RULES)).decode()}
    without, _ = score(bootstrap, tmp, agent_traces(run, n), **off)
    per_trace, base = full["cpu_per_trace"], without["cpu_per_trace"]
    per_call = per_trace / calls
    marginal = (per_trace - base) / calls
    print(
        f"(t)  scorer, agent traces ({calls} tool calls, ~{size} bytes), default packs: "
        f"{full['traces_per_s']:6.0f} traces/s"
    )
    print(
        f"     worker CPU per trace {per_trace * 1e6:.0f} us, per tool call {per_call * 1e6:.0f} us "
        f"({per_call:.6f} s); {by_scope.get('tool_call', 0) / n:.0f} tool-call and "
        f"{by_scope.get('trace', 0) / n:.0f} trace scores a trace"
    )
    print(
        f"     without the tools pack's rules {base * 1e6:.0f} us a trace: scoring one call "
        f"costs {marginal * 1e6:.0f} us"
    )
    return {"t cpu trace": per_trace, "t cpu call": per_call, "t cpu call marginal": marginal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=5000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-tools-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    try:
        tool_call_phase(broker.bootstrap, tmp, args.traces)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
