"""The published score-event schema matches the model, and real score events validate."""

from __future__ import annotations

import orjson
from fixtures import as_trace, live_trace, scorer
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.event_schema import (
    LABEL_SCHEMA_PATH,
    SCHEMA_PATH,
    human_label_schema,
    score_event_schema,
)


def test_published_schema_is_current() -> None:
    assert orjson.loads(SCHEMA_PATH.read_bytes()) == score_event_schema(), (
        "run `python -m stream.event_schema` to regenerate stream/schemas/score-event.schema.json"
    )


def test_published_label_schema_is_current() -> None:
    assert orjson.loads(LABEL_SCHEMA_PATH.read_bytes()) == human_label_schema(), (
        "run `python -m stream.event_schema` to regenerate stream/schemas/human-label.schema.json"
    )


def test_the_label_schema_takes_what_the_model_takes() -> None:
    import jsonschema

    from stream.agreement.labels import HumanLabel

    schema = orjson.loads(LABEL_SCHEMA_PATH.read_bytes())
    base = {
        "rule_id": "safety",
        "value": "yes",
        "annotator": "ana",
        "labelled_at": "2026-11-01T10:00:00Z",
    }
    for target in ("target_id", "trace_id", "thread_id"):
        record = {**base, target: "t-1", "criterion": None, "value": 3}
        jsonschema.validate(record, schema)
        assert HumanLabel.model_validate(record).target_id == "t-1"
    for bad in (
        base,  # no target
        {**base, "trace_id": "t-1", "thread_id": "t-1"},  # two
        {**base, "trace_id": "t-1", "score": 1},  # unknown field
        {**base, "trace_id": "t-1", "value": [1]},
    ):
        try:
            jsonschema.validate(bad, schema)
        except jsonschema.ValidationError:
            pass
        else:
            raise AssertionError(f"the schema took {bad}")


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


@settings(max_examples=500, deadline=None)
@given(
    st.text(),
    st.integers(0, 10**6),
    st.sampled_from(["trace", "thread", "pair", "tool_call"]),
    st.text(),
)
def test_any_score_id_is_the_uuid5_of_its_parts(
    rule: str, version: int, scope: str, target: str
) -> None:
    import uuid

    from stream.models import SCORE_ID_NAMESPACE, score_id

    name = f"{rule}\x1f{version}\x1f{scope}\x1f{target}"
    assert score_id(rule, version, scope, target) == str(uuid.uuid5(SCORE_ID_NAMESPACE, name))
