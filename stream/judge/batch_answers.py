"""The judge a deferred job is finished with: its batch's answers, read as live ones are.

Each judge call the rule's kind makes again (the same prompts, in the same order) is matched
to its batch item by prompt and system prompt; the item's answer is read by the judge client
as a live answer is (the same parsers, the tokens priced at the batch rate). What a batch
could not answer is decided here (design record 25):

- an item the provider refused (a 4xx: the request's own fault), or a batch that failed
  validation: a ``JudgeError`` saying why, so the rule publishes an ``error`` score;
- an item that failed on the provider's side, expired in the 24 h window, was cancelled or
  never came back, or an answer that could not be read (a live call asks again): an ordinary
  call to the online judge (``fallbacks`` says why, for the score's ``details.batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.verdicts import Judge, ToolBox, Verdict
from ..errors import JudgeError
from ..ruleset.schema import PromptedRule
from .batch import ItemAnswered, ItemFailed
from .client import JudgeClient

# item failures that an ordinary call will not mend: the error score says why
FINAL = {"refused": "client_error", "batch_failed": "batch_failed"}


class BatchAnswers:
    """A ``Judge`` answering from one batch's results (``items`` by ``custom_id``); ``calls``:
    each call's (prompt, system prompt) to its ``custom_id``; ``online``: the judge asked
    where the batch gave no usable answer."""

    def __init__(
        self,
        client: JudgeClient,
        online: Judge,
        calls: dict[tuple[str, str | None], str],
        items: dict[str, ItemAnswered | ItemFailed],
    ) -> None:
        self.client = client
        self.online = online
        self.calls = calls
        self.items = items
        self.fallbacks: list[str] = []  # why each ordinary call was made instead
        self.answered: list[tuple[PromptedRule, str, str | None, Verdict]] = []

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        custom_id = self.calls.get((prompt, system))
        item = self.items.get(custom_id) if custom_id is not None else None
        if isinstance(item, ItemAnswered):
            request = self.client.request_for(rule, prompt, system)
            try:
                answer = item.answered(request)
            except ValueError as exc:  # not a chat completion (pydantic's ValidationError)
                why = f"the batch's answer could not be read ({str(exc)[:200]})"
            else:
                read = self.client.read_batched(rule, request, answer, quoted)
                if isinstance(read, Verdict):
                    self.answered.append((rule, prompt, system, read))
                    return read
                if read.kind != "invalid_answer":
                    raise read  # declined, or cut at its token cap: asking again says the same
                why = f"the batch's answer was unusable ({read})"
        elif isinstance(item, ItemFailed) and item.kind in FINAL:
            raise JudgeError(f"in batch: {item.reason}", kind=FINAL[item.kind])
        elif isinstance(item, ItemFailed):
            why = item.reason
        else:
            why = "the batch has no item for this call"
        self.fallbacks.append(why)
        return await self.online.judge(rule, prompt, system, quoted, tools)

    def details(self, batch_id: str, waited_s: float) -> dict[str, Any]:
        """What a batched score says of its batch (``details.batch``)."""
        said: dict[str, Any] = {"id": batch_id, "waited_s": round(waited_s, 1)}
        if self.fallbacks:
            said["fallback_calls"] = len(self.fallbacks)
            said["fallback"] = self.fallbacks[0]
        return said
