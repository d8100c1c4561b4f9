"""Answers the scripted judge makes up for a prompt no test scripted, when it is asked to vary
them (``MockJudge(vary_answers=True)``, as its command line runs it for the README's demo): in
the format the request asks for, each value picked by a hash of the conversation, so that a
newcomer's first scores look like scores (varied, in the rule's own scale or labels) and the
same prompt always gets the same answer.

- A request with a JSON schema (``response_format``, OpenAI's structured outputs) is answered
  with a document of that schema: one of an enum's labels; a number in the scale the prompt
  states, since a strict schema carries no bounds ("an integer from 1 to 5", "between 0.0 and
  1.0", "a 3-point scale", "(-2 to +2 scale)", MLflow's "Score 1: ... Score 5:" rubric); a
  short reason for every free text.
- A request without one whose prompt asks for ``score:`` and ``justification:`` lines (MLflow's
  metrics) is answered with those two lines.
- A request that offers tools and has called none yet first calls the first tool that takes no
  argument, as a judge reads a trace before it answers.

Anything else: None (the double answers with its default).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

REASON = "Scripted judge: an answer picked by a hash of the prompt, not a judgement."
NOTE = "scripted note"

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
# a range with a word that makes it a scale shortly before it: "a score between 0.0 and 1.0"
_RANGE = re.compile(
    rf"\b(score|rating|rate|grade|integer|number|value|scale|points?)\b[^.\n]{{0,40}}?"
    rf"\b(?:from|between)\s+({_NUMBER})\s*(?:to|and|-|–)\s*({_NUMBER})",
    re.IGNORECASE,
)
_SPAN_SCALE = re.compile(rf"({_NUMBER})\s*(?:to|-|–)\s*({_NUMBER})\s+scale\b", re.IGNORECASE)
_POINT_SCALE = re.compile(r"\b(\d+)[- ]point (?:rating )?scale\b", re.IGNORECASE)
_SCORE_ANCHOR = re.compile(rf"\bscore\s+({_NUMBER})\s*:", re.IGNORECASE)
_SCORE_LINE = re.compile(r"^[ \t*]*score[ \t*]*:", re.IGNORECASE | re.MULTILINE)
_JUSTIFICATION_LINE = re.compile(r"^[ \t*]*justification[ \t*]*:", re.IGNORECASE | re.MULTILINE)
_CONTEXT = 60  # characters before a stated scale read as what it is the scale of


@dataclass(frozen=True)
class StatedScale:
    """A scale the prompt states: its bounds, whether they are written with decimals, and
    the words just before it (what it is the scale of)."""

    low: float
    high: float
    decimal: bool
    context: str


def stated_scales(prompt: str) -> list[StatedScale]:
    """Every scale ``prompt`` states, in the phrasings judge prompts use."""
    found: list[StatedScale] = []

    def add(low: str, high: str, start: int, end: int) -> None:
        if float(low) < float(high):
            context = prompt[max(0, start - _CONTEXT) : end].lower()
            found.append(StatedScale(float(low), float(high), "." in low + high, context))

    for m in _RANGE.finditer(prompt):
        add(m.group(2), m.group(3), m.start(2), m.end())
    for m in _SPAN_SCALE.finditer(prompt):
        add(m.group(1), m.group(2), m.start(), m.end())
    for m in _POINT_SCALE.finditer(prompt):
        add("1", m.group(1), m.start(), m.end())
    anchors = [m.group(1) for m in _SCORE_ANCHOR.finditer(prompt)]
    if len(set(anchors)) >= 2:  # a rubric of "Score 1: ..." to "Score 5: ..." lines
        low, high = min(anchors, key=float), max(anchors, key=float)
        found.append(StatedScale(float(low), float(high), "." in low + high, "score"))
    return found


def scale_of(field: str, others: set[str], scales: list[StatedScale]) -> StatedScale | None:
    """The scale of the numeric ``field``: the scales stated with its name, else those stated
    with no other numeric field's name (``others``), narrowed to where they all agree; None
    when the prompt states none, or scales that do not overlap."""
    named = [s for s in scales if field.lower() in s.context]
    if not named:
        named = [s for s in scales if not any(o.lower() in s.context for o in others)]
    if not named:
        return None
    low, high = max(s.low for s in named), min(s.high for s in named)
    if low > high:
        return None
    return StatedScale(low, high, any(s.decimal for s in named), field)


class Dice:
    """Deterministic choices from a hash of the conversation, one roll per place asked about
    (a rubric's criteria get a value each)."""

    def __init__(self, conversation: Any) -> None:
        self.seed = hashlib.sha256(orjson.dumps(conversation)).digest()

    def roll(self, place: str, sides: int) -> int:
        digest = hashlib.sha256(self.seed + place.encode()).digest()
        return int.from_bytes(digest[:8], "big") % sides

    def choose(self, place: str, options: list[Any]) -> Any:
        return options[self.roll(place, len(options))]

    def number(self, place: str, scale: StatedScale | None, integer: bool) -> float | int:
        """A value on ``scale``: an integer step of it, or one of its tenths; 1 when the prompt
        states no scale (a value every usual scale holds: 1-5, 0-1, 1-3, -2 to +2)."""
        if scale is None:
            return 1 if integer else 1.0
        if integer:
            low, high = math.ceil(scale.low), math.floor(scale.high)
            return low + self.roll(place, high - low + 1) if low <= high else 1
        step = (scale.high - scale.low) / 10
        return round(scale.low + step * self.roll(place, 11), 4)


def numeric_fields(schema: dict[str, Any], root: dict[str, Any]) -> set[str]:
    """The names of every numeric property in ``schema``, at any depth."""
    schema = _resolved(schema, root)
    names: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        sub = _resolved(sub, root)
        if sub.get("type") in ("number", "integer") and "enum" not in sub:
            names.add(name)
        names |= numeric_fields(sub, root)
    if isinstance(schema.get("items"), dict):
        names |= numeric_fields(schema["items"], root)
    return names


def _resolved(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _resolved(root.get("$defs", root.get("definitions", {}))[name], root)
    return schema


@dataclass
class Composer:
    """Fills a JSON schema with varied values for one prompt."""

    root: dict[str, Any]
    dice: Dice
    scales: list[StatedScale]
    numeric: set[str]

    def document(self, schema: dict[str, Any], place: str = "", field: str = "") -> Any:
        schema = _resolved(schema, self.root)
        if "enum" in schema:
            return self.dice.choose(place, list(schema["enum"]))
        if "const" in schema:
            return schema["const"]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
                return self.document(options[0], place, field)
        kind = schema.get("type", "object")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            properties = schema.get("properties", {})
            return {n: self.document(s, f"{place}/{n}", n) for n, s in properties.items()}
        if kind == "array":
            count = max(1, schema.get("minItems", 1))
            item = schema.get("items", {"type": "string"})
            if _resolved(item, self.root).get("type", "string") == "string":
                return [NOTE] * count
            return [self.document(item, f"{place}/{i}", field) for i in range(count)]
        if kind in ("number", "integer"):
            return self.number(schema, place, field, integer=kind == "integer")
        if kind == "boolean":
            return self.dice.choose(place, [True, False])
        if kind == "null":
            return None
        return REASON

    def number(self, schema: dict[str, Any], place: str, field: str, integer: bool) -> float | int:
        if "minimum" in schema and "maximum" in schema:  # bounds in the schema win
            bounds = StatedScale(float(schema["minimum"]), float(schema["maximum"]), True, field)
            return self.dice.number(place, bounds, integer)
        scale = scale_of(field, self.numeric - {field}, self.scales)
        return self.dice.number(place, scale, integer)


@dataclass(frozen=True)
class Answer:
    """What the double answers: text, or tool calls ``[(name, arguments)]``."""

    content: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None


def varied_answer(body: dict[str, Any]) -> Answer | None:
    """The answer to a chat-completions request ``body`` in the format it asks for, its
    values picked by a hash of its messages; None when it asks for no format this knows."""
    messages = body.get("messages") or []
    dice = Dice(messages)
    read = any(m.get("role") == "tool" for m in messages)
    if not read and (name := _argumentless_tool(body.get("tools") or [])) is not None:
        return Answer(tool_calls=[(name, {})])
    prompt = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "tool")
    scales = stated_scales(prompt)
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if isinstance(schema, dict):
        composer = Composer(schema, dice, scales, numeric_fields(schema, schema))
        return Answer(orjson.dumps(composer.document(schema)).decode())
    if _SCORE_LINE.search(prompt) and _JUSTIFICATION_LINE.search(prompt):
        scale = scale_of("score", set(), scales)
        integer = scale is None or not scale.decimal
        value = dice.number("/score", scale, integer)
        return Answer(f"score: {value}\njustification: {REASON}")
    return None


def _argumentless_tool(tools: list[dict[str, Any]]) -> str | None:
    """The first offered function that requires no argument."""
    for tool in tools:
        function = tool.get("function") or {}
        if not (function.get("parameters") or {}).get("required") and function.get("name"):
            return str(function["name"])
    return None
