"""The deterministic checks of a tool call: every verdict right on a labelled set of 200 calls
(``call_corpus``), the edges one by one, and properties (key order and spacing never make two
calls different; a turn's verdict depends on its count alone; no reason repeats a value)."""

from __future__ import annotations

import json
import random
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from call_corpus import (
    _INVALID,
    CHECKS,
    DECLARED,
    LOOKUP,
    MARK,
    ORDERS,
    REFUND,
    WEATHER,
    labelled_calls,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.tools.calls import tool_calls
from stream.tools.checks import (
    CallVerdict,
    arguments_valid,
    call_succeeded,
    calls_per_turn,
    not_repeated,
    tool_declared,
)
from stream.tools.model import ToolCall, ToolDefinition

CORPUS = labelled_calls()


def verdicts(call: ToolCall, calls: list[ToolCall]) -> dict[str, CallVerdict]:
    return {
        "arguments_valid": arguments_valid(call),
        "call_succeeded": call_succeeded(call),
        "not_repeated": not_repeated(call, calls),
        "calls_per_turn": calls_per_turn(call, calls),
        "tool_declared": tool_declared(call),
    }


def make(arguments: str, name: str = "get_weather", **fields: Any) -> ToolCall:
    fields.setdefault("declared", (WEATHER, ORDERS, LOOKUP))
    return ToolCall(trace_id="t1", call_id=f"c{fields.get('position', 0)}", name=name,
                    arguments=arguments, **fields)  # fmt: skip


def copies(texts: list[str], name: str = "get_weather") -> list[ToolCall]:
    return [make(t, name, position=i) for i, t in enumerate(texts)]


# --- the labelled set -----------------------------------------------------------------------


def test_the_labelled_set_holds_every_kind_of_call_and_is_the_same_on_every_run() -> None:
    assert len(CORPUS) == 200
    assert labelled_calls() == CORPUS
    kinds = Counter(c.kind for c in CORPUS)
    assert set(kinds) == {"valid", "schema-invalid", "failed", "looping", "undeclared"}
    assert min(kinds.values()) >= 10, kinds
    for check in CHECKS:
        assert {"pass", "fail"} <= {c.labels[check] for c in CORPUS}, check
    assert {c.labels["arguments_valid"] for c in CORPUS} >= {"skipped"}
    assert {c.labels["tool_declared"] for c in CORPUS} >= {"skipped"}
    reasons = {c.reasons["arguments_valid"] for c in CORPUS if c.kind == "schema-invalid"}
    assert {fragment for _, _, fragment in _INVALID} <= reasons


def test_every_verdict_on_the_labelled_set_is_right() -> None:
    by_trace: dict[str, list[ToolCall]] = {}
    for labelled in CORPUS:
        by_trace.setdefault(labelled.call.trace_id, []).append(labelled.call)
    wrong = []
    for labelled in CORPUS:
        found = verdicts(labelled.call, by_trace[labelled.call.trace_id])
        for check in CHECKS:
            verdict, fragment = found[check], labelled.reasons.get(check, "")
            if verdict.label != labelled.labels[check] or fragment not in verdict.reason:
                wrong.append((check, labelled.kind, labelled.call.arguments, verdict))
            assert verdict.value == {"pass": 1.0, "fail": 0.0, "skipped": None}[verdict.label]
            assert verdict.skipped == (verdict.label == "skipped")
    assert not wrong, wrong[:5]


def test_no_reason_repeats_an_argument_value_or_an_error() -> None:
    calls = [c.call for c in CORPUS]
    for call in calls:
        for verdict in verdicts(call, calls).values():
            assert MARK not in verdict.reason and "jane.doe" not in verdict.reason


# --- arguments_valid ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "name", "label", "reason"),
    [
        ("", "lookup_user", "pass", "no schema checked: lookup_user was declared without a schema"),
        ("  ", "get_weather", "fail", "$: missing required property 'city'"),
        (
            '{"city": "x"}',
            "get_weather",
            "pass",
            "arguments of get_weather fit its declared schema",
        ),
        ('{"q": 1}', "find", "pass", "no schema checked: find was not declared"),
        ("[1, 2]", "find", "fail", "are a JSON array, not an object"),
        ('{"a": Infinity}', "find", "fail", "not JSON (Infinity is not JSON)"),
        ("[" * 100_000, "find", "fail", "are not JSON (nested too deeply)"),
        ('{"city": ""}', "get_weather", "fail", "$.city: breaks minLength 1"),
    ],
)
def test_arguments_valid(arguments: str, name: str, label: str, reason: str) -> None:
    verdict = arguments_valid(make(arguments, name))
    assert (verdict.label, reason in verdict.reason) == (label, True), verdict


def test_schema_errors_are_named_in_path_order_the_fourth_on_counted() -> None:
    three = arguments_valid(make('{"city": 1, "unit": "k", "a": 3, "b": 4}')).reason
    assert three.endswith(
        "3 schema errors: $.a, $.b: not allowed (additionalProperties); "
        "$.city: expected string; $.unit: not one of the 2 allowed values (enum)"
    ), three
    ticket = make('{"title": 5, "priority": 9, "items": [{"qty": 0}]}', "create_ticket")
    four = arguments_valid(replace(ticket, declared=DECLARED)).reason
    assert four.endswith(
        "4 schema errors: $.items[0]: missing required property 'sku'; "
        "$.items[0].qty: breaks minimum 1; $.priority: breaks maximum 5; and 1 more"
    ), four


def test_the_draft_the_schema_names_is_the_one_validated_against() -> None:
    declared = (REFUND,)
    assert arguments_valid(make('{"amount": 5}', "refund", declared=declared)).passed
    assert not arguments_valid(make('{"amount": 0}', "refund", declared=declared)).passed
    # the same schema read as Draft 2020-12 is not valid JSON Schema: the trace's problem
    as_latest = {k: v for k, v in (REFUND.parameters or {}).items() if k != "$schema"}
    plain = (ToolDefinition("refund", None, as_latest),)
    verdict = arguments_valid(make('{"amount": 5}', "refund", declared=plain))
    assert verdict.skipped and "is not valid JSON Schema" in verdict.reason, verdict


def test_an_unknown_schema_dialect_is_read_as_draft_2020_12_without_a_warning() -> None:
    schema = {"$schema": "https://example.com/dialect", "properties": {"a": {"type": "integer"}}}
    declared = (ToolDefinition("t", None, schema),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert arguments_valid(make('{"a": 1}', "t", declared=declared)).passed
        assert (
            "$.a: expected integer"
            in arguments_valid(make('{"a": "x"}', "t", declared=declared)).reason
        )


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A local server that would answer a $ref; what it was asked, to prove nothing was."""
    asked: list[str] = []

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_ref_outside_the_schema_is_never_fetched(schema_server: tuple[str, list[str]]) -> None:
    url, asked = schema_server
    schema = {"properties": {"page": {"$ref": f"{url}/page.json"}}}
    declared = (ToolDefinition("fetch_page", None, schema),)
    verdict = arguments_valid(make('{"page": "x"}', "fetch_page", declared=declared))
    assert verdict.skipped and "refers to a schema outside itself" in verdict.reason
    assert asked == []


def test_a_long_key_is_cut_in_the_reason() -> None:
    verdict = arguments_valid(make(json.dumps({"city": "x", "k" * 5000: 1})))
    assert not verdict.passed and len(verdict.reason) < 250, verdict.reason


# --- call_succeeded, tool_declared ----------------------------------------------------------


def test_any_error_fails_the_call_even_an_empty_one() -> None:
    assert call_succeeded(make("{}")).passed
    assert call_succeeded(make("{}", error="")).label == "fail"


def test_a_tool_is_declared_or_not_and_skipped_where_none_were() -> None:
    assert tool_declared(make("{}")).passed
    assert tool_declared(make("{}", "rm")).reason == "rm is not among the 3 tools declared"
    verdict = tool_declared(make("{}", declared=()))
    assert verdict.skipped and verdict.value is None


# --- not_repeated ---------------------------------------------------------------------------


def test_the_later_repeats_fail_and_their_reasons_count_them() -> None:
    calls = copies(['{"city": "x"}'] * 23)
    reasons = [not_repeated(c, calls).reason.split(" ")[0] for c in calls]
    assert [reasons[i] for i in (0, 1, 2, 10, 11, 12, 20, 21, 22)] == [
        "1st", "2nd", "3rd", "11th", "12th", "13th", "21st", "22nd", "23rd"
    ]  # fmt: skip
    labels = [not_repeated(c, calls, max_repeats=1).label for c in calls[:3]]
    assert labels == ["pass", "fail", "fail"]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ('{"a": 1, "b": [1, {"c": 2, "d": 3}]}', '{"b":[1,{"d":3,"c":2}],"a":1}', True),
        ('{"a": 10}', '{"a": 10.0}', True),
        ('{"a": true}', '{"a": 1}', False),
        ('{"a": "1"}', '{"a": 1}', False),
        ("", "{}", True),
        ("not json", "not json", True),
        ("not json", "not  json", False),
    ],
)
def test_what_makes_two_calls_the_same(first: str, second: str, same: bool) -> None:
    calls = copies([first, second, second])
    assert not_repeated(calls[2], calls).label == ("fail" if same else "pass")


def test_the_same_arguments_to_another_tool_or_in_another_trace_are_not_a_repeat() -> None:
    calls = [*copies(['{"a": 1}'] * 3), make('{"a": 1}', "search_orders", position=3)]
    other_trace = replace(calls[0], trace_id="t2", position=4)
    assert not_repeated(calls[2], calls).label == "fail"
    assert not_repeated(calls[3], calls).passed
    assert not_repeated(other_trace, [*calls, other_trace]).passed
    with pytest.raises(ValueError, match="max_repeats"):
        not_repeated(calls[0], calls, max_repeats=0)


# --- calls_per_turn -------------------------------------------------------------------------


def test_a_turn_is_counted_once_per_call_in_its_trace() -> None:
    turn = [make(f'{{"i": {i}}}', position=i, turn=3) for i in range(10)]
    assert calls_per_turn(turn[0], turn).reason == "turn 3 made 10 tool calls (at most 10)"
    # the call itself, when ``calls`` lacks it, and a redelivered copy count once
    extra = make("{}", position=10, turn=3)
    assert calls_per_turn(extra, [*turn, turn[0]]).label == "fail"
    assert calls_per_turn(turn[0], [*turn, turn[0]]).passed
    elsewhere = [replace(c, trace_id="t2") for c in turn] + [replace(c, turn=4) for c in turn]
    assert calls_per_turn(extra, elsewhere).reason == "turn 3 made 1 tool call (at most 10)"
    with pytest.raises(ValueError, match="max_calls"):
        calls_per_turn(extra, turn, max_calls=0)


# --- properties -----------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
KEYS = st.text(alphabet="abcxyz_", max_size=4)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=10,
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=5)


def written(value: Any, rng: random.Random) -> str:
    """``value`` as JSON text with its keys in another order and other spacing."""

    def shuffled(v: Any) -> Any:
        if isinstance(v, dict):
            items = list(v.items())
            rng.shuffle(items)
            return {k: shuffled(x) for k, x in items}
        return [shuffled(x) for x in v] if isinstance(v, list) else v

    spacing = rng.choice([{}, {"separators": (",", ":")}, {"indent": 1}, {"indent": "\t"}])
    return json.dumps(shuffled(value), **spacing)  # type: ignore[arg-type]


@settings(max_examples=150)
@given(OBJECTS, st.integers(1, 6), st.integers(1, 4), st.randoms(use_true_random=False))
def test_key_order_and_spacing_never_change_not_repeated(
    value: dict[str, Any], times: int, max_repeats: int, rng: random.Random
) -> None:
    calls = copies([written(value, rng) for _ in range(times)])
    rng.shuffle(calls)  # the order of the list is not the order of the calls
    labels = {c.position: not_repeated(c, calls, max_repeats).label for c in calls}
    expected = ["pass"] * min(times, max_repeats) + ["fail"] * max(0, times - max_repeats)
    assert [labels[i] for i in range(times)] == expected


@settings(max_examples=100)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.integers(1, 8))
def test_a_calls_turn_verdict_depends_on_its_count_alone(turns: list[int], max_calls: int) -> None:
    calls = [make("{}", position=i, turn=t) for i, t in enumerate(turns)]
    counts = Counter(turns)
    for call in calls:
        verdict = calls_per_turn(call, calls, max_calls)
        assert verdict.label == ("fail" if counts[call.turn] > max_calls else "pass")


@settings(max_examples=150)
@given(VALUES)
def test_any_json_value_passes_the_parse_check_exactly_when_it_is_an_object(value: Any) -> None:
    verdict = arguments_valid(make(json.dumps(value), "lookup_user"))
    assert verdict.passed == isinstance(value, dict), verdict


@settings(max_examples=150)
@given(st.text(max_size=40))
def test_any_text_gets_a_verdict_and_text_that_is_not_json_fails(text: str) -> None:
    verdict = arguments_valid(make(text, "lookup_user"))
    try:
        json.loads(text)
    except ValueError:
        assert verdict.label == "fail" or not text.strip(), verdict
    assert verdict.label in ("pass", "fail")


MARKED = st.recursive(
    st.text(max_size=4).map(lambda t: MARK + t) | st.integers() | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150)
@given(
    st.dictionaries(st.sampled_from(["city", "unit", "customer_id", "limit", "x"]) | KEYS, MARKED),
    st.sampled_from(["get_weather", "search_orders", "create_ticket", "refund"]),
)
def test_no_schema_error_repeats_an_argument_value(value: dict[str, Any], name: str) -> None:
    verdict = arguments_valid(make(json.dumps(value), name, declared=DECLARED))
    assert MARK not in verdict.reason, verdict


def test_arguments_too_deep_to_read_are_compared_as_text() -> None:
    deep = '{"a":' * 2000 + "1" + "}" * 2000
    calls = copies([deep] * 3)
    assert [not_repeated(c, calls).label for c in calls] == ["pass", "pass", "fail"]
    assert arguments_valid(calls[0]).reason.endswith("are not JSON (nested too deeply)")


def test_a_span_that_recorded_no_content_is_skipped_not_failed() -> None:
    """An execute_tool span with content capture off has no arguments to check."""
    from stream.tools.checks import arguments_valid
    from stream.tools.model import ToolCall

    call = ToolCall("t", "c", "search", "", extra={"content_missing": True})
    verdict = arguments_valid(call)
    assert verdict.skipped and "recorded no arguments" in verdict.reason


@settings(max_examples=150)
@given(st.one_of(st.text(max_size=40), VALUES.map(json.dumps)))
def test_the_calls_and_the_parse_check_read_arguments_alike(text: str) -> None:
    """One reader of arguments (``found.parse_arguments``): empty text is ``{}`` in both, and
    text the call did not parse is what the check fails as not JSON."""
    [call] = tool_calls(
        {"id": "t", "input": {"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "function": {"name": "lookup_user", "arguments": text}}]}]}}
    )  # fmt: skip
    verdict = arguments_valid(replace(call, declared=(LOOKUP,)))
    assert ("are not JSON" in verdict.reason) == (not call.parses), (call, verdict)
    if not text.strip():
        assert (call.parsed, verdict.label) == ({}, "pass")


def test_arguments_the_trace_did_not_record_are_skipped_not_failed() -> None:
    document = {"id": "t", "input": {"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "lookup_user"}}]}]}}  # fmt: skip
    [call] = tool_calls(document)
    verdict = arguments_valid(replace(call, declared=(LOOKUP,)))
    assert (verdict.label, verdict.reason) == (
        "skipped",
        "the trace recorded no arguments of lookup_user",
    )


def test_a_schema_that_refers_to_itself_without_end_is_skipped_not_an_error() -> None:
    endless = ToolDefinition("loop", None, {"$ref": "#"})
    verdict = arguments_valid(make('{"a": 1}', "loop", declared=(endless,)))
    assert (verdict.label, verdict.reason) == (
        "skipped",
        "the declared schema of loop refers to itself without end",
    )
