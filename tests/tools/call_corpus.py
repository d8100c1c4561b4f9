"""A labelled set of tool calls for the deterministic checks (issue 50's measure): agents'
traces made by a seeded generator, each call with the verdict every check must give and a
fragment its reason must hold.

The labels come from how a call was made, not from re-running a check's logic: a call made
invalid on purpose says how and where; a loop repeats one call on purpose (with its keys
reordered, its spacing changed, ``10`` written ``10.0``), so its third and later copies are
the looping ones; a burst puts more than ten calls in one turn. Every other call's arguments
hold a number of its own, so no two are the same by accident. Argument values and errors
carry a marker (``MARK``) that no reason may repeat.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stream.tools.model import ToolCall, ToolDefinition

MARK = "\u27e6pd"  # in every argument value and error text; never in a reason
CHECKS = ("arguments_valid", "call_succeeded", "not_repeated", "calls_per_turn", "tool_declared")

WEATHER = ToolDefinition(
    "get_weather",
    "The weather in a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
)
ORDERS = ToolDefinition(
    "search_orders",
    "A customer's orders",
    {
        "type": "object",
        "properties": {
            "customer_id": {"type": "integer", "minimum": 1},
            "status": {"enum": ["open", "shipped", "returned"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["customer_id"],
    },
)
TICKET = ToolDefinition(
    "create_ticket",
    "Open a support ticket",
    {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 120},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
        },
        "required": ["title", "priority"],
        "$defs": {
            "item": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                    "qty": {"type": "integer", "minimum": 1},
                },
                "required": ["sku", "qty"],
            }
        },
    },
)
# a draft-04 schema: valid only as the draft its $schema names (a boolean exclusiveMinimum)
REFUND = ToolDefinition(
    "refund",
    "Refund an amount",
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"amount": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
        "required": ["amount"],
    },
)
LOOKUP = ToolDefinition("lookup_user", "Find a user (the trace carries no schema)")
BROKEN = ToolDefinition(
    "export_report", None, {"type": "object", "properties": {"x": {"type": "integr"}}}
)
REMOTE = ToolDefinition(
    "fetch_page",
    None,
    {"type": "object", "properties": {"page": {"$ref": "https://schemas.invalid/page.json"}}},
)
DECLARED = (WEATHER, ORDERS, TICKET, REFUND, LOOKUP)


@dataclass(frozen=True)
class Labelled:
    """A call, the label each check must give it and fragments its reasons must hold."""

    call: ToolCall
    kind: str
    labels: dict[str, str]
    reasons: dict[str, str] = field(default_factory=dict)


class _Source:
    """The generator's state: its random numbers, a number per call (so no two calls are the
    same by accident) and the ways of going wrong in turn (so every way is in the set)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._n = 1000
        self._ways = 0

    def n(self) -> int:
        self._n += 1
        return self._n

    def way(self) -> int:
        self._ways += 1
        return (self._ways - 1) % len(_INVALID)


@dataclass
class _Made:
    name: str
    arguments: str
    kind: str
    args_label: str = "pass"
    args_reason: str = ""
    error: str | None = None


def _text(value: Any, rng: random.Random) -> str:
    """JSON text of ``value`` as a model might write it: compact, spaced or indented."""
    return json.dumps(value, **rng.choice([{}, {"separators": (",", ":")}, {"indent": 2}]))


def _valid(n: int, rng: random.Random) -> _Made:
    tool = rng.choice(["get_weather", "search_orders", "create_ticket", "refund", "lookup_user"])
    value: dict[str, Any]
    if tool == "get_weather":
        value = {"city": f"{MARK} city {n}", "unit": rng.choice(["celsius", "fahrenheit"])}
    elif tool == "search_orders":
        value = {"customer_id": n + 1, "limit": rng.randint(1, 50), "status": "open"}
    elif tool == "create_ticket":
        items = [{"sku": f"ABC-{1000 + i}", "qty": i + 1} for i in range(rng.randint(0, 3))]
        value = {"title": f"{MARK} ticket {n}", "priority": rng.randint(1, 5), "items": items}
    elif tool == "refund":
        value = {"amount": n + 0.5}
    else:
        value = {"email": f"{MARK}{n}@example.org"}
    return _Made(tool, _text(value, rng), "valid")


# how arguments go wrong: the tool, the arguments (a JSON value, or raw text) and what the
# reason must say
# fmt: off
_INVALID: list[tuple[str, Callable[[int], Any], str]] = [
    ("get_weather", lambda n: {"city": n}, "$.city: expected string"),
    ("get_weather", lambda n: {"city": f"{MARK}{n}", "country": MARK}, "$.country: not allowed (additionalProperties)"),
    ("get_weather", lambda n: {"city": f"{MARK}{n}", "unit": f"kelvin{MARK}"}, "$.unit: not one of the 2 allowed values"),
    ("search_orders", lambda n: {"limit": n % 50 + 1}, "$: missing required property 'customer_id'"),
    ("search_orders", lambda n: {"customer_id": -n}, "$.customer_id: breaks minimum 1"),
    ("search_orders", lambda n: {"customer_id": n + 1, "limit": 51 + n}, "$.limit: breaks maximum 50"),
    ("create_ticket", lambda n: {"title": f"{MARK}{n}", "priority": 2, "items": [{"sku": "ABC-1000", "qty": 1}, {"sku": "ABC-1001", "qty": f"two{MARK}"}]}, "$.items[1].qty: expected integer"),
    ("create_ticket", lambda n: {"title": f"{MARK}{n}", "priority": 3, "items": [{"sku": f"abc{MARK}", "qty": 1}]}, "$.items[0].sku: breaks pattern"),
    ("create_ticket", lambda n: {"title": n, "priority": 9, "items": [{"qty": 0}], "x": MARK}, "4 schema errors"),
    ("refund", lambda n: {"amount": 0, "note": f"{MARK}{n}"}, "$.amount: breaks minimum 0"),
    ("get_weather", lambda n: '{"city": "' + MARK + str(n), "are not JSON (Unterminated string"),
    ("search_orders", lambda n: f'{{"customer_id": {n}, }}', "are not JSON (Expecting property name"),
    ("search_orders", lambda n: f'{{"customer_id": NaN, "n": {n}}}', "are not JSON (NaN is not JSON)"),
    ("get_weather", lambda n: [f"{MARK}{n}"], "are a JSON array, not an object"),
    ("lookup_user", lambda n: f"{MARK}{n}", "are a JSON string, not an object"),
]
# fmt: on


def _invalid(n: int, way: int) -> _Made:
    tool, make, reason = _INVALID[way]
    value = make(n)
    # raw text where it is meant not to parse; a JSON string argument is dumped like the rest
    broken = isinstance(value, str) and tool != "lookup_user"
    return _Made(tool, value if broken else json.dumps(value), "schema-invalid", "fail", reason)


def _failed(n: int, rng: random.Random) -> _Made:
    made = _valid(n, rng)
    made.kind, made.error = "failed", f"{MARK} no such customer {n}: jane.doe@example.org"
    return made


def _undeclared(n: int, rng: random.Random) -> _Made:
    value = {"path": f"/tmp/{MARK}{n}"}
    if rng.random() < 0.25:
        return _Made("delete_file", f"{{'path': {n}}}", "undeclared", "fail", "are not JSON")
    return _Made(
        rng.choice(["delete_file", "run_shell"]),
        _text(value, rng),
        "undeclared",
        "pass",
        "no schema checked",
    )


def _mixed(src: _Source) -> _Made:
    n, rng = src.n(), src.rng
    kind = rng.choices(["valid", "invalid", "failed", "undeclared"], weights=[4, 4, 1, 1])[0]
    if kind == "invalid":
        return _invalid(n, src.way())
    return {"valid": _valid, "failed": _failed, "undeclared": _undeclared}[kind](n, rng)


class _Trace:
    """Builds one trace's calls turn by turn, with the labels the trace-wide checks must give."""

    def __init__(self, trace_id: str, declared: tuple[ToolDefinition, ...]) -> None:
        self.trace_id, self.declared = trace_id, declared
        self.turns: list[list[tuple[_Made, str, str]]] = []

    def turn(self, made: list[_Made], repeats: list[str] | None = None) -> None:
        labels = repeats or ["pass"] * len(made)
        reasons = [
            "with the same arguments (at most 2 allowed)" if r == "fail" else "" for r in labels
        ]
        self.turns.append(list(zip(made, labels, reasons, strict=True)))

    def calls(self) -> Iterator[Labelled]:
        position = 0
        for turn, made_turn in enumerate(self.turns):
            size = len(made_turn)
            for made, repeated, repeat_reason in made_turn:
                yield self._labelled(made, position, turn, size, repeated, repeat_reason)
                position += 1

    def _labelled(
        self, made: _Made, position: int, turn: int, size: int, repeated: str, repeat_reason: str
    ) -> Labelled:
        call = ToolCall(
            trace_id=self.trace_id,
            call_id=f"call_{self.trace_id}_{position}",
            name=made.name,
            arguments=made.arguments,
            error=made.error,
            declared=self.declared,
            position=position,
            turn=turn,
        )
        declared = {d.name: d for d in self.declared}
        definition = declared.get(made.name)
        args_label, args_reason = made.args_label, made.args_reason
        if definition is BROKEN and args_label == "pass":
            args_label, args_reason = "skipped", "is not valid JSON Schema"
        if definition is REMOTE and args_label == "pass" and "page" in json.loads(made.arguments):
            args_label, args_reason = "skipped", "refers to a schema outside itself"
        labels = {
            "arguments_valid": args_label,
            "call_succeeded": "fail" if made.error is not None else "pass",
            "not_repeated": repeated,
            "calls_per_turn": "fail" if size > 10 else "pass",
            "tool_declared": "skipped" if not self.declared else ("pass" if definition else "fail"),
        }
        reasons = {
            "arguments_valid": args_reason,
            "not_repeated": repeat_reason,
            "calls_per_turn": f"turn {turn} made {size} tool call",
            "tool_declared": "declared no tools" if not self.declared else "",
        }
        return Labelled(call, made.kind, labels, reasons)


def _split(made: list[_Made], rng: random.Random, trace: _Trace) -> None:
    while made:
        size = rng.randint(1, 4)
        trace.turn(made[:size])
        made = made[size:]


def _mixed_trace(tid: str, size: int, src: _Source) -> _Trace:
    trace = _Trace(tid, DECLARED)
    _split([_mixed(src) for _ in range(size)], src.rng, trace)
    return trace


def _loop_trace(tid: str, src: _Source) -> _Trace:
    """One call made 3 to 6 times (written differently each time) among distinct calls,
    a near-copy that differs in one value, and a failing call made twice."""
    rng = src.rng
    n = src.n()
    value: dict[str, Any] = rng.choice(
        [
            {"city": f"{MARK} Oslo {n}", "unit": "celsius"},
            {"customer_id": n, "limit": 10, "status": "open"},
        ]
    )
    tool = "get_weather" if "city" in value else "search_orders"

    def copy() -> _Made:
        keys = list(value)
        rng.shuffle(keys)
        shuffled = {
            k: (float(value[k]) if k == "limit" and rng.random() < 0.5 else value[k]) for k in keys
        }
        return _Made(tool, _text(shuffled, rng), "looping")

    copies = rng.randint(3, 6)
    near = _Made(
        tool,
        json.dumps({**value, **({"unit": "fahrenheit"} if "city" in value else {"limit": 11})}),
        "valid",
    )
    failing = _failed(src.n(), rng)
    again = _Made(failing.name, failing.arguments, "failed", error=failing.error)
    trace = _Trace(tid, DECLARED)
    for i in range(copies):
        others = [_valid(src.n(), rng) for _ in range(rng.randint(0, 2))]
        turn = [copy(), *others]
        labels = ["fail" if i >= 2 else "pass", *["pass"] * len(others)]
        if i == 1:
            turn, labels = [*turn, near, failing], [*labels, "pass", "pass"]
        if i == 2:
            turn, labels = [*turn, again], [*labels, "pass"]
        trace.turn(turn, labels)
    return trace


def _burst_trace(tid: str, src: _Source) -> _Trace:
    """A turn of 11 to 13 parallel calls (every one over the limit) beside one of exactly 10."""
    rng = src.rng
    trace = _Trace(tid, DECLARED)
    trace.turn([_valid(src.n(), rng) for _ in range(10)])
    trace.turn([_valid(src.n(), rng) for _ in range(rng.randint(11, 13))])
    trace.turn([_valid(src.n(), rng) for _ in range(2)])
    return trace


def _undeclared_trace(tid: str, src: _Source) -> _Trace:
    """A request that declared no tools: arguments checked for JSON only, declaration skipped."""
    rng = src.rng
    trace = _Trace(tid, ())
    made = []
    for _ in range(5):
        n, tool = src.n(), rng.choice(["get_weather", "search_orders"])
        if rng.random() < 0.3:
            made.append(_Made(tool, f"city={MARK}{n}", "undeclared", "fail", "are not JSON"))
        else:
            arguments = json.dumps({"q": f"{MARK}{n}"})
            made.append(_Made(tool, arguments, "undeclared", "pass", "was not declared"))
    _split(made, rng, trace)
    return trace


def _broken_schema_trace(tid: str, src: _Source) -> _Trace:
    """Schemas that are the trace's problem: not valid JSON Schema, or a $ref to the network."""
    rng = src.rng
    trace = _Trace(tid, (*DECLARED, BROKEN, REMOTE))
    made = [
        _Made("export_report", json.dumps({"x": src.n()}), "valid"),
        _Made("export_report", '{"x": ', "schema-invalid", "fail", "are not JSON"),
        _Made("fetch_page", json.dumps({"page": f"{MARK}{src.n()}"}), "valid"),
        _Made("fetch_page", json.dumps({"other": src.n()}), "valid", "pass", "fit its declared"),
        _valid(src.n(), rng),
    ]
    _split(made, rng, trace)
    return trace


def labelled_calls(count: int = 200, seed: int = 50) -> list[Labelled]:
    """``count`` labelled calls in whole traces, the same on every run of a seed."""
    src = _Source(seed)
    out: list[Labelled] = []
    builders = [_loop_trace, _undeclared_trace, _loop_trace, _burst_trace, _broken_schema_trace]
    t = 0
    while len(out) < count:
        tid = f"t{seed}-{t}"
        left = count - len(out)
        trace = (
            builders[t // 2 % len(builders)](tid, src)
            if t % 2 == 1
            else _mixed_trace(tid, src.rng.randint(4, 10), src)
        )
        made = list(trace.calls())
        if len(made) > left:  # the last trace takes what is left
            made = list(_mixed_trace(tid, left, src).calls())
        out.extend(made)
        t += 1
    return out
