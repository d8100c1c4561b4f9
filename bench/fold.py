"""The pure per-event cost of folding coaching-session events, in process, without Kafka.
Prints figures; asserts nothing.

Builds ``--sessions`` sessions x ``--turns`` turns of session events as ``threads.py``'s t1
phase produces them (keyed by session id, none ending), and takes each as the thread agent
does with a co-partitioned sessions topic (``SessionIntake.take``): parsed
(``parse_session``), converted (``ThreadRouter.from_session`` and the partition it is placed
in), applied (``ThreadProcessor.apply``) to a plain dict as the thread table, and its source
read up to it (``SourceLog.read``); with the worker's settings for the FretCoach session
rules and a gap long enough that nothing closes;
every 5 000 events each partition gets a progress report, as from the worker's timer (untimed).
Prints the microseconds per event of each stage and in all (the apply of the first turns,
which open the threads, and of the later ones, folded into up to ``--sessions`` open
threads), the least of ``--repeat`` runs (the machine's noise only adds); ``--profile N``
prints cProfile's top N functions (by own time) of each run.

    python bench/fold.py [--sessions 100000] [--turns 2] [--partitions 4] [--repeat 3]
    python bench/fold.py --sessions 20000 --profile 30
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import tempfile
import time
from pathlib import Path

from threads import SESSION_RULES, session_events
from throughput import rules_subset

from stream.kafka.mends.partitioning import key_hash
from stream.ruleset.loader import load_rules
from stream.settings import Settings
from stream.sources.log import Positions, SourceLog, source_name
from stream.threads.events import ThreadEvent, parse_session, progress
from stream.threads.gaps import inactivity_gaps
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadLimits

TOPIC = "coaching-sessions"
GAP_S = 36_000.0  # as threads.py's t1: nothing closes
REPORT_EVERY = 5_000  # events between two progress reports (~1 s at the target rate)


def fold(sessions: int, turns: int, partitions: int) -> dict[str, float]:
    """Each stage's microseconds per event, in one run."""
    settings = Settings()
    with tempfile.TemporaryDirectory() as tmp:
        ruleset = load_rules(rules_subset(Path(tmp), SESSION_RULES))
    router = ThreadRouter(ruleset, settings.turn_max_bytes)
    table: dict[bytes, bytes] = {}
    processor = ThreadProcessor(
        table,
        gaps=inactivity_gaps(ruleset, GAP_S),
        limits=ThreadLimits(
            max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
        ),
        retention_s=settings.thread_retention_s,
        sessions_topic=TOPIC,
        unheard_wait_s=settings.unheard_source_wait_s,
    )
    events = session_events(sessions, turns, "fold")
    arrival = time.time()  # Kafka time of the messages: later than their event time
    # (key, value, partition), each in the partition its session id places it (as produced)
    messages = [(key, value, key_hash(key) % partitions) for key, value in events]
    processor.rebuild(range(partitions))
    positions = {source_name(TOPIC, n): (0.0, 0.0) for n in range(partitions)}
    sources = SourceLog()
    spent = dict.fromkeys(["parse", "convert", "apply (open)", "apply (fold)", "source log"], 0.0)
    counts = dict.fromkeys(spent, 0)
    clock = time.perf_counter
    for n, (key, value, partition) in enumerate(messages):
        if n % REPORT_EVERY == 0:  # the worker's timer: how far its sources are read (untimed)
            report = ThreadEvent.from_bytes(progress(arrival, Positions(positions)))
            for number in range(partitions):
                processor.apply(number, report)
        begun = clock()
        session = parse_session(value)
        parsed = clock()
        source = source_name(TOPIC, partition)
        event = router.from_session(session, arrival, source, key)
        placed = key_hash(event.placement) % partitions  # SessionIntake.placed
        converted = clock()
        processor.apply(placed, event)
        applied = clock()
        sources.read(source, n, arrival, session.timestamp)
        read = clock()
        stage = "apply (open)" if n < sessions else "apply (fold)"
        spent["parse"] += parsed - begun
        spent["convert"] += converted - parsed
        spent[stage] += applied - converted
        spent["source log"] += read - applied
        counts["parse"] += 1
        counts["convert"] += 1
        counts[stage] += 1
        counts["source log"] += 1
    total = len(messages)
    print(
        f"{sessions} sessions x {turns} turns = {total} events, {partitions} partitions; "
        f"{processor.open_threads()} threads open at the end"
    )
    figures = {stage: seconds * 1e6 / counts[stage] for stage, seconds in spent.items()}
    figures["apply"] = (spent["apply (open)"] + spent["apply (fold)"]) * 1e6 / total
    figures["total"] = sum(spent.values()) * 1e6 / total
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="runs; each stage's least is shown")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile's top N")
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        gc.collect()
        if args.profile:
            profile = cProfile.Profile()
            runs.append(profile.runcall(fold, args.sessions, args.turns, args.partitions))
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
        else:
            runs.append(fold(args.sessions, args.turns, args.partitions))
    what = f"least of {len(runs)} runs" if len(runs) > 1 else "one run"
    print(f"us per event ({what}):")
    for stage in runs[0]:
        print(f"  {stage:<13} {min(run[stage] for run in runs):7.1f}")


if __name__ == "__main__":
    main()
