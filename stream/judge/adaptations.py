"""What each model of one endpoint has shown it does not take, learnt from its refusals and
remembered for the worker's life: structured output (for one rule: a model may refuse one
schema and take another), ``temperature`` (reasoning models take only their own),
``max_tokens`` (they take ``max_completion_tokens``) and ``logprobs`` (they return none). Each lesson is said in the log once."""

from __future__ import annotations

import logging

from .transport import ChatRequest

log = logging.getLogger("stream.judge.client")  # said where the client says the rest


class ModelAdaptations:
    """The refusals learnt so far, applied to every new request."""

    def __init__(self, structured_output: bool) -> None:
        self.structured_output = structured_output  # the deployment's wish
        self._text_only: set[tuple[str, str]] = set()  # (rule, model) refusing a schema
        self._refuses: dict[str, set[str]] = {}  # model -> parameters it does not take
        self._said: set[tuple[str, str]] = set()  # (what, model) said in the log once

    def fit(self, request: ChatRequest, rule_id: str) -> ChatRequest:
        """``request`` (new) without what its model has refused."""
        refuses = self._refuses.get(request.model, set())
        if not self.structured_output or (rule_id, request.model) in self._text_only:
            request.schema = None
        if "temperature" in refuses:
            request.temperature = None
        if "max_tokens" in refuses:
            request.max_tokens_name = "max_completion_tokens"
        if "logprobs" in refuses:
            request.top_logprobs = None
        return request

    def drop_structured_output(self, request: ChatRequest, rule_id: str) -> None:
        """Older vLLM / Ollama builds, some gateways and some models refuse response_format:
        ask again without it, and for this rule on this model rely on parsing the text answer
        from now on (said once)."""
        request.schema = None
        if (rule_id, request.model) not in self._text_only:
            self._text_only.add((rule_id, request.model))
            log.warning(
                "judge endpoint rejects structured output for rule %s on %s; parsing text "
                "answers for it from now on",
                rule_id,
                request.model,
            )

    def drop_parameter(self, request: ChatRequest, param: str | None) -> bool:
        """A model that does not take ``temperature``, ``max_tokens`` or ``logprobs``
        (reasoning models): from now on it is called without the first and the last, and with
        ``max_completion_tokens`` for the second (said once). False for a parameter the judge
        cannot do without."""
        if param == "temperature" and request.temperature is not None:
            request.temperature = None
        elif param == "max_tokens" and request.max_tokens_name == "max_tokens":
            request.max_tokens_name = "max_completion_tokens"
        elif param in ("logprobs", "top_logprobs") and request.top_logprobs is not None:
            request.top_logprobs = None  # its verdicts go on without probabilities (said once)
            param = "logprobs"
        else:
            return False
        self._refuses.setdefault(request.model, set()).add(param)
        self.say_once(
            param,
            request.model,
            f"judge model {request.model} does not take {param}; asking without it",
        )
        return True

    def say_once(self, what: str, model: str, message: str) -> None:
        """Log ``message`` the first time ``what`` is learnt of ``model``."""
        if (what, model) not in self._said:
            self._said.add((what, model))
            log.warning("%s", message)
