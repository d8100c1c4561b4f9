"""bench/position_bias.py kept from rotting: a few short runs through the real engine, over
HTTP and in process (slow: about 5 s)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import position_bias


def tallies(judge: str, s: float) -> dict[str, position_bias.Tally]:
    args = argparse.Namespace(runs=2, pairs=30, p=0.7, s=s, audit=0.1, judge=judge, seed="t")
    return asyncio.run(position_bias.measure(args))


@pytest.mark.slow
def test_both_paths_publish_the_same_rates_and_the_audit_counts_every_flip() -> None:
    http, local = tallies("http", 0.3), tallies("in-process", 0.3)
    for order in position_bias.ORDERS:
        assert [r.value for r in http[order].rates] == [r.value for r in local[order].rates]
        assert (http[order].flipped, http[order].audited) == (
            local[order].flipped,
            local[order].audited,
        )
        assert (http[order].mismatches, http[order].errors) == (0, 0)
    assert local["both"].audited == 60 and local["both"].calls == 120


@pytest.mark.slow
def test_a_judge_that_always_takes_the_first_slot() -> None:
    found = tallies("in-process", 1.0)
    assert [r.value for r in found["fixed"].rates] == [0.0, 0.0]  # A wins every pair
    assert [r.count for r in found["both"].rates] == [0, 0]  # every pair flipped: no rate
    assert found["both"].flipped == found["both"].audited == 60
