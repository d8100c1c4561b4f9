"""Trace messages: what parses as a trace and what does not."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from fixtures import RULES_DIR
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError
from strategies import (
    any_json,
    corrupted,
    decoded_or_refused,
    documents,
    integers,
    json_bytes,
    json_values,
    mutated,
    nested,
    numbers,
    texts,
)

from stream.engine.scorer import Scorer
from stream.models import parse_trace
from stream.ruleset.loader import load_rules
from stream.sources.log import SourceLog


def test_non_object_json_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        parse_trace(orjson.dumps([1, 2]))


SHAPES = Path(__file__).parent / "data" / "shapes"


def shape(name: str) -> bytes:
    return (SHAPES / f"{name}.json").read_bytes()


def test_an_opik_export_with_nulls_is_a_trace() -> None:
    trace, document = parse_trace(shape("opik_trace_export"))
    assert (trace.id, trace.project_name, trace.name) == (
        "0193e2a4-6c1f-7b3e-9a1d-2f4c5b6a7d81",
        "fretcoach",
        "hub-coach-chat",
    )
    assert trace.metadata == {} and trace.tags == [] and trace.thread_id is None
    assert trace.start_time is not None and trace.start_time.tzinfo is not None
    # what the model does not name is kept, for rules to read
    assert document["llm_span_count"] == 1 and document["feedback_scores"] is None


def test_a_langchain_run_is_a_trace_with_its_own_fields_kept() -> None:
    trace, document = parse_trace(shape("langchain_run"))
    assert trace.project_name == "default"  # null: absent
    assert trace.name == "RunnableSequence"
    assert trace.tags == ["prod", "3"]  # a null tag is dropped, a number read as text
    assert document["inputs"]["question"].startswith("What tempo")
    assert document["extra"]["metadata"]["ls_run_depth"] == 0


def test_an_openai_tool_call_conversation_is_a_trace() -> None:
    trace, document = parse_trace(shape("openai_tool_calls"))
    assert trace.thread_id == "conv-42" and trace.tags == []
    assert trace.usage == {"prompt_tokens": 212, "completion_tokens": 31, "total_tokens": 243}
    assert document["output"]["messages"][1]["content"] is None


def test_an_openai_agents_trace_is_a_trace_with_its_spans_kept() -> None:
    trace, document = parse_trace(shape("openai_agents_trace"))
    assert trace.id == "trace_6a0b2c4d8e1f3a5b7c9d0e2f4a6b8c0d"
    assert trace.name is None and trace.metadata == {}
    assert [s["span_data"]["type"] for s in document["spans"]] == ["agent", "generation"]


@pytest.mark.parametrize(
    "fields",
    [
        {"metadata": "not an object"},
        {"tags": "one-tag"},
        {"tags": {"a": 1}},
        {"start_time": "yesterday-ish"},
        {"end_time": 12.5e30},
        {"usage": [1, 2]},
        {"name": {"nested": True}},
        {"project_name": ""},
    ],
)
def test_an_optional_field_of_the_wrong_shape_is_absent_not_invalid(fields: dict) -> None:
    trace, document = parse_trace(orjson.dumps({"id": "t-1", **fields}))
    assert trace.id == "t-1"
    ((key, value),) = fields.items()
    assert document[key] == value  # the document keeps it as sent


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({}, "id\n  Field required"),
        ({"id": None}, "id\n  Input should be a valid string"),
        ({"id": ""}, "id\n  String should have at least 1 character"),
        ({"id": "   "}, "id\n  String should have at least 1 character"),
        ({"id": 7}, "id\n  Input should be a valid string"),
        ({"id": {"uuid": "x"}}, "id\n  Input should be a valid string"),
    ],
)
def test_only_a_missing_or_invalid_id_makes_a_trace_invalid(document: dict, problem: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_trace(orjson.dumps({**document, "metadata": None, "tags": "x"}))
    assert problem in str(info.value)
    assert info.value.error_count() == 1  # nothing else is reported


def test_a_trace_without_an_id_is_refused_as_it_was_sent() -> None:
    # the fields taken leniently are not shown as they were taken: the error names the
    # message as it came (the dead letter's reason)
    document = {"name": 5, "metadata": None, "tags": "x", "start_time": "soon", "usage": [1]}
    with pytest.raises(ValidationError) as info:
        parse_trace(orjson.dumps(document))
    assert info.value.error_count() == 1
    ((error,),) = [info.value.errors()]
    assert error["loc"] == ("id",) and error["type"] == "missing"
    assert error["input"] == document


def test_every_shape_is_decided_by_every_rule_without_an_error() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    scorer = Scorer(ruleset, None, default_model="gpt-4o-mini")
    for path in sorted(SHAPES.glob("*.json")):
        trace, document = parse_trace(path.read_bytes())
        result = asyncio.run(scorer.score_trace(trace, document))
        trace_rules = [r for r in ruleset.rules if r.scope == "trace"]
        assert len(result.decisions) == len(trace_rules), path.name
        assert all(d.outcome != "error" for d in result.decisions), path.name


# -- any bytes: a trace, or a ValueError (a dead letter), never another exception -----------

MOMENTS = st.one_of(
    st.datetimes(timezones=st.none() | st.just(UTC)).map(datetime.isoformat),
    st.sampled_from(["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "2026-02-30"]),
    numbers,
)
TRACES = documents(
    {
        "id": st.one_of(texts, st.just("   ")),
        "project_name": texts,
        "name": texts,
        "thread_id": texts,
        "start_time": MOMENTS,
        "end_time": MOMENTS,
        "input": json_values,
        "output": json_values,
        "metadata": st.dictionaries(texts, json_values, max_size=3),
        "tags": st.lists(texts, max_size=3),
        "usage": st.dictionaries(
            st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens"]), integers
        ),
    },
    required=("id",),
    # pydantic's own names too: an unknown field is kept as an extra attribute
    extra=st.one_of(texts, st.sampled_from(["model_config", "__dict__", "model_fields"])),
)


@given(
    st.one_of(
        st.binary(),
        json_bytes(TRACES),
        json_bytes(corrupted(TRACES)),
        json_bytes(any_json),
        mutated(st.sampled_from([shape("opik_trace_export"), orjson.dumps({"id": "t"})])),
        nested(st.integers(1, 1100), "[", "1", "]", around='{"id": "t", "input": @}'),
    )
)
@example(b"null")
@example(b'{"id": "t", "start_time": "0001-01-01T00:00:00+23:59"}')
def test_any_trace_message_is_a_trace_or_a_value_error(raw: bytes) -> None:
    parsed = decoded_or_refused(parse_trace, raw)
    if not isinstance(parsed, ValueError):
        trace, _ = parsed
        # what the trace agent does with it next, outside its engine's error handling
        SourceLog().read("llm-traces:0", 0, 0.0, trace.start_time or trace.end_time)
