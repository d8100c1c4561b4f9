"""A rule's prompt for one trace or thread: variables looked up, rendered, substituted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingVariable
from ..ruleset.paths import lookup, lookup_nonempty, truthy
from ..ruleset.schema import AnyRule, LLMJudgeRule, PromptedRule
from ..text.template import render
from ..text.values import format_value


def resolve_variables(
    rule: AnyRule, document: Any, emptied: list[str] | None = None
) -> dict[str, Any]:
    """Mapped values of every variable; raises ``MissingVariable`` for the first missing one
    whose rule says ``missing: skip``. One that says ``missing: empty`` is the empty string
    (its name is added to ``emptied``)."""
    values = {}
    for name, spec in rule.variable_specs.items():
        try:
            if spec.allow_empty:
                values[name] = lookup(document, name, spec.path)
            else:
                values[name] = lookup_nonempty(document, name, spec.path, spec.empty_reason)
        except MissingVariable:
            if spec.missing == "skip":
                raise
            values[name] = ""
            if emptied is not None:
                emptied.append(name)
    return values


def fan_out_values(rule: AnyRule, values: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """With a ``fan_out`` rule: the values of each judge call (the list variable replaced by
    one item, the first ``max_items`` items) and how many items the list holds; else the
    values themselves, once."""
    spec = rule.fan_out if isinstance(rule, LLMJudgeRule) else None
    if spec is None:
        return [values], 1
    items = values[spec.variable]
    if not isinstance(items, list):
        items = [items]  # one document given as itself
    return [{**values, spec.variable: item} for item in items[: spec.max_items]], len(items)


def _texts(rule: PromptedRule, values: dict[str, Any]) -> dict[str, str]:
    specs = rule.variable_specs
    texts = {
        name: format_value(value, specs[name].format, specs[name].tag)
        for name, value in values.items()
    }
    texts.update(rule.options)
    return texts


def render_prompt(rule: PromptedRule, values: dict[str, Any], document: Any = None) -> str:
    """The user prompt, with the suffixes whose condition holds on ``document``."""
    return _render_with_suffixes(rule, _texts(rule, values), document)


def render_system(rule: PromptedRule, values: dict[str, Any]) -> str | None:
    """The system prompt, when the rule has one."""
    return _render_system(rule, _texts(rule, values))


DEFAULT_MAX_PROMPT_TOKENS = 32_000  # SCORER_JUDGE_MAX_PROMPT_TOKENS's default
CHARS_PER_TOKEN = 4  # a rough estimate for English text and JSON; no tokenizer is loaded
CUT_MARKER = "\n[... {n} characters cut by the scorer: the prompt was over {cap} tokens ...]\n"


class PromptTooLarge(ValueError):  # noqa: N818 - a kind of prompt, as the skipped score says
    """The prompt is over its cap and the rule says to skip rather than cut."""


@dataclass
class FittedPrompt:
    """A rule's prompt within its cap: what is sent, the trace's text as shown, what was cut."""

    prompt: str
    system: str | None
    quoted: list[str]
    cut: dict[str, int]  # variable -> characters cut from its middle
    cap: int = DEFAULT_MAX_PROMPT_TOKENS  # the cap it was fitted to (estimated tokens)
    uncut_tokens: int = 0  # its estimated size before anything was cut
    # values masked in the judge's copy, per kind (``judge.redact``); a plain dict: a
    # deferred job's items are stored as JSON
    redacted: dict[str, int] = field(default_factory=dict)


def prompt_cut(fitted: list[FittedPrompt], setting: str) -> dict[str, Any] | None:
    """What a rule's prompts lost to fit their cap, for the score's ``details.prompt_cut``:
    characters cut per variable (summed over the rule's calls), their total and estimated
    tokens, the largest prompt's estimated size before the cut, the cap and the ``setting``
    it came from; with several calls (fan-out), how many were cut. None when nothing was."""
    cut = [f for f in fitted if f.cut]
    if not cut:
        return None
    variables: dict[str, int] = {}
    for one in cut:
        for name, characters in one.cut.items():
            variables[name] = variables.get(name, 0) + characters
    characters = sum(variables.values())
    details: dict[str, Any] = {
        "variables": variables,
        "characters": characters,
        "tokens": -(-characters // CHARS_PER_TOKEN),
        "prompt_tokens": max(one.uncut_tokens for one in cut),
        "cap_tokens": cut[0].cap,
        "cap_setting": setting,
    }
    if len(fitted) > 1:
        details["calls_cut"] = len(cut)
    return details


def describe_cut(cut: dict[str, Any]) -> str:
    """One line for a decision record: what ``prompt_cut`` (as above) says."""
    went = ", ".join(f"{n} characters of {name}" for name, n in cut["variables"].items())
    return (
        f"prompt cut to fit {cut['cap_setting']} ({cut['cap_tokens']} tokens, about "
        f"{cut['prompt_tokens']} before the cut): {went} cut from the middle"
    )


def estimated_tokens(*texts: str | None) -> int:
    return sum(-(-len(t) // CHARS_PER_TOKEN) for t in texts if t)


def fit_prompt(
    rule: PromptedRule,
    values: dict[str, Any],
    document: Any,
    cap: int,
    redact: Callable[[str], tuple[str, Counter[str]]] | None = None,
) -> FittedPrompt:
    """Render ``rule``'s prompts, each variable's text through ``redact`` (the judge's copy:
    personal data and secrets masked); over ``cap`` estimated tokens, cut the largest
    variable in the middle (head and tail kept, a marker between) until they fit, or raise
    ``PromptTooLarge`` when the rule says ``oversize: skip`` or nothing left to cut would make
    it fit."""
    texts = _texts(rule, values)
    redacted: Counter[str] = Counter()
    if redact is not None:
        for variable in values:
            texts[variable], found = redact(texts[variable])
            redacted.update(found)
    original = dict(texts)
    cut: dict[str, int] = {}
    marker_len = len(CUT_MARKER.format(n=10**9, cap=cap))
    uncut: int | None = None
    while True:
        prompt = _render_with_suffixes(rule, texts, document)
        system = _render_system(rule, texts)
        size = estimated_tokens(prompt, system)
        uncut = size if uncut is None else uncut
        if size <= cap:
            quoted = [texts[name] for name in values]
            return FittedPrompt(prompt, system, quoted, cut, cap, uncut, dict(redacted))
        if rule.judge.oversize == "skip":
            raise PromptTooLarge(f"the prompt is about {size} tokens, over the cap of {cap}")
        # the largest variable as shown now gives up what is over (plus room for the marker)
        # (a variable shown twice gives up twice as much: the loop measures again)
        name = max(values, key=lambda n: len(texts[n]), default=None)
        if name is None or len(texts[name]) <= 2 * marker_len:
            raise PromptTooLarge(
                f"the prompt is about {size} tokens, over the cap of {cap}, and its variables "
                "are too small to cut it down"
            )
        excess = min((size - cap) * CHARS_PER_TOKEN + marker_len, len(texts[name]) - marker_len)
        text = original[name]
        keep = len(text) - cut.get(name, 0) - excess
        cut[name] = len(text) - keep
        head, tail = text[: keep // 2], text[len(text) - (keep - keep // 2) :]
        texts[name] = head + CUT_MARKER.format(n=cut[name], cap=cap) + tail


def _render_system(rule: PromptedRule, texts: dict[str, str]) -> str | None:
    return render(rule.system_prompt, texts) if rule.system_prompt is not None else None


def _render_with_suffixes(rule: PromptedRule, texts: dict[str, str], document: Any) -> str:
    prompt = render(rule.prompt, texts)
    for suffix in rule.suffixes:
        if truthy(document, suffix.when):
            prompt += render(suffix.text, texts)
    return prompt
