"""The answer format the engine owns, for a rule with one verdict (a score or a label): the
JSON schema asked of the judge, and parsing its answer; and what every parser shares (which
verdicts are the judge's own, the JSON objects in a text, checking a verdict against its spec).

Structured output first; for judges that ignore it, text parsing that takes the *last*
match, so a score quoted earlier in the answer (or injected through the trace) cannot win.
Rubrics and comparisons (many criteria in one answer) are ``criteria.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar

import orjson

from ..engine.verdicts import ParsedAnswer
from ..ruleset.specs import OutputSpec

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_SCORE_LINE = re.compile(r"\bscore\b[\"'*\s]*[:=]\s*[\"'*]*\s*(" + _NUMBER + r")", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^\s*(" + _NUMBER + r")\s*$")


T = TypeVar("T")


class InvalidAnswer(ValueError):  # noqa: N818 - a kind of answer, as the error kind says
    """The judge answered, but not with a usable verdict."""


def verdict_schema(spec: OutputSpec) -> tuple[str, dict[str, Any]]:
    """The verdict's field name and its JSON schema (one of the labels, or a number)."""
    if spec.type == "choice":
        assert spec.choices
        return spec.verdict_field or "choice", {"type": "string", "enum": list(spec.choices)}
    return spec.verdict_field or "score", {"type": "integer" if spec.integer else "number"}


def closed_object(properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema object with exactly ``properties``, every one required."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def verdict_object(spec: OutputSpec, *, no_na: bool = False) -> dict[str, Any]:
    """The schema of one verdict with its reason (``no_na``: NA is not an allowed label)."""
    key, verdict = verdict_schema(spec)
    if no_na and "enum" in verdict:
        verdict = {**verdict, "enum": [c for c in verdict["enum"] if c != "NA"]}
    reason = {"type": "string"}
    # a seed that names its fields asks for the reason first (think, then answer)
    properties = (
        {spec.reason_field: reason, key: verdict}
        if spec.verdict_field
        else {key: verdict, spec.reason_field: reason}
    )
    return closed_object(properties)


def response_schema(spec: OutputSpec) -> dict[str, Any] | None:
    """JSON schema for structured output: a score (or one of the allowed labels) and a reason.

    None when the rule's answer is not JSON (``score_lines``): asking for JSON would
    contradict the prompt.
    """
    if spec.answer_format == "score_lines":
        return None
    schema = verdict_object(spec)
    if spec.answer_key:
        return closed_object({spec.answer_key: schema})
    return schema


class Quoted:
    """What the judge was shown of the trace (the rendered variables), to tell a verdict the
    judge wrote from one it copied: a verdict whose own text occurs in the trace is ignored,
    so a score injected through the trace and quoted back cannot win."""

    def __init__(self, texts: Sequence[str] = ()) -> None:
        self._haystack = "\x00".join(_fold(t) for t in texts if t)
        self.skipped = 0  # verdicts skipped as copied, in the answer being parsed

    def fresh(self) -> Quoted:
        """The same trace text for parsing another answer (no verdict skipped yet); the
        folding is done once per call, not once per answer."""
        reading = Quoted()
        reading._haystack = self._haystack
        return reading

    def copied(self, fragment: str) -> bool:
        folded = _fold(fragment)
        if len(folded) >= 4 and folded in self._haystack:
            self.skipped += 1
            return True
        return False

    def none_of_its_own(self, what: str) -> InvalidAnswer:
        """The error for an answer without a verdict of its own."""
        if self.skipped:
            return InvalidAnswer(
                f"{what}: every verdict in the answer is quoted from the trace, none is the "
                "judge's own"
            )
        return InvalidAnswer(what)


NOTHING_QUOTED = Quoted()


def _fold(text: str) -> str:
    """Case, punctuation and spacing do not tell a copy from its original."""
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())


_NOT_WORD = re.compile(r"[^\w.]+")


def unquoted(found: list[tuple[T, str]], quoted: Quoted) -> list[T]:
    """The candidates whose text the judge wrote itself."""
    return [item for item, text in found if not quoted.copied(text)]


def json_objects(text: str) -> list[tuple[dict[str, Any], str]]:
    """Every top-level JSON object embedded in ``text``, in order, with its own text."""
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
                        found.append((obj, text[start : i + 1]))
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


def _bare(choice: str) -> str:
    """A choice without case, spaces or punctuation (its letters and digits)."""
    return re.sub(r"[\W_]+", "", choice).lower() or _lower(choice)


def _lower(choice: str) -> str:
    return choice.strip().lower()


def validate(spec: OutputSpec, verdict: Any, reason: Any) -> ParsedAnswer:
    """Check a verdict against the rule's output spec and turn it into a raw value."""
    reason_text = reason if isinstance(reason, str) else None
    if spec.type == "choice":
        assert spec.choices
        # "yes", "Yes." and "N/A" are YES and NA: case and punctuation do not change the
        # answer (unless the choices differ only in them: then case alone does not)
        fold = _bare if len({_bare(k) for k in spec.choices}) == len(spec.choices) else _lower
        choices = {fold(k): k for k in spec.choices}
        if not isinstance(verdict, str) or fold(verdict) not in choices:
            raise InvalidAnswer(f"answer {verdict!r} is not one of {list(spec.choices)}")
        label = choices[fold(verdict)]
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


def parse_answer(spec: OutputSpec, content: str, quoted: Quoted = NOTHING_QUOTED) -> ParsedAnswer:
    """Parse a judge's answer: JSON (the last object that carries a verdict), then text.
    Verdicts copied from the trace (``quoted``) are not the judge's and are skipped.

    A rule with an ``answer_key`` accepts only its own shape, ``{"<key>": {"score", "reason"}}``.
    """
    if spec.answer_format == "score_lines":
        return parse_score_lines(spec, content, quoted)
    objects = unquoted(json_objects(content), quoted)
    if spec.verdict_field:
        for obj in reversed(objects):
            if spec.verdict_field in obj:
                return validate(spec, obj[spec.verdict_field], obj.get(spec.reason_field))
        raise quoted.none_of_its_own(
            f'expected {{"{spec.reason_field}": ..., "{spec.verdict_field}": ...}}'
        )
    if spec.answer_key:
        for obj in reversed(objects):
            inner = obj.get(spec.answer_key)
            if isinstance(inner, dict) and "score" in inner:
                return validate(spec, inner["score"], inner.get("reason"))
        raise quoted.none_of_its_own(
            f'expected {{"{spec.answer_key}": {{"score": ..., "reason": ...}}}}'
        )
    for obj in reversed(objects):
        if found := _verdict_from_object(obj):
            return validate(spec, *found)
    if spec.type == "choice":
        assert spec.choices
        pattern = r"\b(" + "|".join(re.escape(c) for c in spec.choices) + r")\b"
        # a choice word is judged with the words before it on its line ("finally: no"), so
        # a sentence quoted from the trace that happens to hold the word is told apart
        choices = unquoted(
            [(m.group(1), _words_before(content, m)) for m in re.finditer(pattern, content, re.I)],
            quoted,
        )
        if choices:
            return validate(spec, choices[-1], content.strip())
        raise quoted.none_of_its_own(f"no choice among {list(spec.choices)} in the answer")
    scores = unquoted([(m.group(1), m.group(0)) for m in _SCORE_LINE.finditer(content)], quoted)
    matches = scores or _BARE_NUMBER.findall(content)
    if not matches:
        raise quoted.none_of_its_own("no score in the answer")
    return validate(spec, matches[-1], _reason_from_text(content))


def _words_before(content: str, match: re.Match[str], words: int = 3) -> str:
    """``match`` with up to ``words`` words before it on its line."""
    line_start = content.rfind("\n", 0, match.start()) + 1
    before = content[line_start : match.start()].split()[-words:]
    return " ".join([*before, match.group(0)])


def _reason_from_text(content: str) -> str:
    match = re.search(
        r"\b(?:reason|justification|rationale)\b\s*[:=]\s*(.+)", content, re.IGNORECASE | re.DOTALL
    )
    return (match.group(1) if match else content).strip()


_SCORE_LINE_EXACT = re.compile(
    r"^[ \t*]*score[ \t*]*:[ \t*]*(" + _NUMBER + r")[ \t*]*$", re.I | re.M
)
_JUSTIFICATION_LINE = re.compile(r"^[ \t*]*justification[ \t*]*:[ \t*]*(.*)", re.I | re.M | re.S)


def parse_score_lines(
    spec: OutputSpec, content: str, quoted: Quoted = NOTHING_QUOTED
) -> ParsedAnswer:
    """The two-line answer MLflow's metrics ask for: ``score: <n>`` then ``justification: ...``.

    The last ``score:`` line the judge wrote itself wins (one copied from the trace does not);
    the justification is the text after the ``justification:`` label that follows it, to the
    end of the answer.
    """
    scores = unquoted([(m, m.group(0)) for m in _SCORE_LINE_EXACT.finditer(content)], quoted)
    if not scores:
        raise quoted.none_of_its_own("no 'score: <number>' line in the answer")
    last = scores[-1]
    justification = _JUSTIFICATION_LINE.search(content, last.end())
    reason = justification.group(1).strip() if justification else None
    return validate(spec, last.group(1), reason)
