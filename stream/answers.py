"""The answer format the engine owns: the JSON schema asked of the judge, and parsing.

Structured output first; for judges that ignore it, text parsing that takes the *last*
match, so a score quoted earlier in the answer (or injected through the trace) cannot win.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from .rules import OutputSpec

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_SCORE_LINE = re.compile(r"\bscore\b[\"'*\s]*[:=]\s*[\"'*]*\s*(" + _NUMBER + r")", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^\s*(" + _NUMBER + r")\s*$")


class InvalidAnswer(ValueError):
    """The judge answered, but not with a usable verdict."""


@dataclass(frozen=True)
class ParsedAnswer:
    raw_value: float
    label: str | None
    reason: str | None


def response_schema(spec: OutputSpec) -> dict[str, Any]:
    """JSON schema for structured output: a score (or one of the allowed labels) and a reason."""
    if spec.type == "choice":
        assert spec.choices
        verdict: dict[str, Any] = {"type": "string", "enum": list(spec.choices)}
        key = "choice"
    else:
        verdict = {"type": "integer" if spec.integer else "number"}
        key = "score"
    schema = {
        "type": "object",
        "properties": {key: verdict, "reason": {"type": "string"}},
        "required": [key, "reason"],
        "additionalProperties": False,
    }
    if spec.answer_key:
        return {
            "type": "object",
            "properties": {spec.answer_key: schema},
            "required": [spec.answer_key],
            "additionalProperties": False,
        }
    return schema


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object embedded in ``text``, in order."""
    found = []
    decoder_starts = [m.start() for m in re.finditer(r"\{", text)]
    consumed_until = -1
    for start in decoder_starts:
        if start < consumed_until:
            continue
        depth = 0
        in_string = False
        escape = False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = orjson.loads(text[start : i + 1])
                    except orjson.JSONDecodeError:
                        break
                    if isinstance(obj, dict):
                        found.append(obj)
                    consumed_until = i + 1
                    break
    return found


def _verdict_from_object(obj: dict[str, Any]) -> tuple[Any, Any] | None:
    """(verdict, reason) from a JSON answer, looking one level down for wrapped answers."""
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for key in ("score", "choice", "value", "result", "label"):
        if key in lowered:
            return lowered[key], lowered.get("reason", lowered.get("rationale"))
    for value in obj.values():
        if isinstance(value, dict) and (inner := _verdict_from_object(value)):
            return inner
    return None


def _to_number(value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidAnswer(f"score is a boolean: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*" + _NUMBER + r"\s*", value):
        return float(value)
    raise InvalidAnswer(f"score is not a number: {value!r}")


def validate(spec: OutputSpec, verdict: Any, reason: Any) -> ParsedAnswer:
    """Check a verdict against the rule's output spec and turn it into a raw value."""
    reason_text = reason if isinstance(reason, str) else None
    if spec.type == "choice":
        assert spec.choices
        choices = {k.lower(): k for k in spec.choices}
        if not isinstance(verdict, str) or verdict.strip().lower() not in choices:
            raise InvalidAnswer(f"answer {verdict!r} is not one of {list(spec.choices)}")
        label = choices[verdict.strip().lower()]
        return ParsedAnswer(spec.choices[label], label, reason_text)
    raw = _to_number(verdict)
    scale = spec.scale
    if not scale.min <= raw <= scale.max:
        raise InvalidAnswer(f"score {raw:g} is outside the scale [{scale.min:g}, {scale.max:g}]")
    if spec.integer and not raw.is_integer():
        raise InvalidAnswer(
            f"score {raw:g} is not an integer on the scale [{scale.min:g}, {scale.max:g}]"
        )
    return ParsedAnswer(raw, spec.label_for(raw), reason_text)


def parse_answer(spec: OutputSpec, content: str) -> ParsedAnswer:
    """Parse a judge's answer: JSON (the last object that carries a verdict), then text.

    A rule with an ``answer_key`` accepts only its own shape, ``{"<key>": {"score", "reason"}}``.
    """
    objects = _json_objects(content)
    if spec.answer_key:
        for obj in reversed(objects):
            inner = obj.get(spec.answer_key)
            if isinstance(inner, dict) and "score" in inner:
                return validate(spec, inner["score"], inner.get("reason"))
        raise InvalidAnswer(f'expected {{"{spec.answer_key}": {{"score": ..., "reason": ...}}}}')
    for obj in reversed(objects):
        if found := _verdict_from_object(obj):
            return validate(spec, *found)
    if spec.type == "choice":
        assert spec.choices
        pattern = r"\b(" + "|".join(re.escape(c) for c in spec.choices) + r")\b"
        matches = re.findall(pattern, content, re.IGNORECASE)
        if matches:
            return validate(spec, matches[-1], content.strip())
        raise InvalidAnswer(f"no choice among {list(spec.choices)} in the answer")
    matches = _SCORE_LINE.findall(content) or _BARE_NUMBER.findall(content)
    if not matches:
        raise InvalidAnswer("no score in the answer")
    return validate(spec, matches[-1], _reason_from_text(content))


def _reason_from_text(content: str) -> str:
    match = re.search(
        r"\b(?:reason|justification|rationale)\b\s*[:=]\s*(.+)", content, re.IGNORECASE | re.DOTALL
    )
    return (match.group(1) if match else content).strip()
