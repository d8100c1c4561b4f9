"""A local OpenAI-compatible judge with scripted answers, for tests, benchmarks and demos.

A real HTTP server (aiohttp, in a background thread) speaking ``POST /v1/chat/completions``.
Answers are scripted per prompt: the first script whose ``match`` text occurs in the prompt
(and, if it names one, of whose ``model``) answers, consuming its queued replies in order and
repeating the last one. It can add a fixed latency and enforce a requests-per-minute limit
with 429s, like a hosted provider. Asked for ``logprobs`` it answers the tokens'
log-probabilities as OpenAI does (a reply scripts the alternatives of its verdict's token),
or none, or refuses the parameter as reasoning models do (``logprobs``).

A prompt no script matches gets the ``default`` reply (tests rely on it); with
``answer_by_schema`` a document of the request's answer schema; with ``vary_answers`` (the
command line's judge, for the README's demo and a newcomer's own rules) an answer in the
format the request asks for, its values varied by the prompt (``varied_answers.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from threaded_app import ThreadedApp
from varied_answers import varied_answer


@dataclass
class Reply:
    """One scripted reply: an HTTP status, the message content, and extra headers."""

    content: str = '{"score": 1.0, "reason": "scripted"}'
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # tool calls instead of an answer: [(tool name, arguments)], as a tool-calling model asks
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None
    # log-probabilities, for a request asking for them: {token: {alternative: probability}}
    # gives the last ``token`` of the content its alternatives (itself among them); every
    # other token has probability 1 (see ``token_logprobs``)
    alternatives: dict[str, dict[str, float]] | None = None


_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


def token_logprobs(reply: Reply, top: int) -> list[dict[str, Any]]:
    """The content's tokens as OpenAI's ``choices[0].logprobs.content`` gives them
    (``ChatCompletionTokenLogprob``: token, bytes, logprob, and the ``top`` most likely
    tokens at that position with theirs, most likely first)."""
    tokens = _TOKEN.findall(reply.content)
    scripted = reply.alternatives or {}
    last = {t: i for i, t in enumerate(tokens) if t in scripted}
    out = []
    for i, token in enumerate(tokens):
        options = scripted[token] if last.get(token) == i else {token: 1.0}
        ranked = sorted(options.items(), key=lambda kv: -kv[1])[:top]
        out.append(
            {
                "token": token,
                "bytes": list(token.encode()),
                "logprob": math.log(options.get(token, 1e-9)),
                "top_logprobs": [
                    {"token": t, "bytes": list(t.encode()), "logprob": math.log(p)}
                    for t, p in ranked
                ],
            }
        )
    return out


@dataclass
class Script:
    match: str
    replies: list[Reply]
    served: int = 0
    model: str | None = None  # None: any model's request; else only this model's

    def next(self) -> Reply:
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        return reply


class TokenBucket:
    """Requests-per-minute limiter: ``rpm/60`` tokens a second, a burst of ``burst`` tokens."""

    def __init__(self, rpm: float, burst: float = 1.0) -> None:
        self.rate = rpm / 60.0
        self.capacity = max(1.0, burst)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def take(self) -> float | None:
        """None if a request may go now, else seconds until one may."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


class MockJudge(ThreadedApp):
    """Start with ``with MockJudge() as judge:``; point ``OPENAI_BASE_URL`` at ``judge.base_url``."""

    name = "mock-judge"
    handler_cancellation = True

    def __init__(
        self,
        *,
        default: Reply | None = None,
        latency_s: float = 0.0,
        rpm_limit: float | None = None,
        rpm_burst: float = 1.0,
        announce_limits: bool = True,
        reject_response_format: bool = False,
        logprobs: str = "answer",
        refuse_share: float = 0.0,
        port: int = 0,
        answer_by_schema: bool = False,
        vary_answers: bool = False,
    ) -> None:
        super().__init__(port)
        self.default = default or Reply()
        # a prompt no script matches, sent with an answer schema (structured output), is
        # answered with a document of that schema, as OpenAI's structured outputs are
        self.answer_by_schema = answer_by_schema
        # ... and with ``vary_answers``, in the format the request asks for (a schema, MLflow's
        # score lines, a tool call first), each value picked by a hash of the conversation
        self.vary_answers = vary_answers
        self.latency_s = latency_s
        self.bucket = TokenBucket(rpm_limit, rpm_burst) if rpm_limit else None
        self.rpm_limit = rpm_limit
        self.announce_limits = announce_limits
        self.reject_response_format = reject_response_format
        # asked for logprobs: "answer" them (OpenAI's chat completions), return "none" (an
        # endpoint without them answers ``logprobs: null``), "refuse" them as OpenAI's
        # reasoning models do (400 unsupported_parameter naming ``logprobs``), or
        # "refuse_plainly" as a gateway may (a 400 whose message names them, no code)
        self.logprobs = logprobs
        # a share of calls answered 429 whatever the load (a provider's noisy rate limiting)
        self.refuse_share = refuse_share
        self._refusals = random.Random(7)
        # prompt tokens a provider says it served from its prompt cache (OpenAI's
        # usage.prompt_tokens_details.cached_tokens); None: the usage has no such details
        self.cached_prompt_tokens: int | None = None
        self.scripts: list[Script] = []
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.max_concurrent = 0
        self.outage: tuple[float, int] | None = None  # (until, status): every call fails
        self._concurrent = 0
        self._ids = itertools.count(1)

    # --- scripting -------------------------------------------------------------------
    def script(self, match: str, *replies: Reply | str, model: str | None = None) -> Script:
        """Answer prompts holding ``match`` (of ``model`` only, if given) with ``replies``."""
        answers = [r if isinstance(r, Reply) else Reply(content=r) for r in replies]
        script = Script(match, answers, model=model)
        self.scripts.insert(0, script)  # newest first, so a test can override a default
        return script

    def go_down(self, seconds: float, status: int = 503) -> None:
        """Answer every call with ``status`` for ``seconds`` from now (a provider outage)."""
        self.outage = (time.monotonic() + seconds, status)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def prompts(self) -> list[str]:
        return [str(r["body"]["messages"][-1]["content"]) for r in self.requests]

    # --- HTTP --------------------------------------------------------------------------
    def _limit_headers(self) -> dict[str, str]:
        if not (self.rpm_limit and self.announce_limits):
            return {}
        assert self.bucket
        return {
            "x-ratelimit-limit-requests": str(int(self.rpm_limit)),
            "x-ratelimit-remaining-requests": str(int(self.bucket.tokens)),
        }

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        self._concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self._concurrent)
        try:
            if self.outage and time.monotonic() < self.outage[0]:
                self.statuses.append(self.outage[1])
                return web.json_response(
                    {"error": {"message": "the service is unavailable", "type": "overloaded"}},
                    status=self.outage[1],
                )
            if self.refuse_share and self._refusals.random() < self.refuse_share:
                self.statuses.append(429)
                # as OpenAI, Azure and Anthropic answer a 429: with Retry-After
                return web.json_response(
                    {"error": {"message": "Rate limit reached", "type": "requests"}},
                    status=429,
                    headers={"retry-after": "1"},
                )
            if self.bucket and (wait := self.bucket.take()) is not None:
                self.statuses.append(429)
                return web.json_response(
                    {
                        "error": {
                            "message": "Rate limit reached for requests",
                            "type": "requests",
                            "code": "rate_limit_exceeded",
                        }
                    },
                    status=429,
                    headers={"retry-after-ms": str(int(wait * 1000) + 1), **self._limit_headers()},
                )
            if self.reject_response_format and "response_format" in body:
                self.statuses.append(400)
                return web.json_response(
                    {
                        "error": {
                            "message": "Unrecognized request argument supplied: response_format",
                            "type": "invalid_request_error",
                        }
                    },
                    status=400,
                )
            if self.logprobs in ("refuse", "refuse_plainly") and body.get("logprobs"):
                self.statuses.append(400)
                message = "Unsupported parameter: 'logprobs' is not supported with this model."
                error = {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "logprobs",
                    "code": "unsupported_parameter",
                }
                if self.logprobs == "refuse_plainly":  # a gateway's words, no OpenAI code
                    error = {"message": "logprobs are not supported by this backend"}
                return web.json_response({"error": error}, status=400)
            prompt = str(body["messages"][-1]["content"])
            model = body.get("model")
            script = next(
                (s for s in self.scripts if s.match in prompt and s.model in (None, model)), None
            )
            reply = script.next() if script else self._unscripted(body)
            if self.latency_s or reply.delay_s:
                await asyncio.sleep(self.latency_s + reply.delay_s)
            self.statuses.append(reply.status)
            headers = {**self._limit_headers(), **reply.headers}
            if reply.status != 200:
                return web.json_response(
                    {"error": {"message": reply.content, "type": "server_error"}},
                    status=reply.status,
                    headers=headers,
                )
            completion = {
                "id": f"chatcmpl-mock-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "mock"),
                "choices": [self._choice(reply, body)],
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": len(reply.content) // 4,
                    "total_tokens": len(prompt) // 4 + len(reply.content) // 4,
                },
            }
            if self.cached_prompt_tokens is not None:
                cached = min(self.cached_prompt_tokens, len(prompt) // 4)
                completion["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
            return web.Response(
                body=orjson.dumps(completion), content_type="application/json", headers=headers
            )
        finally:
            self._concurrent -= 1

    def _unscripted(self, body: dict[str, Any]) -> Reply:
        if self.vary_answers and (answer := varied_answer(body)) is not None:
            return Reply(content=answer.content, tool_calls=answer.tool_calls)
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
        if not (self.answer_by_schema and isinstance(schema, dict)):
            return self.default
        return Reply(content=orjson.dumps(schema_example(schema, schema)).decode())

    # --- lifecycle ---------------------------------------------------------------------
    def _choice(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        if reply.tool_calls is None:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            choice = {"index": 0, "finish_reason": "stop", "message": message, "logprobs": None}
            if body.get("logprobs") and self.logprobs == "answer":
                top = int(body.get("top_logprobs") or 0)
                choice["logprobs"] = {"content": token_logprobs(reply, top), "refusal": None}
            return choice
        # ids drawn from the conversation they answer, not a counter: a trace's rules are
        # judged concurrently, and a varied answer hashes the conversation, ids included
        asked = hashlib.sha256(orjson.dumps(body.get("messages"))).hexdigest()[:12]
        calls = [
            {
                "id": f"call-{asked}-{n}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
            for n, (name, arguments) in enumerate(reply.tool_calls)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return {"index": 0, "finish_reason": "tool_calls", "message": message}

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions", self._completions)]


def schema_example(schema: dict[str, Any], root: dict[str, Any]) -> Any:
    """A document that satisfies ``schema`` (the JSON Schema subset OpenAI's structured outputs
    accept: objects, arrays, enums, numbers with bounds, anyOf, $ref into $defs): the first
    choice of an enum, the top of a bounded number (a good verdict), every property."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return schema_example(root.get("$defs", root.get("definitions", {}))[name], root)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return schema_example(options[0], root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: schema_example(sub, root) for name, sub in properties.items()}
    if kind == "array":
        count = schema.get("minItems", 1)
        return [schema_example(schema.get("items", {}), root) for _ in range(count)]
    if kind in ("number", "integer"):
        value = schema.get("maximum", schema.get("minimum", 1))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "scripted"


# the seed's user-frustration judge (fretcoach's hub_user_frustration_score), by its prompt
FRUSTRATION = "the user experiences confusion, annoyance, or disengagement"


def script_frustration(judge: MockJudge, score: float = 0.1, reason: str = "scripted") -> None:
    """The frustration judge answers its score under its own name (the default answer,
    ``{"score": 1.0}``, does not fit its schema)."""
    answer = {"User frustration": {"score": score, "reason": reason}}
    judge.script(FRUSTRATION, orjson.dumps(answer).decode())


def demo_answers(judge: MockJudge) -> MockJudge:
    """Script answers for the demo's samples: the critique pack's rubric and response
    comparison (the demo's pair) get answers of their own shape; every other prompt the
    default one."""
    dimensions: tuple[str, ...] = ("requirements_compliance", "technical_accuracy", "code_quality")
    dimensions += ("completeness_focus", "presentation_clarity", "safety")
    ratings = {d: {"reason": "scripted", "rating": 3} for d in dimensions}
    canary = {**ratings, "presentation_clarity": {"reason": "pleasantries", "rating": 1}}
    notes = {"key_strengths": ["scripted"], "key_weaknesses": []}
    judge.script("rating one AI-generated response", orjson.dumps(ratings | notes).decode())
    comparison = {
        "prompt_summary": "The player's weakest area over their recent sessions.",
        "response_a": {**ratings, "overall_quality": "Excellent"},
        "response_b": {**canary, "overall_quality": "Inadequate"},
        "preference": 1,
    }
    comparison["justification"] = "A is somewhat better: B opens and closes with pleasantries."
    comparison["key_differentiators"] = ["B's pleasantries", "B names no number"]
    judge.script("comparing two AI-generated responses", orjson.dumps(comparison).decode())
    return judge


def main() -> None:  # pragma: no cover - run as a subprocess by tests/test_scripted_judge.py
    """Run a mock judge on a fixed port: ``.venv/bin/python tests/scripted_judge.py 8099``.
    Every rule, shipped or a user's own, is answered in the format it asks for, with values
    varied by the prompt (``vary_answers``), so that the demo's and a newcomer's first scores
    look like scores."""
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8099
    with MockJudge(port=port, vary_answers=True) as judge:
        print(f"mock judge on {judge.base_url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
