"""The judge's availability: provider-wide trouble holds calls, one probe at a time, and only
an outage longer than the limit fails them."""

from __future__ import annotations

import asyncio

import pytest

from stream.errors import JudgeError
from stream.judge.health import CONSECUTIVE_FAILURES, JudgeHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def health(clock: Clock, outage_max_s: float = 60.0) -> JudgeHealth:
    return JudgeHealth(outage_max_s=outage_max_s, probe_base_s=1.0, probe_max_s=8.0, clock=clock)


def test_consecutive_failures_across_calls_take_the_judge_down_and_429s_do_not() -> None:
    h = health(Clock())
    for _ in range(CONSECUTIVE_FAILURES * 3):
        h.trouble("rate_limited", "429", probe=False)
    assert h.available  # a rate limit is pacing's business
    for _ in range(CONSECUTIVE_FAILURES - 1):
        h.trouble("server_error", "503", probe=False)
    h.answered(probe=False)  # an answer in between resets the run
    for _ in range(CONSECUTIVE_FAILURES - 1):
        h.trouble("connection", "refused", probe=False)
    assert h.available
    h.trouble("timeout", "timed out", probe=False)
    assert not h.available and h.last_trouble == "timed out"


def test_a_call_that_spent_its_budget_takes_the_judge_down() -> None:
    h = health(Clock())
    h.trouble("rate_limited", "429", probe=False, exhausted=True)
    assert not h.available


async def test_calls_wait_while_down_one_probes_and_an_answer_lets_all_go() -> None:
    clock = Clock()
    h = health(clock)
    h.trouble("server_error", "503", probe=False, exhausted=True)
    waiting = [asyncio.create_task(h.admit()) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in waiting)  # before the first probe is due: everyone waits
    clock.now += 1.0
    h._changed.set()  # (a real wait times out when the probe is due; here the clock jumps)
    await asyncio.sleep(0.05)
    probes = [t for t in waiting if t.done()]
    assert len(probes) == 1 and probes[0].result() is True  # one probe, the rest still held
    clock.now += 5.0
    h.answered(probe=True)
    results = await asyncio.gather(*waiting)
    assert h.available and sorted(results) == [False, False, True]
    assert h.unavailable_seconds() == pytest.approx(6.0)


async def test_a_failed_probe_waits_longer_up_to_a_fifth_of_the_outage_and_the_cap() -> None:
    """A judge down for seconds is probed every second (an overload burst is found over soon
    after it ends); one down for minutes, every 8 s (the cap), never more often than needed."""
    clock = Clock()
    h = health(clock)
    h.trouble("connection", "refused", probe=False, exhausted=True)
    down_since = clock.now
    delays = []
    for _ in range(30):
        clock.now = h._next_probe
        assert await h.admit() is True
        h.trouble("connection", "refused", probe=True)
        delays.append(round(h._next_probe - clock.now, 3))
        assert delays[-1] <= max(1.0, 0.2 * (clock.now - down_since)) + 0.001
    assert delays[:3] == [1.0, 1.0, 1.0]
    assert delays == sorted(delays) and delays[-1] == 8.0
    assert not h.available


async def test_past_the_outage_limit_waiting_calls_fail_and_probing_goes_on() -> None:
    clock = Clock()
    h = health(clock, outage_max_s=10.0)
    h.trouble("server_error", "503 overloaded", probe=False, exhausted=True)
    clock.now += 1.0
    assert await h.admit() is True  # the probe
    clock.now += 10.0
    with pytest.raises(JudgeError) as info:
        await h.admit()  # a probe is in flight: this call cannot wait any longer
    assert info.value.kind == "unavailable" and "503 overloaded" in str(info.value)
    h.trouble("server_error", "503 overloaded", probe=True)
    clock.now = h._next_probe
    assert await h.admit() is True  # still probing, so scoring resumes by itself
    h.answered(probe=True)
    assert h.available and await h.admit() is False


def test_answered_since_tells_a_request_problem_from_an_outage() -> None:
    clock = Clock()
    h = health(clock)
    streak = clock.now
    assert not h.answered_since(streak)
    clock.now += 1
    h.answered(probe=False)
    assert h.answered_since(streak) and not h.answered_since(clock.now + 1)
