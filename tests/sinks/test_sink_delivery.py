"""Posting to the platforms' doubles: credentials, one score a request sent several at once
(Langfuse), retries with the platform's Retry-After, 5xx and no answer sent again, a refused
batch split to the score at fault (Opik), and nothing secret in what is logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fixtures import score_event
from platform_doubles import Answer, LangfuseDouble, OpikDouble

from stream.models import ScoreEvent
from stream.sinks.delivery import Delivery, SinkError, Tally, retry_after
from stream.sinks.langfuse import LangfusePlatform, auth_headers
from stream.sinks.opik import TRACES_PATH, OpikPlatform
from stream.sinks.platform import Item


class Sleeps(list[float]):
    """A fake sleep that records each delay (the waits are asserted, not waited)."""

    async def __call__(self, delay: float) -> None:
        self.append(delay)


@pytest.fixture
def langfuse() -> Iterator[LangfuseDouble]:
    with LangfuseDouble() as double:
        yield double


@pytest.fixture
def opik() -> Iterator[OpikDouble]:
    with OpikDouble() as double:
        yield double


def langfuse_delivery(
    double: LangfuseDouble, sleeps: Sleeps, secret: str = "sk-lf-test", concurrency: int = 1
) -> Delivery:
    return Delivery(
        LangfusePlatform(),
        double.url,
        headers=auth_headers(double.public_key, secret),
        backoff_base_s=0.5,
        backoff_max_s=4.0,
        concurrency=concurrency,
        sleep=sleeps,
    )


def items(platform: Any, scores: list[ScoreEvent]) -> list[Item]:
    return [Item(str(n), s, platform.prepare(s)) for n, s in enumerate(scores)]


async def test_langfuse_every_score_upserted_by_its_id(langfuse: LangfuseDouble) -> None:
    scores = [score_event() for _ in range(20)]
    tally, sleeps = Tally(), Sleeps()
    async with langfuse_delivery(langfuse, sleeps, concurrency=4) as delivery:
        await delivery.deliver(items(delivery.platform, scores), tally)
        await delivery.deliver(items(delivery.platform, scores), tally)  # delivered twice
    assert (tally.sent, tally.rejected, tally.retries, sleeps) == (40, 0, 0, [])
    assert set(langfuse.scores) == {s.score_id for s in scores}  # each once: upserted
    assert len(langfuse.received) == 40
    assert {(r.method, r.path) for r in langfuse.requests} == {("POST", "/api/public/scores")}
    assert 1 < langfuse.most_in_flight <= 4  # several at once, never more than asked


async def test_langfuse_wrong_keys_stop_the_sink_without_the_secret(
    langfuse: LangfuseDouble, caplog: pytest.LogCaptureFixture
) -> None:
    tally = Tally()
    with pytest.raises(SinkError) as raised:
        async with langfuse_delivery(langfuse, Sleeps(), secret="sk-lf-WRONG") as delivery:
            await delivery.deliver(items(delivery.platform, [score_event()]), tally)
    assert "refused the credentials (HTTP 401" in str(raised.value)
    assert "sk-lf-WRONG" not in str(raised.value) + caplog.text
    assert tally.sent == 0 and langfuse.scores == {}


async def test_langfuse_one_score_refused_one_sent_again(
    langfuse: LangfuseDouble, caplog: pytest.LogCaptureFixture
) -> None:
    good, refused, busy = score_event(), score_event(), score_event()
    langfuse.refuse(refused.score_id, (400, "Invalid request data"))
    langfuse.refuse(busy.score_id, (500, "internal error"))  # once: then accepted
    tally, sleeps = Tally(), Sleeps()
    with caplog.at_level(logging.ERROR, "stream.sinks"):
        async with langfuse_delivery(langfuse, sleeps) as delivery:
            await delivery.deliver(items(delivery.platform, [good, refused, busy]), tally)
    assert (tally.sent, tally.rejected, tally.retries) == (2, 1, 1)
    assert set(langfuse.scores) == {good.score_id, busy.score_id}
    assert refused.score_id in caplog.text and "Invalid request data" in caplog.text
    assert sleeps == [0.5]  # the 5xx score waited once, alone
    assert [r.status for r in langfuse.requests] == [200, 400, 500, 200]


async def test_langfuse_wrong_keys_stop_every_poster(langfuse: LangfuseDouble) -> None:
    """With several requests in flight, the first 401 stops the sink (one SinkError, not a
    group of them), and nothing is counted sent."""
    tally = Tally()
    scores = [score_event() for _ in range(12)]
    with pytest.raises(SinkError, match="refused the credentials"):
        async with langfuse_delivery(langfuse, Sleeps(), "sk-lf-WRONG", concurrency=4) as delivery:
            await delivery.deliver(items(delivery.platform, scores), tally)
    assert tally.sent == 0 and langfuse.scores == {}
    assert len(langfuse.requests) <= 4


async def test_langfuse_429_honours_retry_after(langfuse: LangfuseDouble) -> None:
    langfuse.fail_next(Answer(429, {"Retry-After": "7"}, {"message": "rate limited"}))
    tally, sleeps = Tally(), Sleeps()
    async with langfuse_delivery(langfuse, sleeps) as delivery:
        await delivery.deliver(items(delivery.platform, [score_event()]), tally)
    assert sleeps == [7.0] and (tally.sent, tally.retries) == (1, 1)
    assert [r.status for r in langfuse.requests] == [429, 200]


async def test_5xx_and_no_answer_are_tried_again_with_doubling_waits(
    langfuse: LangfuseDouble,
) -> None:
    langfuse.fail_next(Answer(503), Answer(502), Answer(500), Answer(500))
    tally, sleeps = Tally(), Sleeps()
    async with langfuse_delivery(langfuse, sleeps) as delivery:
        await delivery.deliver(items(delivery.platform, [score_event()]), tally)
    assert sleeps == [0.5, 1.0, 2.0, 4.0] and tally.sent == 1  # capped at backoff_max_s

    # nobody listening: connection refused, then the platform comes back
    sleeps.clear()
    keys = auth_headers(langfuse.public_key, langfuse.secret_key)
    down = Delivery(LangfusePlatform(), "http://127.0.0.1:9", headers=keys, sleep=sleeps)

    async def back_after_two(delay: float) -> None:
        sleeps.append(delay)
        if len(sleeps) == 2:
            down.base_url = langfuse.url

    down._sleep = back_after_two
    async with down:
        await down.deliver(items(down.platform, [score_event()]), tally)
    assert sleeps == [0.5, 1.0] and tally.sent == 2


async def test_opik_batch_refused_for_one_item_is_split_to_it(
    opik: OpikDouble, caplog: pytest.LogCaptureFixture
) -> None:
    platform = OpikPlatform()
    scores = [score_event() for _ in range(5)]
    batch = items(platform, scores)
    batch[3].payload[1]["name"] = " "  # what Opik's @NotBlank refuses, the whole batch with it
    tally, sleeps = Tally(), Sleeps()
    with caplog.at_level(logging.ERROR, "stream.sinks"):
        async with Delivery(platform, opik.url, sleep=sleeps) as delivery:
            await delivery.deliver(batch, tally)
    assert (tally.sent, tally.rejected, sleeps) == (4, 1, [])
    assert {trace for trace, _ in opik.trace_scores} == {
        s.target_id for i, s in enumerate(scores) if i != 3
    }
    assert "HTTP 422" in caplog.text and "name must not be blank" in caplog.text
    assert scores[3].score_id in caplog.text
    statuses = [r.status for r in opik.requests]
    assert statuses[0] == 422 and statuses.count(204) >= 2


async def test_opik_cloud_headers_and_wrong_key() -> None:
    with OpikDouble(api_key="opik-key", workspace="team") as double:
        tally = Tally()
        platform = OpikPlatform()
        headers = {"Authorization": "opik-key", "Comet-Workspace": "team"}
        async with Delivery(platform, double.url, headers=headers) as delivery:
            await delivery.deliver(items(platform, [score_event()]), tally)
        assert tally.sent == 1 and len(double.trace_scores) == 1
        wrong = {"Authorization": "nope", "Comet-Workspace": "team"}
        with pytest.raises(SinkError, match="refused the credentials"):
            async with Delivery(platform, double.url, headers=wrong) as delivery:
                await delivery.deliver(items(platform, [score_event()]), tally)


async def test_a_wrong_url_stops_the_sink(opik: OpikDouble) -> None:
    platform = OpikPlatform()
    with pytest.raises(SinkError, match="HTTP 404"):
        async with Delivery(platform, opik.url + "/nowhere") as delivery:
            await delivery.deliver(items(platform, [score_event()]), Tally())
    assert TRACES_PATH.startswith("/v1/private")


def test_retry_after_seconds_or_a_date() -> None:
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"retry-after": "0.5"}) == 0.5
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after({"Retry-After": "soon"}) is None and retry_after({}) is None
    assert retry_after({"Retry-After": "99999"}) == 600.0
