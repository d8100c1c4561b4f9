"""Scale-out benchmark on the embedded broker. Prints figures with their targets; asserts nothing.

Phase (s): phase (b) of ``bench/throughput.py`` (the same two deterministic FretCoach rules,
the same traces) on a 12-partition source topic, run with 1, then 2, then 3 workers in one
consumer group; fresh topics, group and data directories for each step. All workers of a step
are started and the group is left to settle (every worker's /metrics answers, the broker
describes the group as Stable with every worker in it) before any trace is produced.

Traces are produced round-robin over the 12 partitions, so every partition holds the same
number of traces and a worker's partitions follow exactly from the traces it consumed
(``scorer_traces_consumed_total`` on its /metrics); the broker's own description of the group
is printed beside them when it gives one.

For each step it prints the rate (from the output records' Kafka timestamps, first to last)
and, per worker, CPU time per trace it consumed: the process's CPU (from /proc) and its
consumed count, both taken when the first trace is consumed and when all are consumed and
none is in flight (phase (b) takes them at the first and last score it reads). The ratio of the mean CPU per trace at k workers to 1 worker
is the scaling figure: flat (<= 1.1) means linear scaling. On a 2-core machine 3 workers
cannot be faster than 2 in wall-clock rate; CPU per trace is the figure that matters.

    python bench/scale.py [--traces 30000] [--workers 1,2,3] [--partitions 12]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_io import cpu_seconds
from throughput import CHECK_RULES, Phase, fetch_metrics, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader

TARGET = 1.1


@dataclass
class Step:
    """One step of phase (s): k workers, what each did, and the rate."""

    workers: int
    rate: float
    cpu_us: list[float]  # per worker: CPU microseconds per trace consumed in the window
    consumed: list[int]  # per worker: traces consumed in the whole step
    partitions: list[float]  # per worker: consumed / traces per partition
    broker_view: str


def consumed(metrics_text: str, topic: str) -> int:
    """The worker's ``scorer_traces_consumed_total`` for ``topic`` (0 before its first)."""
    m = re.search(
        rf'scorer_traces_consumed_total\{{topic="{re.escape(topic)}"\}} (\S+)', metrics_text
    )
    return int(float(m[1])) if m else 0


async def produce_round_robin(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]], partitions: int
) -> None:
    """Every ``partitions``-th message to the same partition: equal traces per partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=262144)
    await producer.start()
    try:
        for i, (key, value) in enumerate(messages):
            await producer.send(topic, key=key, value=value, partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def describe(bootstrap: str, group: str, topic: str) -> tuple[str, int, list[int]]:
    """The group as the broker describes it: state, members, ``topic`` partitions per member."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
        _, _, state, _, _, members = response.groups[0]
        owned = []
        for member in members:
            if not member[-1]:  # a member not yet given its assignment
                owned.append(0)
                continue
            assignment = ConsumerProtocolMemberAssignment.decode(member[-1])
            owned.append(sum(len(p) for t, p in assignment.assignment if t == topic))
        return state, len(members), owned
    finally:
        await admin.close()


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_settled(
    bootstrap: str,
    group: str,
    topic: str,
    ports: list[int],
    procs: list[subprocess.Popen[bytes]],
    log: Path,
    timeout: float = 120,
) -> str:
    """Wait until every worker's /metrics answers and the broker says the group is Stable with
    all of them in it; then a few seconds more with
    nothing changing. Returns the broker's view (or why there is none)."""
    deadline = time.monotonic() + timeout
    pending = set(ports)
    while pending and time.monotonic() < deadline:
        for port in list(pending):
            if exited := [proc.returncode for proc in procs if proc.poll() is not None]:
                raise RuntimeError(f"a worker exited (codes {exited}): see {log}:\n{tail(log)}")
            try:
                fetch_metrics(port)
                pending.discard(port)
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
        time.sleep(0.5)
    if pending:
        raise TimeoutError(f"workers on ports {sorted(pending)} never answered /metrics")
    last: tuple[str, int, tuple[int, ...]] | None = None
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        try:
            state, members, owned = asyncio.run(describe(bootstrap, group, topic))
        except Exception as exc:  # a broker that does not describe groups: settle by time
            time.sleep(10)
            return f"not described ({exc!r}); waited 10 s after /metrics answered"
        view = (state, members, tuple(sorted(owned)))
        # the embedded broker (tansu) describes members without their assignments
        ready = state == "Stable" and members == len(ports)
        if view != last or not ready:
            last, stable_since = view, time.monotonic()
        elif time.monotonic() - stable_since >= 5:
            said = f"{sorted(owned, reverse=True)} partitions" if any(owned) else "(no assignments)"
            return f"{state}, {members} members, {said}"
        time.sleep(0.5)
    raise TimeoutError(f"group {group} did not settle: last seen {last}")


def snapshot(pids: list[int], ports: list[int], src: str) -> list[tuple[float, int, float]]:
    """Each worker's (CPU seconds, traces consumed, traces in flight)."""
    out = []
    for pid, port in zip(pids, ports, strict=True):
        text = fetch_metrics(port)
        m = re.search(r"^scorer_traces_in_flight (\S+)", text, re.M)
        out.append((cpu_seconds(pid), consumed(text, src), float(m[1]) if m else 0.0))
    return out


def measure_workers(
    pids: list[int], ports: list[int], src: str, expected: int, timeout: float
) -> list[float]:
    """Each worker's CPU microseconds per trace it consumed, between the first trace consumed
    by any worker and the moment all ``expected`` are consumed and none is in flight (from the
    workers' /metrics: a reader of the scores topic started while the workers wrote to it
    missed records on the embedded broker)."""
    deadline = time.monotonic() + timeout
    start, now = None, []
    while time.monotonic() < deadline:
        now = snapshot(pids, ports, src)
        if start is None and sum(n for _, n, _ in now) > 0:
            start = now
        if sum(n for _, n, _ in now) >= expected and not any(f > 0 for _, _, f in now):
            break
        time.sleep(0.5)  # each /metrics read costs the worker a little CPU
    else:
        raise TimeoutError(f"{expected} traces not consumed after {timeout} s")
    assert start is not None
    return [
        (c1 - c0) / (n1 - n0) * 1e6 if n1 > n0 else float("nan")
        for (c0, n0, _), (c1, n1, _) in zip(start, now, strict=True)
    ]


async def output_span(
    bootstrap: str, topic: str, expected: int, timeout: float
) -> tuple[int, float]:
    """Count score records until ``expected``; (count, seconds from first to last timestamp)."""
    count, first, last = 0, None, None
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while count < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200, max_records=10000)).values():
                for r in records:
                    count += 1
                    first = r.timestamp if first is None else min(first, r.timestamp)
                    last = r.timestamp if last is None else max(last, r.timestamp)
    return count, ((last - first) / 1000.0 if first is not None and last is not None else 0.0)


def run_step(bootstrap: str, tmp: Path, rules: Path, n: int, k: int, partitions: int) -> Step:
    """k workers in one group on fresh topics: settle, produce ``n`` traces, drain the scores."""
    p = Phase(bootstrap, tmp)
    asyncio.run(ensure_topics(bootstrap, [p.src, p.dst], partitions))
    started = [
        p.worker(
            rules,
            SCORER_DATA_DIR=str(tmp / f"{p.suffix}-worker-{i}"),
            SCORER_TOPIC_PARTITIONS=str(partitions),
        )
        for i in range(k)
    ]
    procs = [proc for proc, _ in started]
    ports = [port for _, port in started]
    try:
        view = wait_settled(
            bootstrap, f"bench-{p.suffix}", p.src, ports, procs, tmp / f"worker-{p.suffix}.log"
        )
        messages = traces(n)

        pids = [x.pid for x in procs]

        async def produce() -> None:
            await produce_round_robin(bootstrap, p.src, messages, partitions)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            produced = pool.submit(asyncio.run, produce())
            cpu_us = measure_workers(pids, ports, p.src, n, 300)
            produced.result()
        count, secs = asyncio.run(output_span(bootstrap, p.dst, n, 120))
        if count < n:
            raise RuntimeError(
                f"{k} workers: {count} of {n} scores after the workers consumed them all"
            )
        totals = [consumed(fetch_metrics(port), p.src) for port in ports]
    finally:
        for proc in procs:
            stop(proc)
    per_partition = n / partitions
    return Step(k, count / secs, cpu_us, totals, [t / per_partition for t in totals], view)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=30000)
    parser.add_argument("--workers", default="1,2,3", help="comma-separated worker counts")
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    if args.traces % args.partitions:
        parser.error("--traces must be a multiple of --partitions (equal traces per partition)")
    tmp = Path(tempfile.mkdtemp(prefix="scorer-scale-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    print(
        f"embedded broker {broker.bootstrap}; phase (s): {args.traces} traces round-robin over "
        f"{args.partitions} partitions, phase (b)'s two deterministic rules; {os.cpu_count()} cores"
    )
    print(
        "     partitions per worker: its consumed traces / traces per partition (exact: equal "
        "traces per partition); broker: the group as the broker describes it"
    )
    print(
        "     CPU per trace is the scaling figure: on 2 cores, 3 workers cannot beat 2 in traces/s"
    )
    steps: list[Step] = []
    try:
        rules = rules_subset(tmp, CHECK_RULES)
        for k in counts:
            step = run_step(broker.bootstrap, tmp, rules, args.traces, k, args.partitions)
            steps.append(step)
            base = steps[0]
            mean = sum(step.cpu_us) / len(step.cpu_us)
            base_mean = sum(base.cpu_us) / len(base.cpu_us)
            cpu = ", ".join(f"{c:.0f}" for c in step.cpu_us)
            parts = ", ".join(f"{x:g}" for x in step.partitions)
            print(
                f"(s)  {k} worker{'s' if k > 1 else ' '}: {step.rate:7.0f} traces/s; CPU per trace per worker "
                f"{cpu} us (mean {mean:.0f}); partitions per worker {parts}"
            )
            print(f"     broker: {step.broker_view}; traces consumed per worker {step.consumed}")
            if k != base.workers:
                print(
                    f"     CPU per trace, {k} workers / {base.workers}: {mean / base_mean:.2f}  "
                    f"[target <= {TARGET}: flat means linear scaling]; rate {k} / {base.workers}: "
                    f"{step.rate / base.rate:.2f} (bounded by the cores)"
                )
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
