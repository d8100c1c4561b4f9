"""A local decision model speaking OpenAI's Decisions API, with scripted probabilities.

A real HTTP server (``threaded_app.ThreadedApp``) answering ``POST /v1/decisions`` as the
installed openai SDK's types describe the contract (``openai/types/decision_create_params.py``
for the request, ``openai/types/decision.py`` for the answer):

- the request: ``model`` (the SDK's docstring: "Only `gpt-6-luna` is supported"; any other is
  a 400 naming ``model``), ``input`` (a text or a list of messages), 1-400 ``questions``, each a
  ``predicate``, a ``choice`` (2-255 unique choices) or a ``score`` (its ordered ``levels``);
  a request outside that is a 400 ``invalid_request_error`` naming the parameter, as OpenAI's
  errors do;
- the answer: ``answers`` in question order (a predicate's ``probability``; a choice's
  ``choice``, ``confidence`` and a probability for every choice; a score's ``score``, the
  expected level index, ``confidence`` and a probability for every level with its ``label``
  and ``value``, the level's index), or a ``refusal`` for a question the model declines (the
  others still answered); ``model``; ``usage`` with input tokens (the input's and the
  questions' characters / 4), no output tokens, and the input tokens served from the prompt
  cache (``cached_tokens``, set by the test);
- a provider's trouble: a 429 with ``Retry-After`` (``rate_limit_next``), a 5xx (``fail_next``).

Probabilities are scripted per question: the first script whose ``match`` occurs in the
question's instructions or name answers (a predicate's probability of yes; a choice's or a
score's probability by value or label; ``REFUSE`` to decline). An unscripted question gets the
default: a predicate 0.5, a choice or score uniform (the least confident answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from scripted_judge import MockJudge
from threaded_app import ThreadedApp

from stream.ruleset.schema import LLMJudgeRule

MODEL = "gpt-6-luna"  # the one model the SDK's types say is supported
REFUSE = "refuse"


@dataclass
class Scripted:
    match: str
    answer: float | Mapping[str, float] | str  # p(yes), probabilities, or REFUSE


def _invalid(message: str, param: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "param": param}},
        status=400,
    )


class DecisionsDouble(ThreadedApp):
    """Start with ``with DecisionsDouble() as model:``; point the client at ``base_url``."""

    name = "decisions-double"

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.scripts: list[Scripted] = []
        self.requests: list[dict[str, Any]] = []
        self.cached_tokens = 0
        self._rate_limits: list[float] = []  # Retry-After of the next 429s
        self._failures: list[int] = []  # statuses of the next 5xx

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, match: str, answer: float | Mapping[str, float] | str) -> None:
        self.scripts.insert(0, Scripted(match, answer))  # newest first

    def rate_limit_next(self, retry_after_s: float = 1.0) -> None:
        self._rate_limits.append(retry_after_s)

    def fail_next(self, status: int = 503) -> None:
        self._failures.append(status)

    async def _decisions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self._rate_limits:
            wait = self._rate_limits.pop(0)
            return web.json_response(
                {
                    "error": {
                        "message": "Rate limit reached for requests",
                        "type": "requests",
                        "code": "rate_limit_exceeded",
                    }
                },
                status=429,
                headers={"retry-after": f"{wait:g}"},
            )
        if self._failures:
            return web.json_response(
                {"error": {"message": "the service is unavailable", "type": "server_error"}},
                status=self._failures.pop(0),
            )
        if body.get("model") != MODEL:
            return _invalid(f"Only {MODEL} is supported", "model")
        if "input" not in body or not isinstance(body["input"], str | list):
            return _invalid("input must be a string or a list of input items", "input")
        questions = body.get("questions")
        if not isinstance(questions, list) or not 1 <= len(questions) <= 400:
            return _invalid("Ask 1-400 questions about the input", "questions")
        answers = []
        for n, question in enumerate(questions):
            answer = self._answer(question, n)
            if isinstance(answer, web.Response):
                return answer
            answers.append(answer)
        text = str(body["input"]) + "".join(str(q) for q in questions)
        tokens = len(text) // 4
        usage = {
            "input_tokens": tokens,
            "input_tokens_details": {
                "cache_write_tokens": 0,
                "cached_tokens": min(self.cached_tokens, tokens),
            },
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens,
        }
        return web.json_response({"answers": answers, "model": MODEL, "usage": usage})

    def _answer(self, question: Any, n: int) -> dict[str, Any] | web.Response:
        where = f"questions[{n}]"
        if not isinstance(question, dict) or not question.get("instructions"):
            return _invalid("a question needs its instructions", f"{where}.instructions")
        kind, name = question.get("type"), question.get("name")
        text = f"{name or ''} {question['instructions']}"
        scripted = next((s.answer for s in self.scripts if s.match in text), None)
        if scripted == REFUSE:
            return {"type": "refusal", "name": name}
        if kind == "predicate":
            p = scripted if isinstance(scripted, float | int) else 0.5
            return {"type": "predicate", "name": name, "probability": float(p)}
        if kind == "choice":
            values = [c.get("value") for c in question.get("choices") or []]
            if not 2 <= len(values) <= 255 or len(set(map(repr, values))) != len(values):
                return _invalid("Provide between 2 and 255 unique choices", f"{where}.choices")
            probabilities = self._spread([str(v) for v in values], scripted)
            best = max(range(len(values)), key=lambda i: probabilities[i])
            return {
                "type": "choice",
                "name": name,
                "choice": values[best],
                "confidence": probabilities[best],
                "probabilities": [
                    {"value": v, "probability": p}
                    for v, p in zip(values, probabilities, strict=True)
                ],
            }
        if kind == "score":
            labels = [str(level.get("label")) for level in question.get("levels") or []]
            if len(labels) < 2:
                return _invalid("A score needs at least two levels", f"{where}.levels")
            probabilities = self._spread(labels, scripted)
            best = max(range(len(labels)), key=lambda i: probabilities[i])
            return {
                "type": "score",
                "name": name,
                "score": sum(i * p for i, p in enumerate(probabilities)),
                "confidence": probabilities[best],
                "probabilities": [
                    {"label": label, "value": i, "probability": p}
                    for i, (label, p) in enumerate(zip(labels, probabilities, strict=True))
                ],
            }
        return _invalid(f"unknown question type {kind!r}", f"{where}.type")

    @staticmethod
    def _spread(options: list[str], scripted: Any) -> list[float]:
        """Each option's probability: the scripted ones, the rest of 1 shared by the others."""
        if not isinstance(scripted, Mapping):
            return [1 / len(options)] * len(options)
        given = {k: float(v) for k, v in scripted.items() if k in options}
        rest = [o for o in options if o not in given]
        left = max(0.0, 1 - sum(given.values()))
        return [given.get(o, left / len(rest) if rest else 0.0) for o in options]

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/decisions", self._decisions)]


class JudgeAndDecisions(MockJudge):
    """The scripted chat judge (``scripted_judge.MockJudge``) and a decision model
    (``decisions``, scripted as a ``DecisionsDouble``) on one endpoint, as OpenAI serves
    both under one base URL."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.decisions = DecisionsDouble()  # its handler only: served here

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/v1/decisions", self.decisions._decisions)]


def yes_no_rule(judge: dict[str, Any], prompt: str) -> LLMJudgeRule:
    """A yes/no ``llm_judge`` rule (``answer_correct``) of a trace's last question and its
    answer, judged as ``judge`` says: what the tests of decision rules and cascades ask."""
    return LLMJudgeRule.model_validate(
        {
            "id": "answer_correct",
            "pack": "p",
            "version": 1,
            "kind": "llm_judge",
            "scope": "trace",
            "description": "Is the assistant's answer correct?",
            "prompt": prompt,
            "variables": {
                "question": {"path": "input.messages[-1].content"},
                "answer": {"path": "output.content"},
            },
            "output": {"type": "choice", "choices": {"yes": 1.0, "no": 0.0}},
            "judge": judge,
        }
    )
