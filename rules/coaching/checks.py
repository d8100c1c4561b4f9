"""Checks from the coaching-transcript rubric (seed 004): the parts mechanical enough to count.

Each measures one criterion's pattern over a whole transcript (the thread document's
``messages``) and is published as its own score; the judge's answer for that criterion is
never changed by them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from statistics import median
from typing import Any

from pydantic import Field

from stream.pack import CheckParams, CheckResult, NotApplicable, check, render_value, words


def _texts(messages: Any, role: str) -> list[str]:
    if not isinstance(messages, list):
        return []
    return [
        render_value(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == role and m.get("content") is not None
    ]


def _responses(messages: Any) -> list[str]:
    responses = _texts(messages, "assistant")
    if not responses:
        raise NotApplicable("the transcript has no assistant responses")
    return responses


def _share(count: int, total: int, what: str) -> CheckResult:
    return CheckResult(count / total, f"{count} of {total} {what}")


@check("question_endings", variables=("messages",))
def question_endings(values: Mapping[str, Any], params: Any) -> CheckResult:
    """Share of responses whose last sentence is a question (CP5 fails when it is every one)."""
    responses = _responses(values["messages"])
    asking = sum(1 for r in responses if r.rstrip().rstrip("\"')*_ ").endswith("?"))
    return _share(asking, len(responses), "responses end with a question")


class OpenerParams(CheckParams):
    opener_words: int = Field(default=3, ge=1, description="Words that make a response's opener")
    stock_openers: list[str] = Field(default_factory=list, description="Formulaic openings")


def _opener(text: str, n: int) -> str:
    return " ".join(w.lower().strip(".,!?;:") for w in words(text)[:n])


@check("repeated_openers", variables=("messages",), params=OpenerParams)
def repeated_openers(values: Mapping[str, Any], params: Any) -> CheckResult:
    """Share of responses that open with a stock phrase or with the same first words as
    another response (CP4: "minimal/no repeated validation phrases")."""
    assert isinstance(params, OpenerParams)
    responses = _responses(values["messages"])
    openers = [_opener(r, params.opener_words) for r in responses]
    counts = Counter(o for o in openers if o)
    stock = [re.sub(r"\s+", " ", s.lower()) for s in params.stock_openers]
    flagged = [
        o
        for o, r in zip(openers, responses, strict=True)
        if counts[o] > 1
        or any(re.sub(r"\s+", " ", r.lower()).lstrip().startswith(s) for s in stock)
    ]
    result = _share(
        len(flagged), len(responses), "responses open formulaically or repeat an opener"
    )
    if flagged:
        common = ", ".join(f'"{o}" x{n}' for o, n in Counter(flagged).most_common(3))
        result = CheckResult(result.raw_value, f"{result.reason}: {common}")
    return result


class LengthParams(CheckParams):
    max_ratio: float = Field(default=3.0, gt=0, description="Response words per user word")


@check("length_calibration", variables=("messages",), params=LengthParams)
def length_calibration(values: Mapping[str, Any], params: Any) -> CheckResult:
    """Share of exchanges whose response runs over ``max_ratio`` times the user's message
    (CP2: "Match response length to user message length (not 3-4x longer)")."""
    assert isinstance(params, LengthParams)
    messages = values["messages"]
    ratios = []
    last_user: str | None = None
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        text = render_value(message.get("content"))
        if message.get("role") == "user":
            last_user = text
        elif message.get("role") == "assistant" and last_user is not None:
            ratios.append(len(words(text)) / max(1, len(words(last_user))))
            last_user = None
    if not ratios:
        raise NotApplicable("the transcript has no user message followed by a response")
    over = sum(1 for r in ratios if r > params.max_ratio)
    return CheckResult(
        over / len(ratios),
        f"{over} of {len(ratios)} responses over {params.max_ratio:g}x the user's length "
        f"(median {median(ratios):.1f}x)",
    )
