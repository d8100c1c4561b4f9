"""``scorer sink langfuse`` / ``opik`` against the embedded broker and the platforms' doubles:
every ok score on the topic posted once per delivery with its score id, offsets committed
after the platform took them, and a crash before the commit posting the same ids again, which
the platforms upsert (each score stored once)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from fixtures import score_event
from platform_doubles import LangfuseDouble, OpikDouble

from stream.kafka.broker import EmbeddedBroker
from stream.models import ScoreEvent, ThreadInfo
from stream.sinks import ScoreSink, langfuse_sink, opik_sink
from stream.sinks.settings import LangfuseSinkSettings, OpikSinkSettings

from .harness import Names, produce

THREAD = ThreadInfo(
    kind="conversation", close_seq=1, close_reason="end", turn_count=2, dropped_turns=0
)


def topic_scores() -> tuple[list[ScoreEvent], list[ScoreEvent]]:
    """Scores as a worker publishes them: ok trace and thread scores (posted), a skipped and
    an error score and a pair's (not posted)."""
    posted = [score_event() for _ in range(12)]
    posted += [score_event(scope="thread", target_id=f"conv-{i}", thread=THREAD) for i in range(3)]
    posted.append(score_event(label="Excellent"))
    unposted = [
        score_event(status="skipped", value=None, raw_value=None, status_reason="missing path"),
        score_event(status="error", value=None, raw_value=None, status_reason="judge refused"),
        score_event(scope="pair", target_id="cmp-1", raw_value=1.0, scale={"min": -2, "max": 2}),
    ]
    return posted, unposted


async def publish(bootstrap: str, topic: str, scores: list[ScoreEvent]) -> None:
    await produce(bootstrap, topic, [(s.target_id.encode(), s.to_bytes()) for s in scores])
    await produce(bootstrap, topic, [(None, b"not a score event")])


async def committed_total(bootstrap: str, group: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        offsets = [await consumer.committed(TopicPartition(topic, p)) for p in parts]
        return sum(o or 0 for o in offsets)
    finally:
        await consumer.stop()


class CrashBeforeCommitError(Exception):
    pass


async def crash_then_resume(
    build: Any,
    posted: Any,
    monkeypatch: pytest.MonkeyPatch,
    total: int,
    bootstrap: str,
    names: Names,
    group: str,
) -> tuple[Any, Any, Counter[str]]:
    """A sink that dies after posting, before committing; then one that resumes the group."""

    async def crash(self: ScoreSink, consumer: Any, offsets: Any) -> None:
        raise CrashBeforeCommitError

    with monkeypatch.context() as patched:
        patched.setattr(ScoreSink, "commit", crash)
        with pytest.raises(CrashBeforeCommitError):
            await build().run(idle_s=3)
    before_crash = Counter(posted())
    assert before_crash and await committed_total(bootstrap, group, names.scores) == 0
    first = build()
    tally = await first.run(idle_s=3)
    assert await committed_total(bootstrap, group, names.scores) == total
    again = await build().run(idle_s=2)  # nothing left: the offsets were committed
    return tally, again, before_crash


@pytest.mark.slow  # a sink's crash and restart end to end, ~33 s (make test-slow)
async def test_langfuse_sink_posts_each_score_once_and_again_after_a_crash(
    broker: EmbeddedBroker, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    posted, unposted = topic_scores()
    await publish(broker.bootstrap, names.scores, [*posted, *unposted])
    group = f"{names.group}-sink-langfuse"
    with LangfuseDouble() as double:
        settings = LangfuseSinkSettings(
            LANGFUSE_HOST=double.url,
            LANGFUSE_PUBLIC_KEY=double.public_key,
            LANGFUSE_SECRET_KEY=double.secret_key,
            group=group,
            batch_size=5,
            batch_wait_s=0.2,
        )

        def build() -> ScoreSink:
            where = {"bootstrap": broker.bootstrap, "topic": names.scores, "app_id": names.group}
            return langfuse_sink(settings, **where, security=None)

        tally, again, before_crash = await crash_then_resume(
            build,
            lambda: [body["id"] for body in double.received],
            monkeypatch, len(posted) + len(unposted) + 1, broker.bootstrap, names, group,
        )  # fmt: skip
        ids = {s.score_id for s in posted}
        assert set(double.scores) == ids  # stored once each: upserted on the score id
        per_id = Counter(body["id"] for body in double.received)
        assert set(per_id) == ids
        # what was posted before the crash was posted again, with the same ids; the rest once
        assert per_id == Counter(ids) + before_crash
        assert (tally.sent, tally.rejected, tally.invalid) == (len(posted), 0, 1)
        assert tally.unsent == Counter({"status": 2, "target": 1})
        assert again.sent == 0
        thread = next(s for s in posted if s.scope == "thread")
        assert double.scores[thread.score_id]["sessionId"] == thread.target_id
        labelled = next(s for s in posted if s.label == "Excellent")
        assert double.scores[labelled.score_id]["dataType"] == "CATEGORICAL"


@pytest.mark.slow  # a sink's crash and restart end to end, ~33 s (make test-slow)
async def test_opik_sink_posts_trace_and_thread_scores_and_again_after_a_crash(
    broker: EmbeddedBroker, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    posted, unposted = topic_scores()
    unposted.append(score_event(target_id="not-an-opik-trace"))
    await publish(broker.bootstrap, names.scores, [*posted, *unposted])
    group = f"{names.group}-sink-opik"
    with OpikDouble(api_key="opik-key", workspace="team") as double:
        settings = OpikSinkSettings(
            OPIK_URL_OVERRIDE=double.url,
            OPIK_API_KEY="opik-key",
            OPIK_WORKSPACE="team",
            group=group,
            batch_size=5,
            batch_wait_s=0.2,
        )

        def build() -> ScoreSink:
            where = {"bootstrap": broker.bootstrap, "topic": names.scores, "app_id": names.group}
            return opik_sink(settings, **where, security=None)

        tally, again, before_crash = await crash_then_resume(
            build,
            lambda: [i.get("id") or i["thread_id"] for i in double.items],
            monkeypatch, len(posted) + len(unposted) + 1, broker.bootstrap, names, group,
        )  # fmt: skip
        traces = {(s.target_id, s.rule_id) for s in posted if s.scope == "trace"}
        threads = {("shop", s.target_id, s.rule_id) for s in posted if s.scope == "thread"}
        assert set(double.trace_scores) == traces and set(double.thread_scores) == threads
        sent = Counter(i.get("id") or i["thread_id"] for i in double.items)
        assert sent == Counter(s.target_id for s in posted) + before_crash
        assert (tally.sent, tally.rejected, tally.invalid) == (len(posted), 0, 1)
        assert tally.unsent == Counter({"status": 2, "target": 2})
        assert again.sent == 0
