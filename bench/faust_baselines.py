"""Phases (a') and (a'') of ``bench/throughput.py``: the Faust workers the scorer is measured
against, each parsing every trace and forwarding it, on the same traces. Prints figures;
asserts nothing.

- (a') the naive agent (``faust_forward.py``): a record at a time, each forward awaited
  (``await Topic.send``), on stock Faust's transport.
- (a'') the competent one (``faust_competent.py``): batches (``Stream.take_events``), forwards
  handed to the producer unawaited (``Topic.send_soon``), a producer linger, on the transport
  the scorer's worker gets (the mends of ``stream/kafka/mends``, ``tansu://``).
- (a''') the competent one doing (b)'s job by hand (``faust_same_job.py``): the same two
  checks on each trace, a score and a decision record published for it.

Each runs in a process of its own; ``measure`` (the bench's drain) gives its rate from the
output records' timestamps and its CPU time per trace between its first output and its last.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from process_io import produce

from stream.kafka.io import ensure_topics

BENCH = Path(__file__).resolve().parent

# (output topic, records expected, worker pid) -> (traces/s, worker CPU us per trace)
Measure = Callable[[str, int, int], tuple[float, float]]


@dataclass(frozen=True)
class Baseline:
    """A Faust baseline: its phase label, what it is, and the app that runs it."""

    label: str
    title: str
    app: Path


BASELINES = (
    Baseline("a'", "Faust agent, naive", BENCH / "faust_forward.py"),
    Baseline("a''", "Faust agent, competent + mends", BENCH / "faust_competent.py"),
    Baseline("a'''", "Faust worker, (b)'s job by hand", BENCH / "faust_same_job.py"),
)


def run_baseline(
    baseline: Baseline,
    bootstrap: str,
    tmp: Path,
    messages: list[tuple[bytes, bytes]],
    measure: Measure,
) -> tuple[float, float]:
    """``messages`` through ``baseline``'s app, on topics of their own: (traces/s, CPU us)."""
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"bench-in-{suffix}", f"bench-out-{suffix}"
    asyncio.run(ensure_topics(bootstrap, [src, dst, f"{dst}-decisions"], 4))
    asyncio.run(produce(bootstrap, src, messages))
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "BENCH_APP_ID": f"fwd-{suffix}",
        "BENCH_IN": src,
        "BENCH_OUT": dst,
        "BENCH_DATA_DIR": str(tmp / f"fwd-{suffix}"),
    }
    log = open(tmp / f"fwd-{suffix}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(baseline.app)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        return measure(dst, len(messages), proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def faust_baselines(
    bootstrap: str,
    tmp: Path,
    traces: Callable[[], list[tuple[bytes, bytes]]],
    measure: Measure,
    labels: set[str],
) -> dict[str, float]:
    """The baselines among ``labels``, each on fresh ``traces()``: prints and returns their
    rates (``a'``, ``a''``, ``a'''``) and CPU per trace (``a' cpu``, ...)."""
    results: dict[str, float] = {}
    for baseline in BASELINES:
        if baseline.label not in labels:
            continue
        rate, cpu_us = run_baseline(baseline, bootstrap, tmp, traces(), measure)
        results[baseline.label] = rate
        results[f"{baseline.label} cpu"] = cpu_us
        head = f"({baseline.label}) {baseline.title}"
        print(f"{head:36}{rate:8.0f} traces/s   worker CPU per trace {cpu_us:.0f} us")
    return results
