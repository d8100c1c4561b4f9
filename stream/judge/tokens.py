"""Prompt tokens counted before a call: what ``scorer estimate`` and the worker's start-up
figures count with.

No tokenizer is a dependency, and nothing may download one at run time (a tokenizer's
vocabulary is a file fetched on first use): the count is the one the pacer and OpenAI's rate
limiter estimate with, the characters / 4 (``transport.estimate_tokens``), plus the chat
format's own tokens, 3 a message and 3 priming the answer (OpenAI's cookbook counts them so
for its chat models). ``ratio`` corrects the characters / 4 where answers have reported the
tokens the provider counted (reported / estimated, over calls of the same prompts); the
method says which count was used.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MESSAGE = 3  # a chat message's own tokens (role, separators)
PRIMING = 3  # the tokens that open the answer


@dataclass(frozen=True)
class TokenCounter:
    """Counts a call's prompt tokens: characters / 4, times ``ratio`` when calibrated."""

    ratio: float = 1.0
    calibrated_from: int = 0  # the calls the ratio was measured over (0: not calibrated)

    @property
    def method(self) -> str:
        if self.calibrated_from:
            return (
                f"characters / 4 x {self.ratio:.3f}, calibrated on {self.calibrated_from} "
                "calls' reported usage (no tokenizer)"
            )
        return "characters / 4 (no tokenizer: a provider's count may differ by 10-30 %)"

    def text(self, text: str | None) -> int:
        """The tokens of ``text``."""
        return round(len(text or "") / 4 * self.ratio)

    def messages(self, model: str, system: str | None, prompt: str) -> int:
        """The prompt tokens of a call with ``system`` (None: none) and ``prompt`` to
        ``model`` (every model is counted alike here)."""
        count = self.text(prompt) + PER_MESSAGE
        if system is not None:
            count += self.text(system) + PER_MESSAGE
        return count + PRIMING
