"""The deterministic checks of one tool call (issue 50): pure functions of the call and, where
the check needs them, the trace's other calls.

Each returns a ``CallVerdict``:

- ``value`` 1.0 (pass) or 0.0 (fail), None when the check does not apply;
- ``label`` ``"pass"``, ``"fail"`` or ``"skipped"``;
- ``reason`` one short sentence naming what was wrong: the tool's name, a count, the JSON path
  of a schema error and the schema's own words (a keyword, a bound, a property the schema
  requires), never an argument's value, a result or an error message;
- ``skipped`` True when the trace does not carry what the check needs (no declared tools, a
  declared schema that is not valid JSON Schema): the trace's problem, not the agent's.

The checks:

- ``arguments_valid``: the arguments are JSON, an object, and fit the declared tool's schema.
  Empty text is read as ``{}`` (OpenAI's Agents SDK does the same); NaN and Infinity are not
  JSON. The validator is the one the schema's ``$schema`` names, else Draft 2020-12 (an unknown
  ``$schema`` too). ``format`` is an annotation, as Draft 2020-12 says. A ``$ref`` resolves
  only inside the schema: nothing is fetched over the network.
- ``call_succeeded``: the call carries no error.
- ``not_repeated``: the same tool with the same arguments (parsed JSON compared canonically:
  key order ignored, 1 and 1.0 the same; raw text where it does not parse) at most
  ``max_repeats`` times in the trace; the later occurrences fail, the first ones pass.
- ``calls_per_turn``: at most ``max_calls`` calls in the call's assistant turn; every call of
  a turn over the limit fails (parallel calls of one turn have no order to pick a culprit by).
- ``tool_declared``: the tool is among those the request declared.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from .found import NotJSONError, parse_arguments
from .last import last_read
from .model import ToolCall

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"

# schema errors named in one reason; the rest are counted
_ERRORS_NAMED = 3
_PATH_CHARS = 80
_CACHED_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """What a check found on one call: 1.0 pass, 0.0 fail, None skipped; a label and a reason."""

    value: float | None
    label: str
    reason: str
    skipped: bool = False

    @property
    def passed(self) -> bool:
        return self.value == 1.0


def _pass(reason: str) -> CallVerdict:
    return CallVerdict(1.0, PASS, reason)


def _fail(reason: str) -> CallVerdict:
    return CallVerdict(0.0, FAIL, reason)


def _skip(reason: str) -> CallVerdict:
    return CallVerdict(None, SKIPPED, reason, skipped=True)


# --- parsing --------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --- arguments_valid ------------------------------------------------------------------------


def arguments_valid(call: ToolCall) -> CallVerdict:
    """The arguments parse as JSON, are an object and validate against the declared tool's
    schema; skipped when that schema is not valid JSON Schema (or refers outside itself)."""
    name = call.name
    if call.extra.get("content_missing"):  # a span that recorded neither arguments nor result
        return _skip(f"the span of {name} recorded no arguments (content capture is off)")
    if call.extra.get("arguments_missing"):  # the source had no arguments field at all
        return _skip(f"the trace recorded no arguments of {name}")
    try:  # the one reader of arguments (``found.parse_arguments``), as ``tool_calls`` reads them
        value = parse_arguments(call.arguments)
    except NotJSONError as exc:
        return _fail(f"arguments of {name} are not JSON ({exc})")
    if not isinstance(value, dict):
        return _fail(f"arguments of {name} are a JSON {_json_type(value)}, not an object")
    definition = call.definition
    if definition is None or definition.parameters is None:
        why = "was not declared" if definition is None else "was declared without a schema"
        return _pass(f"arguments of {name} are a JSON object; no schema checked: {name} {why}")
    try:
        compiled = _compiled(canonical_json(definition.parameters))
    except (TypeError, ValueError, RecursionError):
        compiled = "it is not JSON"
    if isinstance(compiled, str):
        return _skip(f"the declared schema of {name} is not valid JSON Schema ({compiled})")
    try:
        errors = sorted(compiled.iter_errors(value), key=lambda e: (e.json_path, str(e.validator)))
    except referencing.exceptions.Unresolvable:
        return _skip(f"the declared schema of {name} refers to a schema outside itself")
    except RecursionError:  # {"$ref": "#"}: a reference that never reaches a keyword
        return _skip(f"the declared schema of {name} refers to itself without end")
    if not errors:
        return _pass(f"arguments of {name} fit its declared schema")
    named = "; ".join(_describe(e) for e in errors[:_ERRORS_NAMED])
    more = len(errors) - _ERRORS_NAMED
    tail = f"; and {more} more" if more > 0 else ""
    count = f"{len(errors)} schema error{'' if len(errors) == 1 else 's'}"
    return _fail(f"arguments of {name} do not fit its declared schema, {count}: {named}{tail}")


@lru_cache(maxsize=128)
def _compiled(schema_text: str) -> Validator | str:
    """The validator of a schema (its canonical JSON text, so equal schemas share one), or
    why the schema is not valid JSON Schema."""
    schema = json.loads(schema_text)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return f"at {_cut(exc.json_path)}, fails the meta-schema's {exc.validator}"
    # an empty registry: a $ref resolves inside the schema or not at all (never fetched)
    validator: Validator = cls(schema, registry=referencing.Registry())
    return validator


def _describe(error: ValidationError) -> str:
    """One schema error in the schema's words: the keyword, and a bound or a name the schema
    holds; never the instance's value."""
    path, keyword, expected = _cut(error.json_path), str(error.validator), error.validator_value
    instance = error.instance
    if keyword == "required" and isinstance(instance, dict):
        missing = [p for p in expected if p not in instance]
        names = ", ".join(repr(_cut(str(p))) for p in missing)
        return f"{path}: missing required propert{'y' if len(missing) == 1 else 'ies'} {names}"
    if keyword == "additionalProperties" and isinstance(instance, dict):
        extra = _extra_keys(instance, error.schema)
        if extra:
            where = ", ".join(_cut(f"{error.json_path}.{k}") for k in extra[:_ERRORS_NAMED])
            return f"{where}: not allowed ({keyword})"
    if keyword == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return f"{path}: expected {' or '.join(str(k) for k in kinds)}"
    if keyword == "enum" and isinstance(expected, list):
        return f"{path}: not one of the {len(expected)} allowed values (enum)"
    if keyword in ("oneOf", "anyOf"):
        return f"{path}: fits none of the {keyword} alternatives"
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        return f"{path}: breaks {keyword} {expected}"
    return f"{path}: breaks {keyword}"


def _extra_keys(instance: dict[str, Any], schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    known = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})

    def allowed(key: str) -> bool:
        try:
            return key in known or any(re.search(p, key) for p in patterns)
        except re.error:  # an ECMA pattern Python does not read: name no key rather than guess
            return True

    return sorted(k for k in instance if not allowed(k))


def _cut(text: str) -> str:
    return text if len(text) <= _PATH_CHARS else text[: _PATH_CHARS - 1] + "\u2026"


# --- call_succeeded, tool_declared ----------------------------------------------------------


def call_succeeded(call: ToolCall) -> CallVerdict:
    """The call carries no error (its error text is never repeated: it may hold anything)."""
    if call.error is not None:
        return _fail(f"{call.name} returned an error")
    return _pass(f"{call.name} returned without an error")


def tool_declared(call: ToolCall) -> CallVerdict:
    """The tool is among those the request declared; skipped where it declared none."""
    if not call.declared:
        return _skip("the request declared no tools")
    if call.definition is None:
        n = len(call.declared)
        return _fail(f"{call.name} is not among the {n} tool{'' if n == 1 else 's'} declared")
    return _pass(f"{call.name} was declared")


# --- not_repeated, calls_per_turn -----------------------------------------------------------


def not_repeated(call: ToolCall, calls: Sequence[ToolCall], max_repeats: int = 2) -> CallVerdict:
    """The same tool with the same arguments is called at most ``max_repeats`` times in the
    trace: the call fails when it is the (max_repeats + 1)-th such call or later (by
    position), and passes before."""
    if max_repeats < 1:
        raise ValueError(f"max_repeats must be at least 1, not {max_repeats}")
    nth = bisect_left(_index(calls)[0].get((call.trace_id, *call_key(call)), []), call.position)
    nth += 1  # the calls of the same key before it, and itself
    if nth > max_repeats:
        return _fail(
            f"{_ordinal(nth)} call of {call.name} with the same arguments "
            f"(at most {max_repeats} allowed)"
        )
    return _pass(
        f"{_ordinal(nth)} call of {call.name} with these arguments (at most {max_repeats})"
    )


def calls_per_turn(call: ToolCall, calls: Sequence[ToolCall], max_calls: int = 10) -> CallVerdict:
    """At most ``max_calls`` calls in the call's assistant turn (the call itself counted once
    whether or not ``calls`` holds it)."""
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, not {max_calls}")
    made = len(_index(calls)[1].get((call.trace_id, call.turn), set()) | {call.call_id})
    text = f"turn {call.turn} made {made} tool call{'' if made == 1 else 's'}"
    if made > max_calls:
        return _fail(f"{text} (at most {max_calls} allowed)")
    return _pass(f"{text} (at most {max_calls})")


@last_read  # a trace's calls are checked one by one against one list (``view.calls_of``)
def _index(
    calls: Sequence[ToolCall],
) -> tuple[dict[tuple[str, str, str, str], list[int]], dict[tuple[str, int], set[str]]]:
    """The trace's calls read once, not once per call (quadratic in a long agent run):
    (trace, tool, arguments' kind, arguments) -> the positions of the calls so made, sorted;
    (trace, turn) -> the ids of the calls that turn made."""
    positions: dict[tuple[str, str, str, str], list[int]] = {}
    turns: dict[tuple[str, int], set[str]] = {}
    for other in calls:
        positions.setdefault((other.trace_id, *call_key(other)), []).append(other.position)
        turns.setdefault((other.trace_id, other.turn), set()).add(other.call_id)
    for found in positions.values():
        found.sort()
    return positions, turns


def call_key(call: ToolCall) -> tuple[str, str, str]:
    """What makes two calls the same call: the tool's name and its arguments, canonical JSON
    where they parse (keys sorted, integral numbers as integers), else the raw text."""
    return (call.name, *_arguments_key(call.arguments))


def _arguments_key(text: str) -> tuple[str, str]:
    # a trace's calls are compared with each other once per call: short texts (most tools'
    # arguments) are read once; long ones are not kept alive by the cache
    return _short_arguments_key(text) if len(text) <= _CACHED_CHARS else _read_key(text)


@lru_cache(maxsize=1024)
def _short_arguments_key(text: str) -> tuple[str, str]:
    return _read_key(text)


def _read_key(text: str) -> tuple[str, str]:
    try:
        return ("json", canonical_json(parse_arguments(text)))
    except (NotJSONError, RecursionError):  # RecursionError: deep enough to parse, not to walk
        return ("text", text)


def canonical_json(value: Any) -> str:
    """A JSON value as text that is equal for equal values: keys sorted, integral numbers as
    integers (1 and 1.0 alike). The one reading of sameness of arguments: ``call_key``, and the
    expected steps of a trajectory (``expected``)."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalise(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
