"""A rule's output spec as a question of OpenAI's Decisions API, and its answer as a verdict
(issue 46, item 1).

The Decisions API (``POST /v1/decisions``; the installed openai SDK's ``client.decisions``,
types in ``openai/types/decision_create_params.py`` and ``openai/types/decision.py``) answers
typed questions with probabilities and no text:

- a yes/no rule (a choice output whose two labels are yes and no, or true and false) is a
  ``predicate``: the probability that the statement holds;
- any other choice rule is a ``choice`` with the rule's labels as its values: a probability
  for each;
- an integer scale (``integer: true``, at most 255 values) is a ``score`` with one level per
  value, labelled with the rule's label for it where it has one (``labels``) and the value
  otherwise: a probability for each level, and the expected score.

A continuous scale is asked on the levels it declares (``output.levels``: a score whose
levels are those values); without them it cannot be asked this way (``question_of`` says so). The published value is the most probable answer; the verdict keeps every
probability, the confidence (the provider's, or for a predicate the larger of p and 1 - p)
and the expected value on the rule's scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ruleset.specs import OutputSpec

MAX_LEVELS = 255  # the API's most choices for a question (levels: as many)


class NotAskableError(ValueError):
    """The rule's output cannot be put as a decision question."""


@dataclass(frozen=True)
class DecisionVerdict:
    """What a decision model said of one question: the value published (on the rule's raw
    scale) and its label, each answer's probability by label, the confidence, and the
    expected value on the raw scale (None for a choice without an order)."""

    value: float
    label: str
    probabilities: dict[str, float]
    confidence: float
    expected: float | None


def _predicate_labels(output: OutputSpec) -> tuple[str, str] | None:
    """The rule's (yes, no) labels, if it is a yes/no rule."""
    if output.type != "choice" or not output.choices or len(output.choices) != 2:
        return None
    by_lower = {label.lower(): label for label in output.choices}
    for yes, no in (("yes", "no"), ("true", "false")):
        if set(by_lower) == {yes, no}:
            return by_lower[yes], by_lower[no]
    return None


def levels_of(output: OutputSpec) -> list[tuple[str, float]]:
    """A scale's levels, lowest first: (label, raw value): an integer scale's values, or the
    levels a continuous one declares (``output.levels``)."""
    if output.type == "numeric" and output.levels is not None:
        return [(f"{value:g}", value) for value in output.levels]
    if output.type != "numeric" or not output.integer:
        raise NotAskableError(
            "a continuous scale has no levels to ask a decision model about: declare them "
            "(output.levels), make the output integer (integer: true), or a choice"
        )
    assert output.min is not None and output.max is not None
    low, high = int(output.min), int(output.max)
    if high - low + 1 > MAX_LEVELS:
        raise NotAskableError(f"a scale of more than {MAX_LEVELS} values cannot be asked as levels")
    labels = output.labels or {}
    return [(labels.get(value, str(value)), float(value)) for value in range(low, high + 1)]


def question_of(output: OutputSpec, instructions: str, name: str) -> dict[str, Any]:
    """The decision question (``openai.types.decision_create_params.Question``) that asks
    ``instructions`` of the input in the shape of ``output``."""
    if _predicate_labels(output) is not None:
        return {"type": "predicate", "name": name, "instructions": instructions}
    if output.type == "choice":
        assert output.choices
        choices = [{"value": label} for label in output.choices]
        return {"type": "choice", "name": name, "instructions": instructions, "choices": choices}
    levels = [{"label": label} for label, _ in levels_of(output)]
    return {"type": "score", "name": name, "instructions": instructions, "levels": levels}


def verdict_of(output: OutputSpec, answer: dict[str, Any]) -> DecisionVerdict | None:
    """The verdict an answer (``openai.types.decision.Answer``, as a dict) gives ``output``;
    None for a refusal (the model declined this question)."""
    kind = answer.get("type")
    if kind == "refusal":
        return None
    if kind == "predicate":
        labels = _predicate_labels(output)
        assert labels is not None and output.choices
        yes, no = labels
        p = float(answer["probability"])
        label = yes if p >= 0.5 else no
        expected = p * output.choices[yes] + (1 - p) * output.choices[no]
        return DecisionVerdict(
            output.choices[label], label, {yes: p, no: 1 - p}, max(p, 1 - p), expected
        )
    if kind == "choice":
        assert output.choices
        probabilities = {str(c["value"]): float(c["probability"]) for c in answer["probabilities"]}
        label = str(answer["choice"])
        if label not in output.choices:
            raise ValueError(f"the decision model chose {label!r}, not one of the rule's labels")
        expected = sum(output.choices.get(k, 0.0) * p for k, p in probabilities.items())
        return DecisionVerdict(
            output.choices[label], label, probabilities, float(answer["confidence"]), expected
        )
    if kind == "score":
        raw_of = dict(levels_of(output))
        probabilities = {str(p["label"]): float(p["probability"]) for p in answer["probabilities"]}
        unknown = set(probabilities) - set(raw_of)
        if unknown:
            raise ValueError(f"the decision model answered levels the rule has not: {unknown}")
        label = max(probabilities, key=lambda level: probabilities[level])
        expected = sum(raw_of[level] * p for level, p in probabilities.items())
        return DecisionVerdict(
            raw_of[label], label, probabilities, float(answer["confidence"]), expected
        )
    raise ValueError(f"not a decision answer: {kind!r}")
