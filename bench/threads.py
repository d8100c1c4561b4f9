"""Thread workload on the embedded broker. Prints figures; asserts nothing.

(t1) Many concurrent coaching sessions: ``--sessions`` sessions of ``--turns`` turns each,
     none ending, keyed by session id, produced to the sessions topic; a worker folds them
     into its thread table. Prints the fold rate (turn events per second, end to end with
     the changelog) against its target, the worker's CPU per event and its RSS with every
     session open. ``--t1-partitions 4`` (the default: as many as the thread events) folds
     them where they are read; ``3`` forwards them through the thread-events topic (the
     path before issue 30, and still that of a sessions topic not co-partitioned).
(t2) Close latency: ``--close-sessions`` sessions go idle at once with a short inactivity
     gap; prints how long after their deadline (last arrival + gap) the closes were decided
     (the worker's own histogram) and when their scores reached the scores topic.
(t3) Restart with ``--sessions`` open threads, per store (``--stores default,memory,rocksdb``;
     ``default``: SCORER_STORE unset): fold them, stop the worker (SIGTERM), start it again on
     the same data directory, and time from the start to the score of a probe session ended
     just after it, against its target; prints RSS too.
(t4) Soak: a steady ``--soak-rate`` session events per second for ``--soak-s`` seconds,
     short sessions of ``--turns`` turns with fresh ids, most ending with an end event and
     ``--soak-idle-share`` of them left to close by inactivity (gap ``--gap``); closed
     threads keep their turns ``--retention`` seconds. Every ~10 s prints the closes so far
     and the worker's RSS; at the end the RSS slope (MiB/min, least squares) over the first
     half (warm-up included) and over the second half, and per close in the second half.

    python bench/threads.py [--sessions 100000] [--turns 2] [--close-sessions 2000]
    python bench/threads.py --phases t1 --t1-partitions 4,3
    python bench/threads.py --phases t3 --sessions 100000 --stores default,memory,rocksdb
    python bench/threads.py --phases t4 --turns 3 [--soak-s 600] [--soak-rate 50] [--retention 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from process_io import cpu_seconds, produce
from throughput import Phase, fetch_metrics, histogram_quantile, rules_subset, stop

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader
from stream.metrics import sample_value

SESSION_RULES = ["studio_live_feedback_effectiveness", "studio_live_feedback_improvement"]
T0 = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)


def session_events(
    sessions: int, turns: int, prefix: str, start: datetime = T0, spacing_s: float = 8.0
) -> list[tuple[bytes, bytes]]:
    out = []
    for seq in range(turns):
        for n in range(sessions):
            session = f"{prefix}-{n}"
            event = {
                "session_id": session,
                "type": "turn",
                "seq": seq,
                "timestamp": (start + timedelta(seconds=spacing_s * seq)).isoformat(),
                "project_name": "fretcoach",
                "metrics": {
                    "pitch_accuracy": 0.9,
                    "scale_conformity": 0.82,
                    "timing_stability": 0.55 + seq / 50,
                },
                "feedback": "Timing Stability is your weakest metric; play with the metronome "
                "at 70 bpm and land each note on the click.",
            }
            out.append((session.encode(), orjson.dumps(event)))
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_metric(
    port: int,
    name: str,
    target: float,
    timeout: float,
    polled: Callable[[float], Any] = lambda t: None,
    **labels: str,
) -> list:
    """Poll until ``name`` reaches ``target``; returns [(monotonic time, value)] samples
    (``polled(time)`` is called at each)."""
    seen: list[tuple[float, float]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = sample_value(fetch_metrics(port), name, **labels)
        except OSError:  # the web server is not up yet: nothing reached
            time.sleep(0.5)
            continue
        now = time.monotonic()
        polled(now)
        seen.append((now, value))
        if value >= target:
            break
        time.sleep(0.5)
    return seen


def session_worker(
    bs: str,
    tmp: Path,
    gap: float,
    partitions: int = 4,
    backlog: Callable[[str, str], None] | None = None,
    **env: str,
) -> tuple[Phase, str, Any, int]:
    """A worker judging sessions only, ready (joined, recovered); its phase, sessions topic
    (``partitions``: 4, as many as the thread events, folds session events where they are
    read), process and web port. ``backlog(topic, suffix)``: what is produced to the
    sessions topic before the worker starts."""
    p = Phase(bs, tmp)
    topic = f"bench-sessions-{p.suffix}"
    asyncio.run(ensure_topics(bs, [topic], partitions))
    asyncio.run(ensure_topics(bs, [p.dst], 4))
    if backlog is not None:
        backlog(topic, p.suffix)
    rules = rules_subset(tmp, SESSION_RULES)
    proc, port = p.worker(
        rules, SCORER_SESSIONS_TOPIC=topic, SCORER_THREAD_INACTIVITY_GAP_S=str(gap), **env
    )
    wait_metric(port, "scorer_threads_open", 0, 60)  # the web server is up
    time.sleep(8)  # joined and recovered
    return p, topic, proc, port


T1_TARGET = 5000  # session events folded per second with 100 000 open threads (issue 30)


def open_threads_phase(bs: str, tmp: Path, sessions: int, turns: int, partitions: int) -> None:
    """The events are produced before the worker starts, so the producer does not compete
    with it for the cores; the rate is of what is folded between the first poll that sees
    a fold and the last (the poll's 0.5 s resolution aside)."""
    made: dict[str, Any] = {}

    def backlog(topic: str, suffix: str) -> None:
        events = made["events"] = session_events(sessions, turns, f"open-{suffix}")
        asyncio.run(produce(bs, topic, events))

    _, _, proc, port = session_worker(bs, tmp, gap=36_000, partitions=partitions, backlog=backlog)
    events = made["events"]
    baseline = rss_mib(proc.pid)
    size = sum(len(v) for _, v in events) / len(events)
    how = "folded where read" if partitions == 4 else "forwarded through the thread events"
    print(
        f"(t1) {sessions} sessions x {turns} turns = {len(events)} events of ~{size:.0f} bytes, "
        f"produced before the worker started; sessions topic of {partitions} partitions, "
        f"thread events 4: {how}"
    )
    cpu_at: dict[float, float] = {}  # CPU seconds at each poll
    seen = wait_metric(
        port,
        "scorer_thread_events_total",
        len(events),
        1800,
        polled=lambda t: cpu_at.setdefault(t, cpu_seconds(proc.pid)),
        type="turn",
    )
    started, first = next((t, v) for t, v in seen if v > 0)
    ended, folded = seen[-1]
    rate = (folded - first) / max(ended - started, 1e-9)
    cpu_per_event = (cpu_at[ended] - cpu_at[started]) / max(folded - first, 1)
    text = fetch_metrics(port)
    print(
        f"     folded {folded:.0f} turn events at {rate:,.0f} events/s [target >= {T1_TARGET} "
        f"events/s] (poll resolution 0.5 s); worker CPU {cpu_per_event * 1e6:.0f} us per "
        "event (both between the first poll that saw a fold and the last)"
    )
    print(
        f"     open threads {sample_value(text, 'scorer_threads_open'):.0f}; worker RSS "
        f"{rss_mib(proc.pid):.0f} MiB (idle before the fold: {baseline:.0f} MiB)"
    )
    stop(proc)


def close_latency_phase(bs: str, tmp: Path, sessions: int, gap: float) -> None:
    p, topic, proc, port = session_worker(bs, tmp, gap)
    # live: event times are now, so only the wall clock (ticks) closes them
    events = session_events(sessions, 3, f"close-{p.suffix}", datetime.now(UTC), 0.001)
    asyncio.run(produce(bs, topic, events))
    produced = time.time()
    expected = sessions * len(SESSION_RULES)

    async def score_times() -> list[float]:
        stamps: list[float] = []
        deadline = time.monotonic() + 300
        async with reader(bs, p.dst) as consumer:
            while len(stamps) < expected and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    stamps.extend(r.timestamp / 1000 for r in records)
        return stamps

    stamps = sorted(asyncio.run(score_times()))
    text = fetch_metrics(port)
    stop(proc)
    if len(stamps) < expected:
        print(f"(t2) only {len(stamps)}/{expected} scores arrived")
        return
    name = "scorer_thread_close_delay_seconds"
    p50, p99 = histogram_quantile(text, name, 0.5), histogram_quantile(text, name, 0.99)
    closes = sample_value(text, "scorer_thread_closes_total", reason="inactivity")
    print(f"(t2) {sessions} sessions idle at once, gap {gap:g} s, tick 1 s")
    if p50 is not None and p99 is not None:
        print(
            f"     {closes:.0f} inactivity closes decided after their deadline: "
            f"p50 {p50:.2f} s, p99 {p99:.2f} s"
        )
    deadline = produced + gap  # every last turn arrived by ``produced``
    print(
        f"     scores on the topic after the deadline: first {stamps[0] - deadline:+.2f} s, "
        f"median {stamps[len(stamps) // 2] - deadline:+.2f} s, last {stamps[-1] - deadline:+.2f} s"
    )


# (t3) issue 30: a restart with 100 000 open threads scores again within these, by store
RESTART_TARGET_S = {"default": 10.0, "memory": 20.0}


def folded_sessions_worker(
    bs: str, tmp: Path, sessions: int, turns: int, ready_s: float = 60, **env: str
) -> tuple[Phase, str, Path, dict[str, str], subprocess.Popen[bytes], int]:
    """A worker judging sessions only, with ``sessions`` open sessions of ``turns`` turns
    folded (none closing: a 10-hour gap) and their changelog written: its phase, sessions
    topic, rules, environment (``env`` over the sessions' own; the data directory kept for a
    restart), process and web port. ``ready_s``: how long its web server may take to come up."""
    p = Phase(bs, tmp)
    topic = f"bench-sessions-{p.suffix}"
    asyncio.run(ensure_topics(bs, [topic, p.dst], 4))
    rules = rules_subset(tmp, SESSION_RULES)
    env = {
        "SCORER_SESSIONS_TOPIC": topic,
        "SCORER_THREAD_INACTIVITY_GAP_S": "36000",
        "SCORER_DATA_DIR": str(tmp / f"data-{p.suffix}"),  # the same one after a restart
        **env,
    }
    proc, port = p.worker(rules, **env)
    wait_metric(port, "scorer_threads_open", 0, ready_s)
    events = session_events(sessions, turns, f"restart-{p.suffix}")
    asyncio.run(produce(bs, topic, events))
    wait_metric(port, "scorer_thread_events_total", len(events), 1800, type="turn")
    time.sleep(3)  # the last changelog writes
    return p, topic, rules, env, proc, port


def probe_events(probe: str, turns: int) -> list[tuple[bytes, bytes]]:
    """One session of one turn and its end, on the folded sessions' own timeline: a probe
    stamped now would move its source two days on in event time and rightly close every
    thread of that source. Keyed by its session id, as producers are asked to (keyed
    otherwise, the probe's close was not scored within 600 s at 4d5083c)."""
    at = T0 + timedelta(seconds=8 * turns)
    events = session_events(1, 1, probe, at)
    end = {"session_id": f"{probe}-0", "type": "end", "seq": 9, "timestamp": at.isoformat()}
    events.append((f"{probe}-0".encode(), orjson.dumps(end)))
    return events


async def probe_scored(bs: str, topic: str, probe: str, timeout: float = 600) -> float | None:
    """When (``time.monotonic()``) the probe's score reached ``topic``, or None."""
    deadline = time.monotonic() + timeout
    async with reader(bs, topic) as consumer:
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                if any(probe.encode() in r.value for r in records):
                    return time.monotonic()
    return None


def restart_phase(bs: str, tmp: Path, sessions: int, turns: int, store: str) -> None:
    stored = {"SCORER_STORE": store} if store != "default" else {}
    p, topic, rules, env, proc, _ = folded_sessions_worker(bs, tmp, sessions, turns, **stored)
    stopping = time.monotonic()
    stop(proc)
    print(
        f"     [{store}] first worker stopped in {time.monotonic() - stopping:.1f} s "
        f"(exit code {proc.returncode}); data {env['SCORER_DATA_DIR']}",
        flush=True,
    )
    probe = f"probe-{p.suffix}"
    started = time.monotonic()
    proc, _ = p.worker(rules, **env)
    spy = None
    if pyspy := os.environ.get("SCORER_BENCH_PYSPY"):  # a py-spy binary: sample the restart
        spy = subprocess.Popen(
            [
                pyspy,
                "record",
                "-p",
                str(proc.pid),
                "-r",
                "25",
                "-f",
                "raw",
                "--nonblocking",
                "--idle",
                "-o",
                str(tmp / f"restart-{store}-{p.suffix}.pyspy.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    asyncio.run(produce(bs, topic, probe_events(probe, turns)))
    scored = asyncio.run(probe_scored(bs, p.dst, probe))
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    rss, cpu = rss_mib(proc.pid), cpu_seconds(proc.pid)
    stop(proc)
    took = f"{scored - started:.1f} s" if scored else "no score in 600 s"
    target = RESTART_TARGET_S.get(store)
    print(
        f"(t3) {store}: {sessions} open sessions; restart to the first new score {took}"
        + (f" [target < {target:.0f} s]" if target else "")
        + f" ({cpu:.1f} s of the worker's CPU until then); RSS after {rss:.0f} MiB"
    )


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0.0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def closes_so_far(port: int) -> float:
    text = fetch_metrics(port)
    return sum(
        sample_value(text, "scorer_thread_closes_total", reason=reason)
        for reason in ("end", "inactivity", "inactivity_event_time")
    )


def soak_phase(
    bs: str,
    tmp: Path,
    seconds: float,
    rate: float,
    turns: int,
    gap: float,
    retention: float,
    idle_share: float,
    every: float = 10.0,
) -> None:
    p, topic, proc, port = session_worker(bs, tmp, gap, SCORER_THREAD_RETENTION_S=f"{retention:g}")
    prefix = f"soak-{p.suffix}"
    batch = 10  # sessions interleaved at once: their turns, then their ends
    idle_every = round(1 / idle_share) if idle_share > 0 else 0

    def session_batch(first: int) -> list[tuple[bytes, bytes]]:
        now = datetime.now(UTC)
        out = []
        for seq in range(turns + 1):
            for n in range(first, first + batch):
                session = f"{prefix}-{n}"
                if seq < turns:
                    event = {
                        "session_id": session,
                        "type": "turn",
                        "seq": seq,
                        "timestamp": (now + timedelta(seconds=0.2 * seq)).isoformat(),
                        "project_name": "fretcoach",
                        "metrics": {
                            "pitch_accuracy": 0.9,
                            "scale_conformity": 0.82,
                            "timing_stability": 0.55 + seq / 50,
                        },
                        "feedback": "Timing Stability is your weakest metric; play with the "
                        "metronome at 70 bpm and land each note on the click.",
                    }
                elif idle_every and n % idle_every == 0:
                    continue  # left to close by inactivity
                else:
                    event = {"session_id": session, "type": "end", "seq": seq}
                out.append((session.encode(), orjson.dumps(event)))
        return out

    samples: list[tuple[float, float, float]] = []  # (minutes since start, closes, RSS MiB)

    async def run() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=10)
        await producer.start()
        sent, sessions = 0, 0
        started = time.monotonic()
        next_sample = started
        try:
            while (now := time.monotonic()) < started + seconds:
                if now >= next_sample:
                    closes = await asyncio.to_thread(closes_so_far, port)
                    rss = rss_mib(proc.pid)
                    minutes = (now - started) / 60
                    samples.append((minutes, closes, rss))
                    print(
                        f"     {minutes * 60:5.0f} s  sent {sent:7d}  closes {closes:7.0f}  "
                        f"RSS {rss:6.1f} MiB",
                        flush=True,
                    )
                    next_sample += every
                for key, value in session_batch(sessions):
                    await producer.send(topic, key=key, value=value)
                    sent += 1
                    # paced against the start, so a slow send is caught up, not lost
                    delay = started + sent / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                sessions += batch
            await producer.flush()
        finally:
            await producer.stop()
        return sent

    print(
        f"(t4) soak {seconds:g} s at {rate:g} session events/s: sessions of {turns} turns, "
        f"{idle_share:.0%} left to close by inactivity (gap {gap:g} s), retention {retention:g} s"
    )
    try:
        sent = asyncio.run(run())
        time.sleep(gap + 2)  # the idle sessions close
        closes, rss = closes_so_far(port), rss_mib(proc.pid)
    finally:
        stop(proc)
    half = seconds / 120
    first = [(m, r) for m, _, r in samples if m <= half]
    second = [(m, r) for m, _, r in samples if m >= half]
    closes_second = [(m, c) for m, c, _ in samples if m >= half]
    per_minute = slope(closes_second)
    rss_slope = slope(second)
    per_close = rss_slope * 1024 * 1024 / per_minute if per_minute else float("nan")
    print(f"     sent {sent} events; {closes:.0f} closes")
    print(
        f"     RSS {samples[0][2]:.1f} -> {rss:.1f} MiB; slope first half "
        f"{slope(first):.2f} MiB/min, second half {rss_slope:.2f} MiB/min "
        f"({per_minute:.0f} closes/min: {per_close:,.0f} bytes per close)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--close-sessions", type=int, default=2000)
    parser.add_argument("--gap", type=float, default=5.0)
    parser.add_argument("--phases", default="t1,t2")
    parser.add_argument(
        "--t1-partitions",
        default="4",
        help="sessions topic partitions for t1, comma-separated runs: 4 (as many as the "
        "thread events: folded where read), 3 (forwarded, as before issue 30)",
    )
    parser.add_argument("--stores", default="default,memory,rocksdb")
    parser.add_argument("--soak-s", type=float, default=600.0)
    parser.add_argument("--soak-rate", type=float, default=50.0)
    parser.add_argument("--soak-idle-share", type=float, default=0.25)
    parser.add_argument("--retention", type=float, default=30.0)
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-threads-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    print(f"embedded broker {broker.bootstrap}; 2 cores; logs in {tmp}", flush=True)
    try:
        if "t1" in phases:
            for count in args.t1_partitions.split(","):
                open_threads_phase(broker.bootstrap, tmp, args.sessions, args.turns, int(count))
        if "t2" in phases:
            close_latency_phase(broker.bootstrap, tmp, args.close_sessions, args.gap)
        if "t3" in phases:
            for store in args.stores.split(","):
                restart_phase(broker.bootstrap, tmp, args.sessions, args.turns, store)
        if "t4" in phases:
            soak_phase(
                broker.bootstrap,
                tmp,
                args.soak_s,
                args.soak_rate,
                args.turns,
                args.gap,
                args.retention,
                args.soak_idle_share,
            )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
