"""Issue 48: the judge-pace topic on the embedded broker. Two workers' ``PaceTopic`` services
(as ``stream/worker.py`` starts one a worker) each read the other's records and pace at their
share; one that stops says so with a tombstone, and the other takes its share up at once; a
worker that cannot reach the topic paces alone and says so once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from scripted_judge import MockJudge

from stream.judge.fleet import Fleet, PaceBoard, account_of
from stream.judge.limiter import AdaptiveLimiter
from stream.kafka.broker import EmbeddedBroker
from stream.kafka.pace_topic import PaceTopic
from stream.metrics import sample_value
from stream.observer import Observer

from .harness import NO_VERDICT_CACHE, Names, Worker, produce, read_scores, trace_bytes
from .test_worker import LIVE_PROMPT, SECRET, live_with_id, start

MODEL = "gpt-4o-mini"
RULE = "studio_live_coach_feedback_quality"
JUDGE_MODEL = "gpt-4o-mini"  # the rule's judge model (rules/fretcoach)


def worker(name: str, topic: str, bootstrap: str) -> tuple[PaceTopic, AdaptiveLimiter]:
    board = PaceBoard(name)
    fleet = Fleet(board, account_of("http://judge/v1", "sk-test"))
    limiter = AdaptiveLimiter(32)
    fleet.join(MODEL, limiter, Observer().watch_judge_fleet)
    limiter.requests.announce(600)  # the provider's headers said so
    limiter.waiting = 40  # a backlog as large as the other's
    return PaceTopic([fleet], board, topic, bootstrap), limiter


async def until(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_two_workers_share_an_account_and_a_stopped_one_gives_its_share_back(
    broker: EmbeddedBroker, names: Names
) -> None:
    topic = f"judge-pace-{names.suffix}"
    first, first_limiter = worker("w1", topic, broker.bootstrap)
    second, second_limiter = worker("w2", topic, broker.bootstrap)
    await first.start()
    await second.start()
    try:
        await until(lambda: first_limiter.fleet and first_limiter.fleet.share < 0.6)
        await until(lambda: second_limiter.fleet and second_limiter.fleet.share < 0.6)
        assert first_limiter.requests.rate == pytest.approx(10 * 0.985 * 0.5, rel=0.1)
        assert first.board.reading and second.board.reading
    finally:
        await second.stop()
    stopped = time.monotonic()
    await until(lambda: first_limiter.fleet and first_limiter.fleet.share == 1.0)
    # the tombstone, not the record going stale (STALE_S), gave it back
    assert time.monotonic() - stopped < 3.0
    assert first_limiter.requests.rate == pytest.approx(10 * 0.985)
    await first.stop()


async def test_a_worker_that_cannot_read_the_topic_paces_alone_and_says_so_once(
    caplog: pytest.LogCaptureFixture, names: Names
) -> None:
    service, limiter = worker("w1", f"judge-pace-{names.suffix}", "127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="stream.kafka.pace_topic"):
        await service.start()
        await asyncio.sleep(3.0)
        await service.stop()
    said = [r for r in caplog.records if "paces the judge alone" in r.getMessage()]
    assert len(said) == 1
    assert not service.board.reading
    assert limiter.fleet is not None and limiter.fleet.share == 1.0
    assert limiter.requests.rate == pytest.approx(10 * 0.985)


async def test_two_scorer_workers_see_each_other_on_the_judge_pace_topic(
    broker: EmbeddedBroker, names: Names, judge: MockJudge, workers: list[Worker], tmp_path: Path
) -> None:
    """Two ``scorer worker`` processes of one group, one judge account: once each has judged,
    each one's /metrics counts two workers sharing the account, at a share under 1; one
    stopped cleanly, the other is alone again within seconds."""
    judge.script(LIVE_PROMPT, '{"score": 4, "reason": "Specific and kind."}')
    first = start(workers, broker, names, tmp_path, judge, **NO_VERDICT_CACHE)
    second = start(workers, broker, names, tmp_path, judge, **NO_VERDICT_CACHE)
    traces = [live_with_id(f"t-pace-{n}", f"Relax your wrist on bar {n}.") for n in range(40)]
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces])
    await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda s: len([x for x in s if x["rule_id"] == RULE]) >= len(traces),
        timeout=120,
    )

    def fleet(worker: Worker, name: str) -> float | None:
        return sample_value(worker.scrape(), name, model=JUDGE_MODEL)

    async def until_seen(check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.5)

    def both_judged() -> bool:
        return all(fleet(w, "scorer_judge_fleet_workers") for w in (first, second))

    await until_seen(both_judged, timeout=60.0)  # a worker joins its fleet at its first call
    await produce(broker.bootstrap, names.traces, [trace_bytes(d) for d in traces[:4]])
    for worker in (first, second):
        await until_seen(lambda w=worker: fleet(w, "scorer_judge_fleet_workers") == 2)
        assert fleet(worker, "scorer_judge_fleet_shared") == 1
    page = first.scrape()
    assert SECRET not in page
    second.stop()
    stopped = time.monotonic()
    await until_seen(lambda: fleet(first, "scorer_judge_fleet_workers") == 1)
    assert time.monotonic() - stopped < 15.0
