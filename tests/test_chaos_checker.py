"""The chaos run's close checker (``bench/chaos.py``): which closes of a produced thread are
right. A pause longer than the inactivity gap inside a round allows a close there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from chaos import GAP_S, ProducedThread


def thread(*turn_times: list[float]) -> ProducedThread:
    """A conversation produced in rounds, each a list of its turns' event times."""
    produced = ProducedThread("conversation", "conv-1")
    for number, times in enumerate(turn_times):
        produced.rounds.append([])
        for n, at in enumerate(times):
            produced.add_turn(f"r{number}t{n}", at)
    return produced


def test_rounds_without_a_long_pause_close_only_at_their_ends() -> None:
    produced = thread([0, 2, 4], [60, 61])
    assert produced.pauses == set()
    assert produced.closes_as_expected([(1, 3), (2, 5)])
    assert not produced.closes_as_expected([(1, 2), (2, 3), (3, 5)])  # closed mid-round
    assert not produced.closes_as_expected([(1, 3)])  # the second round never closed
    assert not produced.closes_as_expected([(1, 3), (3, 5)])  # a close number skipped


def test_a_pause_longer_than_the_gap_may_close_the_thread_there() -> None:
    produced = thread([0, GAP_S + 11, GAP_S + 12, GAP_S + 13, GAP_S + 14])
    assert produced.pauses == {1}
    assert produced.closes_as_expected([(1, 1), (2, 5)])  # closed in the pause
    assert produced.closes_as_expected([(1, 5)])  # or the next turn came first
    assert not produced.closes_as_expected([(1, 2), (2, 5)])  # not after the pause
    assert not produced.closes_as_expected([(1, 1)])  # a turn lost


def test_a_pause_just_under_the_gap_allows_no_close() -> None:
    produced = thread([0, GAP_S - 0.5])
    assert produced.pauses == set()
    assert not produced.closes_as_expected([(1, 1), (2, 2)])
