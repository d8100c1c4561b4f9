"""Restarts as a user waits for them (issue 52, item 1). Prints figures; asserts nothing.

A worker with the default settings (nothing but the topics, the rules and its data directory
set: the session timeout, the store and the rest are the defaults) folds ``--sessions`` open
coaching sessions of ``--turns`` turns each on the embedded broker. Then, per ``--modes``:

- ``graceful``: SIGTERM, and the next worker is started once the first has exited;
- ``kill``: SIGKILL, and the next worker is started at once (a crash, a node lost; the
  group already exists and still counts the dead member until its session times out).

The next worker (the same app id, so the same group; the same data directory) is timed from
its process start (``Popen``) to the score of a probe session produced just after the start
and ended at once: the first new score a user would wait for. Its log (level info) splits the
wait into its parts, by the wall-clock stamps of the lines that end them:

- ``start``: Python start-up, imports, rule loading, the app's services, up to the consumer's
  first JoinGroup ("(Re-)joining group");
- ``join``: until the group answers it ("Joined group"), and the assignment is synced;
- ``recovery``: the tables' changelogs read to their ends ("Recovery complete");
- ``index``: the thread index rebuilt from the table ("thread index rebuilt");
- ``first score``: the probe's events read, folded, its close judged and published.

``--instance-id``: the workers run with ``SCORER_INSTANCE_ID`` (static membership, KIP-345),
the same id before and after the restart, as a StatefulSet's pod names are. ``--broker-kind``:
``tansu`` (the embedded broker's transport, as the bench's other phases) or ``kafka`` (the
transport a real cluster gets: the worker is not told the broker is Tansu).

    python bench/restart.py [--sessions 100000] [--turns 2] [--modes graceful,kill]
        [--instance-id scorer-0] [--broker-kind tansu|kafka] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import tempfile
import time
from datetime import datetime
from pathlib import Path

from process_io import produce as produce_records
from threads import folded_sessions_worker, probe_events, probe_scored
from throughput import stop

from stream.kafka.broker import EmbeddedBroker

# the log lines that end each part, in order (aiokafka's and Faust's, and the worker's own)
MARKS = (
    ("start", re.compile(r"\(Re-\)joining group")),
    ("join", re.compile(r"Successfully synced group|Joined group")),
    ("recovery", re.compile(r"Recovery complete")),
    ("index", re.compile(r"thread index rebuilt")),
)
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
TARGETS = {"graceful": 10.0, "kill": 15.0}  # issue 52: seconds to the first new score


def stamps(log: Path, since: float) -> dict[str, float]:
    """Each part's end in seconds since ``since`` (a wall-clock time), from the worker's log:
    the last "joined"/"synced" line before recovery completes (a second join counts), the
    first of the others after ``since``."""
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        stamp = STAMP.match(line)
        if stamp is None:
            continue
        at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - since
        if at < 0:
            continue
        for part, mark in MARKS:
            if not mark.search(line):
                continue
            if part == "join" and "recovery" not in found:
                found[part] = at  # the last join before recovery: a rejoin is join time
            elif part not in found:
                found[part] = at
    return found


def split(found: dict[str, float], scored: float | None) -> str:
    """The parts as durations, in order, and what is missing."""
    out, before = [], 0.0
    for part, _ in MARKS:
        if part in found:
            out.append(f"{part} {found[part] - before:.1f}")
            before = found[part]
        else:
            out.append(f"{part} ?")
    out.append(f"first score {scored - before:.1f}" if scored is not None else "first score ?")
    return ", ".join(out)


def run(args: argparse.Namespace, bootstrap: str, tmp: Path) -> None:
    env = {
        "SCORER_BROKER_KIND": args.broker_kind,
        "SCORER_SESSION_TIMEOUT_S": "",  # unset: the default
        **({"SCORER_INSTANCE_ID": args.instance_id} if args.instance_id else {}),
    }
    p, topic, rules, env, proc, _ = folded_sessions_worker(
        bootstrap, tmp, args.sessions, args.turns, ready_s=120, **env
    )
    print(
        f"{args.sessions} open sessions folded ({args.sessions * args.turns} events); transport "
        f"{args.broker_kind}, instance id {args.instance_id or '-'}",
        flush=True,
    )
    for round_ in range(args.repeat):
        for mode in args.modes.split(","):
            stopping = time.monotonic()
            if mode == "kill":
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            else:
                stop(proc)
            stopped = time.monotonic() - stopping
            probe = f"probe-{p.suffix}-{mode}-{round_}"
            log = tmp / f"worker-{p.suffix}-{mode}-{round_}.log"
            since = time.time()
            started = time.monotonic()
            proc, _ = p.worker(rules, log=log, loglevel="info", **env)
            asyncio.run(produce_records(bootstrap, topic, probe_events(probe, args.turns)))
            scored = asyncio.run(probe_scored(bootstrap, p.dst, probe))
            took = scored - started if scored is not None else None
            found = stamps(log, since)
            said = f"{took:.1f} s" if took is not None else "no score in 600 s"
            print(
                f"{mode:8} (stopped in {stopped:.1f} s): first new score {said} from the "
                f"process start [target < {TARGETS[mode]:.0f} s]; {split(found, took)}",
                flush=True,
            )
    stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--modes", default="graceful,kill")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--broker-kind", choices=("tansu", "kafka"), default="tansu")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-restart-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    print(f"embedded broker {broker.bootstrap}; logs in {tmp}", flush=True)
    try:
        run(args, broker.bootstrap, tmp)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
