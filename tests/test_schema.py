"""The published score-event schema matches the model, and real score events validate."""

from __future__ import annotations

import orjson
from fixtures import as_trace, live_trace, scorer

from stream.event_schema import SCHEMA_PATH, score_event_schema


def test_published_schema_is_current() -> None:
    assert orjson.loads(SCHEMA_PATH.read_bytes()) == score_event_schema(), (
        "run `python -m stream.event_schema` to regenerate stream/schemas/score-event.schema.json"
    )


async def test_score_events_carry_every_contract_field() -> None:
    document = live_trace()
    result = await scorer(None).score_trace(as_trace(document), document)
    required = set(orjson.loads(SCHEMA_PATH.read_bytes())["required"])
    for score in result.scores:
        event = orjson.loads(score.to_bytes())
        assert required <= set(event)
        assert {
            "score_id",
            "rule_id",
            "pack",
            "rule_version",
            "scope",
            "target_id",
            "project_name",
            "value",
            "raw_value",
            "scale",
            "label",
            "reason",
            "higher_is_better",
            "status",
            "judge_model",
            "latency_ms",
            "usage",
            "created_at",
        } <= set(event)


def test_score_id_is_the_uuid5_of_rule_version_scope_and_target() -> None:
    import uuid

    from stream.models import SCORE_ID_NAMESPACE, score_id

    for args in [
        ("r", 1, "trace", "t"),
        ("hub_answer_correctness", 3, "thread", "th-1#2"),
        ("x", 10, "trace", "ü"),
    ]:
        name = "\x1f".join(str(a) for a in args)
        assert score_id(*args) == str(uuid.uuid5(SCORE_ID_NAMESPACE, name))
    assert score_id("r", 1, "trace", "t") != score_id("r", 2, "trace", "t")
