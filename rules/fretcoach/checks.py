"""Hard constraints from FretCoach's live-coach and studio recommendation prompts.

Each check measures what its judge prompt spells out as a MUST, without a judge:
the value is the share of constraints met, the label is pass (all met) or fail,
and the reason names every constraint that failed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from stream.pack import CheckParams, CheckResult, NotApplicable, check, mentions, sentences, words


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class Constraint:
    name: str
    ok: bool
    detail: str = ""


def constraints_result(results: list[Constraint]) -> CheckResult:
    passed = sum(c.ok for c in results)
    failed = [f"{c.name} ({c.detail})" if c.detail else c.name for c in results if not c.ok]
    reason = (
        f"all {len(results)} constraints met"
        if not failed
        else f"{passed}/{len(results)} constraints met; failed: " + "; ".join(failed)
    )
    return CheckResult(
        raw_value=passed / len(results), label="pass" if not failed else "fail", reason=reason
    )


@lru_cache(maxsize=8)  # a result is frozen: one to share for each count
def all_met(count: int) -> CheckResult:
    """``constraints_result`` of ``count`` constraints that all hold, without building them:
    most traces pass, and their constraints' names and details would go unread."""
    return CheckResult(raw_value=1.0, label="pass", reason=f"all {count} constraints met")


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


# --- studio_live_coach_feedback_quality -------------------------------------------------


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(description="How the metric is written in the coach's input")
    names: list[str] = Field(description="Words that count as naming this metric in feedback")
    fix_keywords: list[str] = Field(description="Words of a fix aligned with this metric")


class LiveCoachParams(CheckParams):
    max_words: int = 30
    max_sentences: int = 2
    metrics: dict[str, MetricSpec]

    @cached_property
    def readers(self) -> tuple[tuple[str, re.Pattern[str], tuple[str, str, str]], ...]:
        """Per metric: its key, how its label reads in text, and the JSON keys that name it
        (its key, its label lowercased, then with underscores); built once per rule."""
        out = []
        for key, spec in self.metrics.items():
            low = spec.label.lower()
            out.append((key, _metric_pattern(spec.label), (key, low, low.replace(" ", "_"))))
        return tuple(out)

    @cached_property
    def names(self) -> dict[str, list[str]]:
        """Metric key -> the words that name it."""
        return {key: spec.names for key, spec in self.metrics.items()}

    @cached_property
    def fixes(self) -> dict[str, list[str]]:
        """Metric key -> the words of a fix aligned with it."""
        return {key: spec.fix_keywords for key, spec in self.metrics.items()}


def _mentions_any(text: str, keys: list[str], phrases: Mapping[str, list[str]]) -> bool:
    """Whether ``text`` mentions any phrase of any of the metrics ``keys``."""
    for key in keys:  # noqa: SIM110 - a loop: any() of a generator costs more, on every trace
        if mentions(text, phrases[key]):
            return True
    return False


FEEDBACK_SHAPE = re.compile(
    r"^(?P<good>.+?),?\s+but\s+(?P<weak>.+?)\s+[-–—]\s+(?P<fix>.+)$", re.IGNORECASE | re.DOTALL
)
NUMBER = r"(?P<value>\d+(?:\.\d+)?)\s*(?P<pct>%)?"


@lru_cache(maxsize=256)
def _metric_pattern(label: str) -> re.Pattern[str]:
    """``Pitch Accuracy: 82%`` (also ``pitch_accuracy=0.82``) for one metric label."""
    name = re.escape(label).replace(r"\ ", r"[\s_]+")
    return re.compile(name + r"\s*[:=]?\s*" + NUMBER, re.IGNORECASE)


def parse_metrics(value: Any, params: LiveCoachParams) -> dict[str, float]:
    """Read the player's metrics from the coach's input (text like ``Pitch Accuracy: 82%``
    or a JSON object keyed by metric key or label). Percentages and 0..1 fractions agree."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            decoded = orjson.loads(value)
            if isinstance(decoded, dict):
                value = decoded
        except orjson.JSONDecodeError:
            pass
    found: dict[str, float] = {}
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        for key, _, candidates in params.readers:
            for candidate in candidates:
                if isinstance(lowered.get(candidate), int | float):
                    found[key] = float(lowered[candidate])
                    break
    else:
        text = as_text(value)
        for key, pattern, _ in params.readers:
            match = pattern.search(text)
            if match:
                found[key] = float(match["value"])
    if found and max(found.values()) > 1.0:
        found = {k: v / 100.0 for k, v in found.items()}
    return found


@check("live_coach_feedback_format", variables=("input", "output"), params=LiveCoachParams)
def live_coach_feedback_format(values: Mapping[str, Any], params: Any) -> CheckResult:
    """1-2 sentences, at most 30 words, "[good], but [weak] - [fix]", strongest and weakest
    metric named where they belong, and a fix aligned with the weakest metric."""
    assert isinstance(params, LiveCoachParams)
    feedback = as_text(values["output"]).strip()
    metrics = parse_metrics(values["input"], params)
    if len(metrics) < 2:
        raise NotApplicable(
            f"could not read at least two player metrics ({', '.join(m.label for m in params.metrics.values())}) from the input"
        )
    top, bottom = max(metrics.values()), min(metrics.values())
    strongest = [k for k, v in metrics.items() if v == top]
    weakest = [k for k, v in metrics.items() if v == bottom]

    n_sentences, n_words = len(sentences(feedback)), len(words(feedback))
    shape = FEEDBACK_SHAPE.match(feedback)
    good = shape["good"] if shape else ""
    weak = shape["weak"] if shape else ""
    fix = shape["fix"] if shape else feedback
    specs = params.metrics
    met = (
        1 <= n_sentences <= params.max_sentences,
        n_words <= params.max_words,
        shape is not None,
        shape is not None and _mentions_any(good, strongest, params.names),
        shape is not None and _mentions_any(weak or feedback, weakest, params.names),
        _mentions_any(fix, weakest, params.fixes),
    )
    if all(met):
        return all_met(len(met))
    label = {k: specs[k].label for k in specs}
    results = [
        Constraint(
            name=f"1-{params.max_sentences} sentences",
            ok=met[0],
            detail=f"{n_sentences} sentences",
        ),
        Constraint(
            name=f"at most {params.max_words} words",
            ok=met[1],
            detail=f"{n_words} words",
        ),
        Constraint(
            name='"[good], but [weak] - [fix]" format',
            ok=met[2],
            detail="no '<good>, but <weak> - <fix>' structure",
        ),
        Constraint(
            name="strongest metric named as the good part",
            ok=met[3],
            detail=f"expected {' or '.join(label[k] for k in strongest)}",
        ),
        Constraint(
            name="weakest metric named as the weak part",
            ok=met[4],
            detail=f"expected {' or '.join(label[k] for k in weakest)}",
        ),
        Constraint(
            name="fix aligned with the weakest metric",
            ok=met[5],
            detail=f"expected a fix about {' or '.join(', '.join(specs[k].fix_keywords[:2]) for k in weakest)}",
        ),
    ]
    return constraints_result(results)


# --- studio_immediate_actionability ---------------------------------------------------


class ActionabilityParams(CheckParams):
    supported_scale_types: list[str]
    known_scale_types: list[str] = Field(
        description="Scale types to recognise in text, supported or not"
    )
    difficulty_parameters: list[str] = Field(
        description="Difficulty/control parameters; the seed's 'e.g.': one of them is enough"
    )
    practice_words: list[str] = Field(
        description="If none of these appear, the response asks for no practice action"
    )


ACCIDENTAL = r"(?:#|b|♯|♭|-sharp|-flat|\s+sharp|\s+flat)?"


@lru_cache(maxsize=16)
def _scale_pattern(types: tuple[str, ...]) -> re.Pattern[str]:
    """A scale as a player writes it: a note (any case), an accidental, then a quality or a
    scale type ("A minor", "c# natural minor", "E pentatonic"). A lone lowercase "a" before
    a scale type reads as the article ("a pentatonic scale"), so it only counts before
    "major" or "minor"."""
    kinds = "|".join(re.escape(t) for t in sorted(types, key=len, reverse=True))
    note = (
        r"(?P<note>[A-G]"
        + ACCIDENTAL
        + r"|[b-g]"
        + ACCIDENTAL
        + r"|a"
        + ACCIDENTAL
        + r"(?=\s+(?:major|minor)\b))"
    )
    return re.compile(r"(?<![A-Za-z0-9])" + note + r"\s+(?P<kind>major|minor|" + kinds + r")\b")


def _recommendation_fields(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        # the first "{" to the last "}": stripping the text first would find the same pair
        start, end = value.find("{"), value.rfind("}")
        if start != -1 and end > start:
            try:
                decoded = orjson.loads(value[start : end + 1])
            except orjson.JSONDecodeError:
                return None
            return decoded if isinstance(decoded, dict) else None
        return None
    return value if isinstance(value, dict) else None


def _named_scale(fields: Mapping[str, Any]) -> Any:
    """The first of scale_name, scale, root and key that holds a value, else ""."""
    for key in ("scale_name", "scale", "root", "key"):
        if fields.get(key):
            return fields[key]
    return ""


def _any_set(fields: Mapping[str, Any], keys: list[str]) -> bool:
    """Whether any of ``keys`` holds a value (not null) in ``fields``."""
    for key in keys:  # noqa: SIM110 - as in _mentions_any
        if fields.get(key) is not None:
            return True
    return False


EMPTY = CheckResult(raw_value=0.0, label="fail", reason="empty response: no recommendation")
NO_PRACTICE = CheckResult(
    raw_value=1.0,
    label="not_applicable",
    reason="no practice action in the response (acknowledgement-only): scored 1.0 as the rule specifies",
)


@check("practice_recommendation_actionability", variables=("output",), params=ActionabilityParams)
def practice_recommendation_actionability(values: Mapping[str, Any], params: Any) -> CheckResult:
    """One practice goal: a scale named with its type, only supported scale types, and a
    difficulty parameter set. An empty response fails; one that asks for no practice
    (acknowledgement-only) scores 1.0, as the rule says."""
    assert isinstance(params, ActionabilityParams)
    output = values["output"]
    text = as_text(output)
    fields = _recommendation_fields(output)

    if not fields and not text.strip():
        return EMPTY
    if not fields and not mentions(text, params.practice_words):
        return NO_PRACTICE

    if fields is not None:
        flat = {str(k).lower(): v for k, v in fields.items()}
        named = _named_scale(flat)
        scale_type = flat.get("scale_type") or flat.get("type") or ""
        goals = len(named) if isinstance(named, list) else 1
        if isinstance(scale_type, list):
            goals = max(goals, len(scale_type))
            types_mentioned = [str(t).lower() for t in scale_type]
        else:
            types_mentioned = [str(scale_type).lower()] if scale_type else []
        scale_name = str(named)
        parameter_set = _any_set(flat, params.difficulty_parameters)
    else:
        low = text.lower()
        scales = {
            (m["note"].replace(" ", "").lower(), m["kind"].lower())
            for m in _scale_pattern(tuple(params.known_scale_types)).finditer(text)
        }
        scale_name = ", ".join(sorted(note for note, _ in scales))
        types_mentioned = [t for t in params.known_scale_types if mentions(low, [t])]
        goals = len(scales)
        parameter_set = any(mentions(low, [p]) for p in params.difficulty_parameters)

    unsupported = [t for t in types_mentioned if t not in params.supported_scale_types]
    met = (
        bool(scale_name),
        bool(types_mentioned),
        goals <= 1,
        bool(types_mentioned) and not unsupported,
        parameter_set,
    )
    if all(met):
        return all_met(len(met))
    results = [
        Constraint(name="scale name given", ok=met[0], detail="no scale name"),
        Constraint(name="scale type given", ok=met[1], detail="no scale type"),
        Constraint(
            name="a single practice goal",
            ok=met[2],
            detail=f"{goals} scales recommended",
        ),
        Constraint(
            name="only supported scale types",
            ok=met[3],
            detail=f"unsupported: {unsupported}" if unsupported else "no scale type",
        ),
        Constraint(
            name="a difficulty parameter set",
            ok=met[4],
            detail=f"none of {params.difficulty_parameters}",
        ),
    ]
    return constraints_result(results)
