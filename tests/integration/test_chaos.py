"""A short chaos run (``bench/chaos.py``, issue 23): three workers in one group while traces,
coaching sessions and spans stream in, a random kill -9, SIGTERM, start or SIGSTOP longer
than the session timeout every few seconds; then, from the topics alone, every trace has its
decisions and scores, every session turn is in its close, every score id has one value, the
group committed every source and internal topic to its end, and no engine error was
dead-lettered. Marked ``chaos`` (a few minutes): ``-m "not chaos"`` skips it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stream.kafka.broker import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from chaos import FAULTS, ChaosConfig, run_chaos


@pytest.mark.chaos
@pytest.mark.timeout(900)
async def test_a_short_chaos_run_breaks_no_invariant(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = ChaosConfig(cycles=8, seed=23, interval=(3.0, 6.0), drain_timeout_s=300.0)
    report = await run_chaos(config, broker.bootstrap, tmp_path)
    table = report.table()
    assert report.cycles == 8 and sum(report.faults[f] for f in FAULTS) == 8, table
    assert report.generations >= 2, table  # the group did rebalance
    assert report.drained, table
    # the traffic reached every kind of output the invariants are about
    assert report.threads["session closes"] and report.threads["conversation closes"], table
    assert report.produced["otlp traces"] and report.score_ids, table
    assert not report.violations, table
