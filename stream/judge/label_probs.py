"""A chat judge's verdict read through its log-probabilities (issue 46, item 2): the
probability the judge gave each of the rule's labels at the answer's verdict token.

An OpenAI-compatible endpoint asked for ``logprobs`` with ``top_logprobs`` (OpenAI, Azure,
vLLM, recent Ollama, most gateways) returns, for every token of the answer, its
log-probability and the most likely tokens it was chosen among
(``openai.types.chat.ChatCompletionTokenLogprob``). The verdict's position is found in the
tokens' own text (the verdict field of a JSON answer, a ``score:`` line, else the verdict's
last mention, as the answer parser reads it); the alternatives at that position are read as
the rule's labels (a yes/no or choice rule's labels, an integer scale's values, compared
without case, quotes and spacing). A label of several tokens is followed down its tokens
while the alternatives leave more than one label possible.

What is published (``details.decision``, the shape a decision model's verdict has):
``probabilities`` per label as the judge gave them (they sum to ``coverage``, under 1 where
the judge gave some probability to tokens that are no label, or where a label was not among
the top alternatives), ``confidence`` the probability of the label the judge wrote (the
published one: a rule's scores do not change when it asks for probabilities), and
``expected`` the mean on the rule's scale over the labels read (renormalised).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..engine.verdicts import ParsedAnswer
from ..ruleset.specs import OutputSpec
from .answers import verdict_schema
from .decision_questions import levels_of
from .transport import Answered, ChatRequest

SayOnce = Callable[[str, str, str], None]  # (what, model, message): ModelAdaptations.say_once

TOP_LOGPROBS = 20  # OpenAI's most alternatives per token (``top_logprobs``: 0-20)
MAX_LABEL_TOKENS = 8  # a label is followed down at most this many tokens
_LEAD = " \t\r\n\"'`*:"
_TAIL = " \t\r\n\"'`*,.;:}]"


@dataclass(frozen=True)
class LabelSpace:
    """The labels a rule's verdict is written as (what the judge types), each with the label
    it publishes and its raw value."""

    written: dict[str, tuple[str, float]]  # folded written form -> (label, raw value)
    field: str  # the verdict's field in a JSON answer

    @classmethod
    def of(cls, output: OutputSpec) -> LabelSpace:
        """The labels of a choice output or an integer scale (``NotAskableError`` else)."""
        field = verdict_schema(output)[0]
        if output.type == "choice":
            assert output.choices
            return cls({_fold(k): (k, v) for k, v in output.choices.items()}, field)
        levels = levels_of(output)  # the judge writes the number; the level's label published
        return cls({str(int(raw)): (label, raw) for label, raw in levels}, field)

    def matching(self, text: str, alternative: bool = False) -> list[str]:
        """The written labels ``text`` may be: every label it begins, and the label it is
        where it ends after it (a quote, a comma, a space: which may also go on into a longer
        label). An ``alternative`` token (one not followed down) that is a whole label is that
        label: a tokenizer writes a longer label that starts with it as another token
        (``10``, not ``1`` then ``0``)."""
        folded = _fold(text)
        if not folded:
            return []
        head = text.lstrip(_LEAD).lower()  # its end kept: "relevant " begins "relevant but"
        if alternative and folded in self.written and head == folded:
            return [folded]
        begun = [w for w in self.written if w.startswith(head)]
        if folded in self.written and folded not in begun and head != folded:
            begun.append(folded)  # the label, ended by a quote, a comma, a space
        return begun


def _fold(text: str) -> str:
    return text.lstrip(_LEAD).rstrip(_TAIL).lower()


# the keys the answer parser takes a verdict from after the rule's own (``answers.py``)
VERDICT_KEYS = ("score", "choice", "value", "result", "label")


def verdict_offset(text: str, field: str, written: str) -> int | None:
    """Where the verdict ``written`` starts in the answer ``text``: as the value of its JSON
    field (the rule's, else a key the parser reads a verdict from), else on a ``field:
    value`` line, else its last mention (the parser's last match)."""
    value = re.escape(written)
    keys = [field, *(k for k in VERDICT_KEYS if k != field)]
    patterns = [rf'"{re.escape(key)}"\s*:\s*"?\s*({value})' for key in keys]
    patterns.append(rf"\b{re.escape(field)}\b[\"'*\s]*[:=]\s*[\"'*]*\s*({value})")
    patterns.append(rf"(?<![\w.])({value})(?![\w.])")
    for pattern in patterns:
        found = list(re.finditer(pattern, text, re.IGNORECASE))
        if found:
            return found[-1].start(1)
    return None


def label_mass(
    space: LabelSpace, tokens: Sequence[dict[str, Any]], start: int
) -> dict[str, float] | None:
    """Each written label's probability, read from the tokens from the one holding character
    ``start`` on; None when the token the judge wrote there is no label's."""
    at, position = 0, 0
    while at < len(tokens) and position + len(tokens[at]["token"]) <= start:
        position += len(tokens[at]["token"])
        at += 1
    if at == len(tokens):
        return None
    lead = tokens[at]["token"][: start - position]
    mass: dict[str, float] = {}
    path, consumed = 1.0, ""
    for index in range(at, min(at + MAX_LABEL_TOKENS, len(tokens))):
        token = tokens[index]
        chosen, written = token["token"], _piece(token["token"], lead if index == at else "")
        for alternative in token.get("top_logprobs") or ():
            if alternative["token"] == chosen:
                continue
            labels = space.matching(consumed + _piece(alternative["token"], lead), True)
            if len(labels) == 1:
                mass[labels[0]] = mass.get(labels[0], 0.0) + path * math.exp(alternative["logprob"])
        labels = space.matching(consumed + written)
        probability = math.exp(token["logprob"])
        if len(labels) == 1:
            mass[labels[0]] = mass.get(labels[0], 0.0) + path * probability
            return mass
        if not labels:
            return None
        path, consumed, lead = path * probability, consumed + written, ""
    if _fold(consumed) in space.written:  # the answer ends with the label
        mass[_fold(consumed)] = mass.get(_fold(consumed), 0.0) + path
        return mass
    return None


def _piece(token: str, lead: str) -> str:
    """The part of ``token`` after the text before the verdict that the chosen token holds."""
    if lead.strip(_LEAD) and token.startswith(lead):
        return token[len(lead) :]
    return token


def read_probabilities(
    output: OutputSpec, answer: ParsedAnswer, text: str, tokens: Sequence[dict[str, Any]]
) -> dict[str, Any] | None:
    """``details.decision`` for ``answer``, read from the log-probabilities of its ``tokens``
    (their text, ``text``); None where the verdict's token cannot be found or read."""
    space = LabelSpace.of(output)
    written = _written(output, answer)
    if written is None or _fold(written) not in space.written:
        return None
    joined = "".join(token["token"] for token in tokens)
    start = verdict_offset(joined or text, space.field, written)
    if start is None:
        return None
    mass = label_mass(space, tokens, start)
    if not mass or _fold(written) not in mass:
        return None
    coverage = sum(mass.values())
    probabilities = {space.written[w][0]: p for w, p in mass.items()}
    expected = sum(space.written[w][1] * p for w, p in mass.items()) / coverage
    label = space.written[_fold(written)][0]
    return {
        "probabilities": probabilities,
        "confidence": mass[_fold(written)],
        "expected": expected,
        "label": label,
        "coverage": coverage,
        "source": "logprobs",
    }


def _written(output: OutputSpec, answer: ParsedAnswer) -> str | None:
    """The verdict as the judge wrote it: a choice's label, an integer scale's number."""
    if output.type == "choice":
        return answer.label
    if answer.raw_value != int(answer.raw_value):
        return None
    return str(int(answer.raw_value))


@dataclass
class ProbedRequest(ChatRequest):
    """A chat request asking for log-probabilities, with the output its verdict is read on."""

    output: OutputSpec | None = None


def probed(request: ChatRequest, output: OutputSpec) -> ProbedRequest:
    """``request`` asking for the top alternatives at each token of the answer."""
    fields = {name: getattr(request, name) for name in request.__dataclass_fields__}
    return ProbedRequest(**{**fields, "top_logprobs": TOP_LOGPROBS}, output=output)


def with_probabilities(
    request: ChatRequest, answer: Answered, parsed: ParsedAnswer, say_once: SayOnce
) -> ParsedAnswer:
    """``parsed`` with the probabilities its answer's tokens give (``details.decision``), for
    a request that asked for them; an endpoint that returned none is said once, and its
    verdicts go on without."""
    if not isinstance(request, ProbedRequest) or request.output is None:
        return parsed
    if request.top_logprobs is None or not answer.logprobs:
        say_once(
            "no logprobs",
            request.model,
            f"judge endpoint returns no log-probabilities for {request.model}: its verdicts "
            "carry no probabilities, and a cascade tier on it escalates every target",
        )
        return parsed
    decision = read_probabilities(request.output, parsed, answer.content or "", answer.logprobs)
    return replace(parsed, decision=decision) if decision is not None else parsed
